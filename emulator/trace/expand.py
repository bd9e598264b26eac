"""Rank expansion: a representative's trace rewritten as another rank of the same role.

Deduplicated ranks have no trace of their own (`emulation.json` `rank_map`); collate reads them
as their representative's rows with the rank, the collective groups (the group of the same
partition that holds the new rank) and p2p peers (same position in the corresponding group)
rewritten.
"""

from __future__ import annotations

import pyarrow as pa

from emulator.trace.partitions import Partition, partitions


def expand_rank(rep_table: pa.Table, rep_rank: int, rank: int, groups: list[dict],
                world_size: int | None = None, parts: list[Partition] | None = None) -> pa.Table:
    """`rep_rank`'s trace rows rewritten as `rank`'s (rank, group, group_ranks and peer columns).

    A collective on group G of partition P becomes the same collective on the group of P that
    holds `rank`; a p2p peer at offset k from `rep_rank` in the smallest group holding both ends
    becomes the member at offset k from `rank` in the corresponding group (else the peer is shifted
    by the rank offset, modulo the world). Groups holding every rank are left as they are. `parts`: the
    groups' partitions, when the caller expands many ranks of one job (they are the same for all).
    """
    if rank == rep_rank:
        return rep_table
    if world_size is None:
        world_size = max([max((int(r) for r in g["ranks"]), default=-1) for g in groups] + [rep_rank, rank]) + 1
    if parts is None:
        parts = partitions(groups, world_size)
    by_name = {str(g["name"]): tuple(int(r) for r in g["ranks"]) for g in groups}
    name_loc: dict[str, tuple[Partition, int]] = {}
    ranks_loc: dict[tuple[int, ...], tuple[Partition, int]] = {}
    for p in parts:
        for gi, (g, n) in enumerate(zip(p.groups, p.names, strict=True)):
            if n:
                name_loc.setdefault(n, (p, gi))
            ranks_loc.setdefault(g, (p, gi))

    def map_group(name: str | None, ranks: tuple[int, ...]) -> tuple[str | None, tuple[int, ...]]:
        if len(ranks) == world_size:  # a group of every rank (the world, or TP/DP over the whole job) is shared
            return name, ranks
        loc = name_loc.get(name) if name else None
        loc = loc or ranks_loc.get(ranks)
        if loc is None:  # the world group, or one this rank layout does not explain
            return name, ranks
        p, gi = loc
        target = p.group_of(rank)
        if target is None or rep_rank not in p.groups[gi]:
            return name, ranks
        return (p.names[target] or name), p.groups[target]

    peer_cache: dict[int, int] = {}

    def map_peer(peer: int) -> int:
        if peer not in peer_cache:
            peer_cache[peer] = _map_peer(peer)
        return peer_cache[peer]

    def _map_peer(peer: int) -> int:
        best = None
        for p in parts:
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

    group_col = rep_table.column("group").to_pylist() if "group" in rep_table.column_names else None
    ranks_col = rep_table.column("group_ranks").to_pylist() if "group_ranks" in rep_table.column_names else None
    peer_col = rep_table.column("peer").to_pylist() if "peer" in rep_table.column_names else None
    new_groups, new_ranks, new_peers = [], [], []
    cache: dict[tuple, tuple] = {}
    for i in range(rep_table.num_rows):
        name = group_col[i] if group_col is not None else None
        granks = ranks_col[i] if ranks_col is not None else None
        if granks is None and name is not None:
            granks = by_name.get(str(name))
        if granks is not None:
            key = (name, tuple(granks))
            if key not in cache:
                cache[key] = map_group(name, tuple(granks))
            nm, mapped = cache[key]
            new_groups.append(nm)
            new_ranks.append(list(mapped) if ranks_col is not None and ranks_col[i] is not None else None)
        else:
            new_groups.append(name)
            new_ranks.append(None)
        peer = peer_col[i] if peer_col is not None else None
        new_peers.append(map_peer(int(peer)) if peer is not None else None)
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
