"""Simulate each class of identical ranks once, when that provably gives every rank's exact times.

A 1,024-rank 3-D parallel job has a handful of distinct rank programs (one per pipeline stage,
after the launcher's deduplication). Ranks of one class share a trace and have equal estimated
durations; if, in addition, every collective a rank joins has members from the same set of
classes as its class representative's collective at that row, and every p2p peer lies in the
same class as the representative's peer, then by induction over simulated time all ranks of a
class have identical op times: a collective ends at max(ready of members) + duration, and that
max only depends on which classes take part. So the simulator runs the representatives only
(a collective expects one arrival per class present) and every rank takes its class's times.

`quotient` checks those conditions and returns None when any fails (the caller then simulates
every rank); it also requires that each representative's groups hold the representatives of the
classes present and that its p2p peers are representatives, so the sub-job is self-contained.
"""

from __future__ import annotations

import numpy as np

from emulator.collate.job import CollatedJob


def quotient(job: CollatedJob, durations: list[np.ndarray]) -> tuple[list[int], list[int]] | None:
    """(class representative ranks, class index of every rank), or None if classes are not provably exact."""
    world = job.world_size
    cls: list[int] = [0] * world
    reps: list[int] = []
    by_trace: dict[int, list[int]] = {}
    for v, d in zip(job.ranks, durations, strict=True):
        cands = by_trace.setdefault(v.rep.rank, [])
        for c in cands:
            if durations[reps[c]] is d or np.array_equal(durations[reps[c]], d):
                cls[v.rank] = c
                break
        else:
            cls[v.rank] = len(reps)
            cands.append(len(reps))
            reps.append(v.rank)
    if len(reps) == world:
        return None
    rep_set = set(reps)
    sig_cache: dict = {}
    sig_by_id: dict[int, frozenset] = {}  # expanded ranks share their group tuples: skip hashing them per row

    def signature(members) -> frozenset:
        s = sig_by_id.get(id(members))  # every `members` is held by a rank view for the whole check
        if s is None:
            key = tuple(members)
            s = sig_cache.get(key)
            if s is None:
                s = sig_cache[key] = frozenset(cls[m] for m in members)
            sig_by_id[id(members)] = s
        return s

    everyone = tuple(range(world))
    # per trace: the group slots its collectives and waits name, the peer slots its p2p rows name
    # (emulator.collate.views): the conditions hold row by row exactly when they hold slot by slot
    used = {r: rep.slots.used(rep.kind) for r, rep in job.reps.items()}
    for v in job.ranks:
        rv = job.ranks[reps[cls[v.rank]]]
        is_rep = v.rank in rep_set
        group_slots, peer_slots = used[v.rep.rank]
        peers_by_class: dict[int, set] = {}
        for s in peer_slots:
            p, rp = v.peers[s], rv.peers[s]
            if p is None or rp is None or cls[p] != cls[rp] or (is_rep and p not in rep_set):
                return None
            peers_by_class.setdefault(cls[p], set()).add(p)
        for s in group_slots:
            members = v.members(s, everyone)
            if signature(members) != signature(rv.members(s, everyone)):
                return None
            if is_rep and not {cls[r] for r in members if r in rep_set} == signature(members):
                return None
        if any(len(s) > 1 for s in peers_by_class.values()):
            return None  # several peers of one class: per-peer message order would not map onto the class
    return reps, cls
