"""From simulated op times to the numbers a user asks for: iteration times and where time went.

Iterations are the trace's `iteration` values: the worker numbers rows from -1 and increments
after each optimizer step returns, so -1 is the first iteration *including* the program's setup
(weights copied to the device). Iteration i ends when the last rank finishes its last row of
iteration i; its time is that end minus the previous iteration's end (the first: minus the start
of the first forward/backward op, so setup such as model init is reported apart as setup_s). The
steady state is the median of the iterations after the first (the first pays setup and warm-up
such as DDP's bucket rebuild and optimizer-state allocation), or the only one when there is
one; but never less than the busiest rank's host time per steady iteration. Why the floor: a
rank's host runs its iterations one after the other, so a steady period is at least one
iteration's host work; with few iterations the second starts its host work under the first's
device tail and its end-to-end time alone comes out short (the 8-rank demo: 35.6 ms against
41.2 ms of host work per iteration). Rows after the last optimizer step (a final `.item()`, a
checkpoint) are not counted as an iteration.

Breakdown (per iteration, over the steady-state iterations, averaged over sampled ranks: one
per distinct trace, at most 32):
- compute: time at least one stream of the rank runs a kernel, memset or memcpy;
- communication: time at least one collective/p2p of the rank is running (overlapped or not);
- exposed_communication: communication time during which no compute runs;
- idle: the rest of the iteration (waiting for the host, for other ranks, pipeline bubbles);
  compute + exposed_communication + idle = iteration time;
- host: host-thread busy time (recorded host gaps + launch overheads + `host_op` rows); it overlaps the others.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from emulator.collate.job import RepTrace
from emulator.simulate.engine import SimResult
from emulator.trace.schema import COMM_KINDS, DEVICE_KINDS, HOST_KINDS


@dataclass
class Timing:
    iterations: list[int]  # iteration ids, in order
    iteration_end_s: list[float]
    iterations_s: list[float]
    iteration_time_s: float
    steady: list[int]  # iteration ids the steady state is taken over
    breakdown_s: dict[str, float]
    setup_s: float = 0.0  # program start to the first forward/backward op (model init, weight copies)
    busiest_host_s: float = 0.0  # the busiest rank's host work per steady iteration (breakdown_s["host"]: the mean)


def _rep_index(rep: RepTrace) -> dict:
    cache = getattr(rep, "_analysis_index", None)
    if cache is None:
        it = np.asarray(rep.iteration)
        kinds = rep.kind
        compute = np.array([k in DEVICE_KINDS and launch for k, launch in zip(kinds, rep.launches, strict=True)],
                           dtype=bool)
        comm = np.array([k in COMM_KINDS for k in kinds], dtype=bool)
        host_ops = np.array([k in HOST_KINDS for k in kinds], dtype=bool)
        first = next((i for i, p in enumerate(rep.phase) if p in ("forward", "backward")), None)
        cache = dict(it=it, ids=sorted(set(rep.iteration)), compute=compute, comm=comm, first_train=first,
                     paid=np.asarray(rep.pays_launch, dtype=bool), host_ops=host_ops,
                     by_it={v: np.flatnonzero(it == v) for v in set(rep.iteration)})
        rep._analysis_index = cache  # type: ignore[attr-defined]
    if cache.get("gap_of") is not rep.host_gap:  # the host-time stage set new gaps (a host-speed range)
        cache.update(gap=np.asarray(rep.host_gap, dtype=float), gap_of=rep.host_gap)
    return cache


def _union(s: np.ndarray, e: np.ndarray) -> float:
    if len(s) == 0:
        return 0.0
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    prev = np.concatenate(([-np.inf], np.maximum.accumulate(e)[:-1]))
    return float(np.maximum(0.0, e - np.maximum(s, prev)).sum())


def _clip(s, e, lo, hi):
    s2, e2 = np.clip(s, lo, hi), np.clip(e, lo, hi)
    keep = e2 > s2
    return s2[keep], e2[keep]


def timing(result: SimResult, launch_overhead_s: float = 0.0, max_sampled_ranks: int = 32) -> Timing:
    job = result.job
    ids = sorted({i for rep in job.reps.values() for i in _rep_index(rep)["ids"]})
    ends = {i: 0.0 for i in ids}
    seen: set[int] = set()  # the ranks of a simulated class share its arrays (simulate.classes)
    for v, end, host_end in zip(job.ranks, result.end, result.host_end, strict=True):
        if id(end) in seen:
            continue
        seen.add(id(end))
        idx = _rep_index(v.rep)["by_it"]
        for i, rows in idx.items():
            if len(rows):
                m = float(end[rows].max())
                if m > ends[i]:
                    ends[i] = m
        last = ids[-1] if ids else None
        if last is not None and host_end > ends[last]:
            ends[last] = host_end
    ids = _drop_trailing_partial(job, ids)
    running = 0.0
    end_list = []
    for i in ids:  # an iteration cannot end before the one before it
        running = max(running, ends[i])
        end_list.append(running)
    setup = _setup_end(result)
    iterations_s, prev = [], setup
    for e in end_list:
        iterations_s.append(e - prev)
        prev = e
    if not iterations_s:
        return Timing(ids, end_list, [], 0.0, [], dict.fromkeys(
            ("compute", "communication", "exposed_communication", "host", "idle"), 0.0))
    steady_vals = iterations_s[1:] if len(iterations_s) > 1 else iterations_s
    steady = ids[1:] if len(ids) > 1 else ids
    t_iter = float(statistics.median(steady_vals))
    # window of the steady iterations
    pos = {i: k for k, i in enumerate(ids)}
    lo = end_list[pos[steady[0]] - 1] if pos[steady[0]] > 0 else setup
    hi = end_list[pos[steady[-1]]]
    n_it = len(steady)
    sample = _sample_ranks(job, max_sampled_ranks)
    acc = dict(compute=0.0, communication=0.0, exposed_communication=0.0, host=0.0, idle=0.0)
    busiest_host = 0.0
    for r in sample:
        v = job.ranks[r]
        ix = _rep_index(v.rep)
        s, e = result.start[r], result.end[r]
        cs, ce = _clip(s[ix["compute"]], e[ix["compute"]], lo, hi)
        ms, me = _clip(s[ix["comm"]], e[ix["comm"]], lo, hi)
        compute = _union(cs, ce)
        comm = _union(ms, me)
        both = _union(np.concatenate([cs, ms]), np.concatenate([ce, me]))
        in_window = np.isin(ix["it"], steady)
        host = float(ix["gap"][in_window].sum()) + launch_overhead_s * int(
            np.count_nonzero(in_window & ix["paid"]))
        on_host = in_window & ix["host_ops"]
        if on_host.any():  # ops the host's CPU ran (CPU offload)
            host += float((e[on_host] - s[on_host]).sum())
        acc["compute"] += compute / n_it
        acc["communication"] += comm / n_it
        acc["exposed_communication"] += (both - compute) / n_it
        acc["host"] += host / n_it
        busiest_host = max(busiest_host, host / n_it)
    k = max(len(sample), 1)
    breakdown = {key: val / k for key, val in acc.items()}
    window = (hi - lo) / n_it
    if len(iterations_s) > 1 and busiest_host > t_iter:
        t_iter = window = busiest_host
    breakdown["idle"] = max(0.0, window - breakdown["compute"] - breakdown["exposed_communication"])
    return Timing(ids, end_list, iterations_s, t_iter, steady, breakdown, setup, busiest_host)


def _setup_end(result: SimResult) -> float:
    """When the first forward/backward row starts (earliest rank): what comes before is setup, not training."""
    starts = []
    for v, start in zip(result.job.ranks, result.start, strict=True):
        first = _rep_index(v.rep)["first_train"]
        if first is not None:
            starts.append(float(start[first]))
    return min(starts) if starts else 0.0


def _drop_trailing_partial(job, ids: list[int]) -> list[int]:
    """Rows after the last optimizer step (a final `.item()`, a checkpoint) are not an iteration."""
    if len(ids) < 2:
        return ids
    last = ids[-1]
    for rep in job.reps.values():
        phases = [p for p, i in zip(rep.phase, rep.iteration, strict=True) if i == last]
        earlier = [p for p, i in zip(rep.phase, rep.iteration, strict=True) if i == ids[-2]]
        if "optimizer" in phases or "optimizer" not in earlier:
            return ids
    return ids[:-1]


def _sample_ranks(job, limit: int) -> list[int]:
    seen, out = set(), []
    for v in job.ranks:
        if v.rep.rank not in seen:
            seen.add(v.rep.rank)
            out.append(v.rank)
    if len(out) > limit:
        step = len(out) / limit
        out = [out[int(i * step)] for i in range(limit)]
    return out
