"""Partitions of the world read off a program's process groups (a DeviceMesh dimension is one).

Rank deduplication probes roles along them (`emulator.launch.roles`) and rank expansion maps a
representative's groups and peers onto another rank through them (`emulator.trace.expand`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Partition:
    """Disjoint groups of one kind (e.g. all tp groups of a mesh); `complete` when they cover the world."""

    groups: list[tuple[int, ...]]
    names: list[str]
    complete: bool
    where: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (group index, position)

    def __post_init__(self):
        self.where = {r: (gi, pos) for gi, g in enumerate(self.groups) for pos, r in enumerate(g)}

    @property
    def size(self) -> int:
        return len(self.groups[0]) if self.groups else 0

    def position(self, rank: int) -> int:
        """Index of `rank` inside its group of this partition (-1 if no group holds it)."""
        return self.where.get(rank, (-1, -1))[1]

    def group_of(self, rank: int) -> int | None:
        hit = self.where.get(rank)
        return hit[0] if hit else None

    def to_json(self) -> dict:
        return {"groups": [list(g) for g in self.groups], "names": self.names, "complete": self.complete}


def partitions(groups: list[dict], world_size: int) -> list[Partition]:
    """Partitions of the world found in a program's process groups (creation order), finest first.

    Groups of one size are packed greedily, in creation order, into the first partition they are
    disjoint from; a DeviceMesh dimension therefore becomes one partition. Groups holding the
    whole world (and size-1 groups) say nothing about roles and are skipped, unless the world
    group is all there is, in which case it is the one partition (so ranks are still probed).
    """
    world = tuple(range(world_size))
    open_parts: list[tuple[list[tuple[int, ...]], list[str], set[int]]] = []
    for g in groups:
        ranks = tuple(int(r) for r in g["ranks"])
        if len(ranks) <= 1 or tuple(sorted(ranks)) == world:
            continue
        for members, names, covered in open_parts:
            if len(members[0]) == len(ranks) and covered.isdisjoint(ranks):
                members.append(ranks)
                names.append(str(g.get("name", "")))
                covered.update(ranks)
                break
        else:
            open_parts.append(([ranks], [str(g.get("name", ""))], set(ranks)))
    parts = [Partition(m, n, complete=len(c) == world_size) for m, n, c in open_parts]
    if not parts and world_size > 1:
        names = [str(g.get("name", "")) for g in groups if tuple(sorted(int(r) for r in g["ranks"])) == world]
        parts = [Partition([world], names[:1] or ["world"], complete=True)]
    parts.sort(key=lambda p: (not p.complete, p.size))
    return parts
