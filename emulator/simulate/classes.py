"""Simulate each class of identical ranks once, when that provably gives every rank's exact times.

A 1,024-rank 3-D parallel job has a handful of distinct rank programs (one per pipeline stage,
after the launcher's deduplication). Ranks of one class share a trace and have equal estimated
durations; if, in addition, every collective a rank joins has members from the same set of
classes as its class representative's collective at that row, and every p2p peer lies in the
same class as the representative's peer, then by induction over simulated time all ranks of a
class have identical op times: a collective ends at max(ready of members) + duration, and that
max only depends on which classes take part. So the simulator runs the representatives only
(a collective expects one arrival per class present) and every rank takes its class's times.

Classes start as (trace, durations) and are refined until those conditions hold (colour
refinement: a rank's class also says which classes its groups and peers hold). One odd rank is
the common case: rank 0 logs the loss, so its trace differs, and the ranks that share a group
with it no longer see the same classes as their peers; refinement gives each such position a
class of its own (a TP x DP job with a distinct rank 0 has four: rank 0, its tensor-parallel
mates, its data-parallel mates, everyone else) instead of simulating every rank.

`quotient` checks those conditions and returns None when any fails (the caller then simulates
every rank); it also requires that each representative's groups hold the representatives of the
classes present and that its p2p peers are representatives, so the sub-job is self-contained:
representatives are chosen by walking out from rank 0 through groups and peers.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from emulator.collate.job import CollatedJob


def _initial_classes(job: CollatedJob, durations: list[np.ndarray]) -> list[int]:
    """A class per (representative trace, durations): ranks whose programs and op times are the same."""
    cls: list[int] = [0] * job.world_size
    firsts: list[int] = []
    by_trace: dict[int, list[int]] = {}
    for v, d in zip(job.ranks, durations, strict=True):
        cands = by_trace.setdefault(v.rep.rank, [])
        for c in cands:
            if durations[firsts[c]] is d or np.array_equal(durations[firsts[c]], d):
                cls[v.rank] = c
                break
        else:
            cls[v.rank] = len(firsts)
            cands.append(len(firsts))
            firsts.append(v.rank)
    return cls


class _ClassSets:
    """The set of classes among a group's members, computed once per members object: ranks share their
    group tuples, and each is held by a rank view while this lives, so its id is a stable key."""

    def __init__(self, cls: list[int]):
        self.cls = cls
        self._by_id: dict[int, frozenset] = {}
        self._by_key: dict[tuple, frozenset] = {}

    def __call__(self, members) -> frozenset:
        s = self._by_id.get(id(members))
        if s is None:
            key = tuple(members)
            s = self._by_key.get(key)
            if s is None:
                s = self._by_key[key] = frozenset(self.cls[m] for m in members)
            self._by_id[id(members)] = s
        return s


def _refine_once(job: CollatedJob, cls: list[int], used: dict, everyone: tuple) -> tuple[list[int], int]:
    """Each rank's class split by the classes present in each of its group slots and at each peer slot;
    also the number of classes after the split."""
    present = _ClassSets(cls)
    colour: dict[tuple, int] = {}
    new = [0] * job.world_size
    for v in job.ranks:
        group_slots, peer_slots = used[v.rep.rank]
        key = (cls[v.rank], tuple(present(v.members(s, everyone)) for s in group_slots),
               tuple(None if v.peers[s] is None else cls[v.peers[s]] for s in peer_slots))
        new[v.rank] = colour.setdefault(key, len(colour))
    return new, len(colour)


def _refine(job: CollatedJob, cls: list[int], used: dict, everyone: tuple) -> list[int]:
    """Split classes until every rank of a class sees the same classes in each group slot and peer slot."""
    n = len(set(cls))
    while n < job.world_size:
        cls, split = _refine_once(job, cls, used, everyone)
        if split == n:
            break
        n = split
    return cls


def _representatives(job: CollatedJob, cls: list[int], used: dict, everyone: tuple) -> list[int]:
    """One rank per class, found by walking out from rank 0 through its groups and peers, so each
    representative's groups tend to hold the other classes' representatives (checked afterwards)."""
    reps: list[int | None] = [None] * (max(cls) + 1)
    for start in range(job.world_size):  # a job in several unconnected parts: walk each
        if reps[cls[start]] is not None:
            continue
        reps[cls[start]] = start
        todo = deque([start])
        while todo:
            v = job.ranks[todo.popleft()]
            group_slots, peer_slots = used[v.rep.rank]
            neighbours = [v.peers[s] for s in sorted(peer_slots) if v.peers[s] is not None]
            for s in sorted(group_slots):
                neighbours.extend(v.members(s, everyone))
            for m in neighbours:
                if reps[cls[m]] is None:
                    reps[cls[m]] = m
                    todo.append(m)
    return reps  # type: ignore[return-value]


def quotient(job: CollatedJob, durations: list[np.ndarray]) -> tuple[list[int], list[int]] | None:
    """(class representative ranks, class index of every rank), or None if classes are not provably exact."""
    world = job.world_size
    everyone = tuple(range(world))
    # per trace: the group slots its collectives and waits name, the peer slots its p2p rows name
    # (emulator.collate.views): the conditions hold row by row exactly when they hold slot by slot
    used = {r: rep.slots.used(rep.kind) for r, rep in job.reps.items()}
    cls = _refine(job, _initial_classes(job, durations), used, everyone)
    reps = _representatives(job, cls, used, everyone)
    if len(reps) == world:
        return None
    rep_set = set(reps)
    signature = _ClassSets(cls)

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
