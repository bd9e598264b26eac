"""Spike clipping: a host gap far above the same call's gap elsewhere in the run is the machine, not the program."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

_LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")

SPIKE_FACTOR = 3.0  # a host gap above this many times its call site's median is a measurement spike
SPIKE_MIN_SITE = 4  # call sites seen fewer times keep their gaps as measured


def clip_spikes(ops: list[str], phases: list, modules: list, gaps: list[float]) -> list[float]:
    """Host gaps with the emulating machine's preemption spikes clipped.

    Why: gaps are process CPU time, and on a busy or virtualised machine a call now and then is
    charged for time the process did not run (the hypervisor took the core, the kernel counted it
    as ours): a single gap of tens of milliseconds among neighbours of a hundred microseconds. The
    same op at the same place of every layer and iteration does the same host work, so such an
    outlier is the machine, not the program. Call site = (op, phase, module path with layer
    indices dropped); a gap above `SPIKE_FACTOR` x its call site's median is cut to that bound. Call sites of fewer than
    `SPIKE_MIN_SITE` rows (the data loader's gap before the first op, logging, a checkpoint)
    are left alone: a one-off host cost is real.
    """
    sites: dict[tuple, list[int]] = defaultdict(list)
    paths: dict[str, str] = {}  # module path -> without layer indices (a trace has few distinct paths)
    for i, (op, ph, mod) in enumerate(zip(ops, phases, modules, strict=True)):
        path = paths.get(mod)
        if path is None:
            path = paths[mod] = _LAYER_INDEX.sub(".#", mod or "")
        sites[(op, ph, path)].append(i)
    out = list(gaps)
    for rows in sites.values():
        if len(rows) < SPIKE_MIN_SITE:
            continue
        bound = SPIKE_FACTOR * float(np.median([gaps[i] for i in rows]))
        for i in rows:
            if out[i] > bound:
                out[i] = bound
    return out


def same_position_medians(iterations: list[int], ops: list[str], gaps: list[float]) -> list[float]:
    """Host gaps of repeated iterations replaced by the median of the same position over those iterations.

    Why: a steady training iteration repeats the same op sequence, so the gap before its k-th op is the
    same host work every time; one sample per gap carries this machine's moment-to-moment speed, the
    median over the iterations that repeat the sequence does not. Only iterations >= 0 whose op
    sequence is exactly the most common one take part (the first step often allocates optimizer
    state, a changed batch shape is another program); with fewer than two such iterations the gaps
    stay as they are.
    """
    rows_by_it: dict[int, list[int]] = defaultdict(list)
    for i, it in enumerate(iterations):
        if it >= 0:
            rows_by_it[it].append(i)
    sequences: dict[tuple, list[int]] = defaultdict(list)
    for it, rows in rows_by_it.items():
        sequences[tuple(ops[i] for i in rows)].append(it)
    if not sequences:
        return list(gaps)
    repeated = max(sequences.values(), key=len)
    if len(repeated) < 2:
        return list(gaps)
    out = list(gaps)
    table = np.array([[gaps[i] for i in rows_by_it[it]] for it in repeated])
    medians = np.median(table, axis=0)
    for it in repeated:
        for i, m in zip(rows_by_it[it], medians, strict=True):
            out[i] = float(m)
    return out
