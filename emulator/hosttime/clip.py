"""Spike clipping: a host gap far above the same call's gap elsewhere in the run is the machine, not the program."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

_LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")

SPIKE_FACTOR = 3.0  # a host gap above this many times its class median is a measurement spike
SPIKE_MIN_CLASS = 4  # classes smaller than this keep their gaps as measured


def clip_spikes(ops: list[str], phases: list, modules: list, gaps: list[float]) -> list[float]:
    """Host gaps with the emulating machine's preemption spikes clipped.

    Why: gaps are process CPU time, and on a busy or virtualised machine a call now and then is
    charged for time the process did not run (the hypervisor took the core, the kernel counted it
    as ours): single gaps of 50-100 ms among neighbours of 100 us. The same op at the same place
    of every layer and iteration does the same host work, so such an outlier is the machine, not
    the program. Class = (op, phase, module path with layer indices dropped); a gap above
    `SPIKE_FACTOR` x its class median is cut to that bound. Classes of fewer than
    `SPIKE_MIN_CLASS` rows (the data loader's gap before the first op, logging, a checkpoint)
    are left alone: a one-off host cost is real.
    """
    classes: dict[tuple, list[int]] = defaultdict(list)
    for i, (op, ph, mod) in enumerate(zip(ops, phases, modules, strict=True)):
        classes[(op, ph, _LAYER_INDEX.sub(".#", mod or ""))].append(i)
    out = list(gaps)
    for rows in classes.values():
        if len(rows) < SPIKE_MIN_CLASS:
            continue
        bound = SPIKE_FACTOR * float(np.median([gaps[i] for i in rows]))
        for i in rows:
            if out[i] > bound:
                out[i] = bound
    return out
