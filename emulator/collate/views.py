"""Rank views: a representative's trace read as another rank of the job, at the cost of its distinct groups.

A deduplicated job of 12,288 ranks has a dozen traces, and each rank's collective rows differ from its
representative's only in which group and which peer they name. Those are few: a rank's thousands of
collective rows go to its TP group, its DP group, the world and two pipeline neighbours. So a
representative's rank-dependent rows are indexed once into *slots* (`RowSlots`: its distinct
(group name, group ranks) pairs and distinct peers), and a rank is the slots' values for it
(`RankView.groups`, `RankView.peers`); a row's group or peer is looked up through its slot.
Building a rank and every per-rank check then grows with the slots, not with the rows, which is what
lets collating, the hang check, collective estimation and the class check of a large data-parallel
job stay independent of how many micro-batches and layers each rank runs.

`RankView.group`, `.group_ranks` and `.peer` read like the per-row dicts they replace (row -> value,
only the rows that have one).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emulator.collate.job import RepTrace


@dataclass
class RowSlots:
    """A trace's rank-dependent rows (collectives, p2p, completion waits naming a group) and their slots."""

    rows: list[int]  # the ranked rows, in host order
    pos: dict[int, int]  # row -> index into rows
    group_keys: list[tuple]  # distinct (group name, group ranks or None), in first-seen order
    group_slot: list[int]  # per ranked row: index into group_keys
    peer_keys: list[int | None]  # distinct peers (None: the row names none)
    peer_slot: list[int]  # per ranked row: index into peer_keys
    has_ranks: list[bool]  # per ranked row: the trace recorded the group's ranks
    has_peer: list[bool]  # per ranked row: the row names a peer

    @classmethod
    def of(cls, rep: RepTrace, rows: list[int]) -> RowSlots:
        gk: dict[tuple, int] = {}
        pk: dict[int | None, int] = {}
        gslot, pslot = [], []
        for i in rows:
            key = (rep.group[i], rep.group_ranks[i])
            gslot.append(gk.setdefault(key, len(gk)))
            p = rep.peer[i]
            p = int(p) if p is not None else None
            pslot.append(pk.setdefault(p, len(pk)))
        return cls(rows=rows, pos={i: k for k, i in enumerate(rows)}, group_keys=list(gk), group_slot=gslot,
                   peer_keys=list(pk), peer_slot=pslot, has_ranks=[rep.group_ranks[i] is not None for i in rows],
                   has_peer=[rep.peer[i] is not None for i in rows])

    def used(self, kinds: list[str]) -> tuple[set[int], set[int]]:
        """(group slots the collectives and waits name, peer slots the p2p rows name)."""
        groups, peers = set(), set()
        for k, i in enumerate(self.rows):
            if kinds[i] == "p2p":
                peers.add(self.peer_slot[k])
            else:
                groups.add(self.group_slot[k])
        return groups, peers


class _RowValues(Mapping):
    """row -> this rank's value for the row's slot, over the ranked rows that have one."""

    __slots__ = ("_slots", "_values", "_which", "_present", "_index")

    def __init__(self, slots: RowSlots, values: list, which: list[int], present: list[bool] | None, index: int):
        self._slots, self._values, self._which, self._present = slots, values, which, present
        self._index = index  # 0 / 1: the name / ranks of a (name, ranks) slot value; -1: the value itself

    def __getitem__(self, row: int):
        k = self._slots.pos[row]  # KeyError for a row that names no group or peer
        if self._present is not None and not self._present[k]:
            raise KeyError(row)
        v = self._values[self._which[k]]
        return v[self._index] if self._index >= 0 else v

    def __iter__(self) -> Iterator[int]:
        if self._present is None:
            return iter(self._slots.rows)
        return (i for i, ok in zip(self._slots.rows, self._present, strict=True) if ok)

    def __len__(self) -> int:
        return len(self._slots.rows) if self._present is None else sum(self._present)


@dataclass
class RankView:
    """A rank of the job: a representative's trace with this rank's own groups and peers.

    `groups[s]` is (group name, group ranks or None) of the trace's group slot `s` for this rank,
    `peers[s]` the peer of its peer slot `s`."""

    rank: int
    rep: RepTrace
    groups: list[tuple]
    peers: list[int | None]
    group: Mapping = field(init=False, repr=False)
    group_ranks: Mapping = field(init=False, repr=False)
    peer: Mapping = field(init=False, repr=False)

    def __post_init__(self):
        s = self.rep.slots
        self.group = _RowValues(s, self.groups, s.group_slot, None, 0)
        self.group_ranks = _RowValues(s, self.groups, s.group_slot, s.has_ranks, 1)
        self.peer = _RowValues(s, self.peers, s.peer_slot, s.has_peer, -1)

    def members(self, slot: int, everyone):
        """The ranks of group slot `slot` for this rank; `everyone` (the job's ranks, one shared object)
        when the trace recorded none."""
        return self.groups[slot][1] or everyone


def own_view(rep: RepTrace) -> RankView:
    """The representative itself: its slots' recorded values."""
    return RankView(rank=rep.rank, rep=rep, groups=list(rep.slots.group_keys), peers=list(rep.slots.peer_keys))
