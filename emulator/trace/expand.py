"""Rank expansion: a representative's trace rewritten as another rank of the same role.

Deduplicated ranks have no trace of their own (`emulation.json` `rank_map`); collate reads them
as their representative's rows with the rank, the collective groups (the group of the same
partition that holds the new rank) and p2p peers (same position in the corresponding group)
rewritten.
"""

from __future__ import annotations

import pyarrow as pa

from emulator.trace.partitions import Partition, partitions


class GroupIndex:
    """A job's process groups, indexed once for expanding many of its ranks: their partitions, each
    group's ranks by name, and where each named group or rank set sits in a partition."""

    def __init__(self, groups: list[dict], world_size: int, parts: list[Partition] | None = None):
        self.world_size = world_size
        self.parts = parts if parts is not None else partitions(groups, world_size)
        self.by_name = {str(g["name"]): tuple(int(r) for r in g["ranks"]) for g in groups}
        self.name_loc: dict[str, tuple[Partition, int]] = {}
        self.ranks_loc: dict[tuple[int, ...], tuple[Partition, int]] = {}
        for p in self.parts:
            for gi, (g, n) in enumerate(zip(p.groups, p.names, strict=True)):
                if n:
                    self.name_loc.setdefault(n, (p, gi))
                self.ranks_loc.setdefault(g, (p, gi))
        # each rank's own single-member groups, in creation order: Megatron makes one per rank for every
        # parallelism of degree 1 (DP 1, PP 1, ...), interleaved across ranks, so they form no partition
        self.singles: dict[int, list[str]] = {}
        for g in groups:
            if len(g["ranks"]) == 1:
                self.singles.setdefault(int(g["ranks"][0]), []).append(str(g["name"]))


class RankMapping:
    """How `rep_rank`'s collective groups and p2p peers read as `rank`'s (the rules of `expand_rank`),
    each distinct group and peer worked out once."""

    def __init__(self, index: GroupIndex, rep_rank: int, rank: int):
        self.index, self.rep_rank, self.rank = index, rep_rank, rank
        self._groups: dict[tuple, tuple] = {}
        self._peers: dict[int, int] = {}

    def group(self, name: str | None, ranks: tuple[int, ...]) -> tuple[str | None, tuple[int, ...]]:
        key = (name, ranks)
        hit = self._groups.get(key)
        if hit is None:
            hit = self._groups[key] = self._map_group(name, ranks)
        return hit

    def peer(self, peer: int) -> int:
        hit = self._peers.get(peer)
        if hit is None:
            hit = self._peers[peer] = self._map_peer(peer)
        return hit

    def _map_group(self, name, ranks):
        ix = self.index
        if len(ranks) == ix.world_size:  # a group of every rank (the world, or TP/DP over the whole job) is shared
            return name, ranks
        if ranks == (self.rep_rank,):
            return self._own_single(name)
        loc = ix.name_loc.get(name) if name else None
        loc = loc or ix.ranks_loc.get(ranks)
        if loc is None:  # the world group, or one this rank layout does not explain
            return name, ranks
        p, gi = loc
        target = p.group_of(self.rank)
        if target is None or self.rep_rank not in p.groups[gi]:
            return name, ranks
        return (p.names[target] or name), p.groups[target]

    def _own_single(self, name):
        """The rank's single-member group made at the same place among its own as `name` among the
        representative's; a name of its own when there is none (a collective on it moves nothing, but
        two ranks must never issue it under one group name)."""
        mine, theirs = self.index.singles.get(self.rep_rank, []), self.index.singles.get(self.rank, [])
        at = mine.index(str(name)) if name is not None and str(name) in mine else len(theirs)
        return (theirs[at] if at < len(theirs) else f"{name}@{self.rank}"), (self.rank,)

    def _map_peer(self, peer: int) -> int:
        rep_rank, rank, world_size = self.rep_rank, self.rank, self.index.world_size
        best = None
        for p in self.index.parts:
            gi = p.group_of(rep_rank)
            if gi is not None and peer in p.groups[gi] and p.group_of(rank) is not None and p.size < world_size:
                if best is None or p.size < best.size:
                    best = p
        if best is None:
            return (peer + rank - rep_rank) % world_size
        # the peer keeps its offset from the rank along the group: a pipeline's interior stages may share
        # one representative (roles.boundary_position), and stage s's neighbours are s - 1 and s + 1
        target = best.groups[best.group_of(rank)]
        pos = best.position(peer) - best.position(rep_rank) + best.position(rank)
        return target[pos] if 0 <= pos < len(target) else target[best.position(peer)]


def expand_rank(rep_table: pa.Table, rep_rank: int, rank: int, groups: list[dict],
                world_size: int | None = None, parts: list[Partition] | None = None) -> pa.Table:
    """`rep_rank`'s trace rows rewritten as `rank`'s (rank, group, group_ranks and peer columns).

    A collective on group G of partition P becomes the same collective on the group of P that
    holds `rank`; a p2p peer at offset k from `rep_rank` in the smallest group holding both ends
    becomes the member at offset k from `rank` in the corresponding group (else the peer is shifted
    by the rank offset, modulo the world). Groups holding every rank are left as they are. `parts`: the
    groups' partitions, if known. Collate expands many ranks of one job with `RankMapping` directly.
    """
    if rank == rep_rank:
        return rep_table
    if world_size is None:
        world_size = max([max((int(r) for r in g["ranks"]), default=-1) for g in groups] + [rep_rank, rank]) + 1
    index = GroupIndex(groups, world_size, parts)
    mapping = RankMapping(index, rep_rank, rank)
    by_name = index.by_name

    group_col = rep_table.column("group").to_pylist() if "group" in rep_table.column_names else None
    ranks_col = rep_table.column("group_ranks").to_pylist() if "group_ranks" in rep_table.column_names else None
    peer_col = rep_table.column("peer").to_pylist() if "peer" in rep_table.column_names else None
    new_groups, new_ranks, new_peers = [], [], []
    for i in range(rep_table.num_rows):
        name = group_col[i] if group_col is not None else None
        granks = ranks_col[i] if ranks_col is not None else None
        if granks is None and name is not None:
            granks = by_name.get(str(name))
        if granks is not None:
            nm, mapped = mapping.group(name, tuple(granks))
            new_groups.append(nm)
            new_ranks.append(list(mapped) if ranks_col is not None and ranks_col[i] is not None else None)
        else:
            new_groups.append(name)
            new_ranks.append(None)
        peer = peer_col[i] if peer_col is not None else None
        new_peers.append(mapping.peer(int(peer)) if peer is not None else None)
    out = rep_table
    schema = rep_table.schema

    def put(col: str, values) -> None:
        nonlocal out
        if col in out.column_names:
            idx = out.column_names.index(col)
            out = out.set_column(idx, schema.field(col), pa.array(values, type=schema.field(col).type))

    put("rank", [rank] * rep_table.num_rows)
    if group_col is not None:
        put("group", new_groups)
    if ranks_col is not None:
        put("group_ranks", new_ranks)
    if peer_col is not None:
        put("peer", new_peers)
    return out
