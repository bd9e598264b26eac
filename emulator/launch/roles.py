"""Rank deduplication: emulate a job's distinct roles, not every rank.

In a data/tensor/pipeline-parallel job most ranks do exactly the same work as some other rank,
only with different peers. A 1,024-GPU job typically has a handful of roles (one per pipeline
stage, say), so emulating every rank wastes 99 % of the time. How roles are found:

1. Emulate rank 0 and the last rank. Rank 0's summary lists every process group the program
   created; the last rank is the *base* roles are probed around, because rank 0 often does
   extra work of its own (logging, checkpointing) and is kept as its own trace.
2. Derive *partitions* of the world from those groups: sets of disjoint, equal-sized groups
   that together cover every rank (each DeviceMesh dimension is one; the world group is not
   used unless there is nothing else). A group family that does not cover the world is kept
   as an incomplete partition and always treated as significant.
3. For each complete partition, emulate another member of the base's group (a *probe*) and
   compare its `op_hash` (a hash of the work, blind to rank ids and group names) with the base's:
   equal means a rank's position along that partition does not change its work. When it
   differs and the group has 4+ members, a second interior member is probed: if the two
   interior members agree, only the ends of the group are special (FSDP's last rank holds the
   padded shard), and the interior is one class.
4. A rank's *class* is its tuple of positions along the significant partitions. One
   representative per class is emulated (an already emulated rank other than 0 when possible,
   else the highest), and every rank maps to its class representative (`rank_map`).
5. Optionally `verify` K random non-representatives: emulate them and check their hash equals
   their representative's; a mismatch is reported (and the rank keeps its own trace).

`expand_rank` turns a representative's trace into another rank's: same rows, with the rank
column, the collective groups (the group of the same partition that holds the new rank) and
p2p peers (same position in the corresponding group) rewritten.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

_DEVICE_INDEX = re.compile(r"\b(cuda|cpu|meta):\d+")


def _normal_args(raw: str | None) -> str:
    """Non-tensor args without what legitimately differs between ranks of one role: device indices
    (`cuda:3` is the local rank) and numeric scalar operands (RNG offsets, seeds, per-rank constants),
    which do not change how much work a kernel does."""
    if not raw:
        return ""
    try:
        args = json.loads(raw)
    except ValueError:
        return _DEVICE_INDEX.sub(r"\1", raw)
    if not isinstance(args, dict):
        return _DEVICE_INDEX.sub(r"\1", raw)
    kept = {k: v for k, v in args.items() if isinstance(v, (str, bool, list, dict)) or v is None}
    return _DEVICE_INDEX.sub(r"\1", json.dumps(kept, sort_keys=True, separators=(",", ":")))


def work_hash(table: pa.Table) -> str:
    """A hash of the work in one rank's trace, blind to who the rank is.

    Like the worker's `op_hash` (kind, op, shapes, dtypes, args, group size, collective bytes),
    but args are normalised by `_normal_args`, so two ranks of the same role hash equal even when
    they pass their own device index or RNG offset to an op.
    """
    names = ("kind", "op", "shapes", "dtypes", "args", "group_ranks", "coll_bytes")
    cols = [c for c in names if c in table.column_names]
    data = {c: table.column(c).to_pylist() for c in cols}
    n = table.num_rows
    h = hashlib.sha256()
    args_cache: dict[str | None, str] = {}
    for i in range(n):
        raw = data["args"][i] if "args" in data else None
        if raw not in args_cache:
            args_cache[raw] = _normal_args(raw)
        granks = data["group_ranks"][i] if "group_ranks" in data else None
        h.update(json.dumps([data.get("kind", [None] * n)[i], data.get("op", [None] * n)[i],
                             data.get("shapes", [None] * n)[i], data.get("dtypes", [None] * n)[i], args_cache[raw],
                             len(granks) if granks else 0, data.get("coll_bytes", [None] * n)[i]],
                            separators=(",", ":")).encode())
    return h.hexdigest()


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


def probes(parts: list[Partition], base: int) -> list[tuple[int, int]]:
    """(partition index, rank to emulate) per complete partition: a member of `base`'s group at another position.

    The probe differs from `base` only in its position along that partition (in a mesh, its
    coordinates along the other dimensions are the same), so a hash difference is that
    partition's doing.
    """
    out = []
    for i, p in enumerate(parts):
        gi = p.group_of(base)
        if p.complete and gi is not None and len(p.groups[gi]) > 1:
            others = [r for r in p.groups[gi] if r != base]
            # the last other member: ranks that log or checkpoint are usually the first of their group,
            # and their extra work is not the partition's doing
            out.append((i, others[-1]))
    return out


def interior_probes(parts: list[Partition], base: int, probe_list: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(partition index, rank) one interior position further from `base` than its first probe.

    Only for groups of 4 or more, where the first probe is interior (neither first nor last):
    if the two interior ranks hash equal, the partition only distinguishes its ends (see
    `boundary_position`)."""
    out = []
    for i, first in probe_list:
        p = parts[i]
        gi = p.group_of(base)
        if gi is None or p.size < 4:
            continue
        pos = p.position(first) - 1
        if pos >= 1:
            out.append((i, p.groups[gi][pos]))
    return out


def boundary_position(p: Partition, rank: int) -> int:
    """0 for the first member of its group, 2 for the last, 1 for every interior member.

    Used for partitions whose two probed interior members do the same work while an end member
    differs (FSDP: rank 0 logs, the last rank holds the padded shard). The assumption that all
    interior members then agree is what `--verify`/MAYA_DEDUP_VERIFY checks.
    """
    pos = p.position(rank)
    return 0 if pos == 0 else (2 if pos == p.size - 1 else 1)


def classes(world_size: int, parts: list[Partition], significant: list[bool],
            boundary: list[bool] | None = None) -> dict[int, tuple]:
    """rank -> class key (its positions along the significant partitions; ends vs interior for boundary ones)."""
    boundary = boundary or [False] * len(parts)
    sig = [(p, b) for p, s, b in zip(parts, significant, boundary, strict=True) if s]
    return {r: tuple(boundary_position(p, r) if b else p.position(r) for p, b in sig) for r in range(world_size)}


@dataclass
class DedupResult:
    rank_map: dict[int, int]  # every rank -> the emulated rank whose trace it uses
    emulated: list[int]
    partitions: list[Partition]
    significant: list[bool]
    mismatches: list[dict]  # verified ranks whose hash differed from their representative's
    boundary: list[bool] = field(default_factory=list)  # significant only at the group ends (see boundary_position)

    def to_json(self) -> dict:
        boundary = self.boundary or [False] * len(self.partitions)
        return {"partitions": [dict(p.to_json(), significant=s, ends_only=b)
                               for p, s, b in zip(self.partitions, self.significant, boundary, strict=True)],
                "classes": len(set(self.rank_map.values())), "emulated": len(self.emulated),
                "mismatches": self.mismatches}


def exchange_units(groups: list[dict], world_size: int, group_name: str | None) -> Callable[[int], list[int]]:
    """unit_of for `deduplicate`: the ranks of `group_name`'s partition that share a group with a rank
    (the whole world when the group is unknown or not part of a partition)."""
    for p in partitions(groups, world_size):
        if p.complete and group_name in p.names:
            return lambda r, p=p: list(p.groups[p.group_of(r)])
    return lambda r: list(range(world_size))


RunRanks = Callable[[list[int]], dict[int, dict]]  # runs ranks, returns their per-rank summaries (None on failure)


def _hash(summary: dict) -> str | None:
    """The launcher adds `work_hash` (see work_hash) to each rank summary; the worker's op_hash is the fallback."""
    return summary.get("work_hash") or summary.get("op_hash")


def deduplicate(world_size: int, run_ranks: RunRanks, verify: int = 0, seed: int = 0,
                unit_of: Callable[[int], list[int]] | None = None) -> DedupResult | None:
    """Drive the phases above. `run_ranks(ranks)` emulates ranks (in parallel) and returns their summaries;
    a missing summary, or one neither ok nor OOM, stops the search (None is returned: the caller reports
    the failure). An OOM rank counts as emulated: its trace up to the failed allocation shows its role.

    `unit_of(rank)` names ranks that must be emulated together with `rank` (programs that exchange
    Python objects between ranks, like pipelining's shape inference): every batch is widened to whole
    units, and `run_ranks` is expected to run a batch all at once.
    """
    done: dict[int, dict] = {}

    def run(ranks: list[int]) -> bool:
        if unit_of is not None:
            ranks = [u for r in ranks for u in unit_of(r)]
        todo = [r for r in dict.fromkeys(ranks) if r not in done]
        if not todo:
            return True
        got = run_ranks(todo)
        done.update({r: s for r, s in got.items() if s is not None})
        return all(r in done and (done[r].get("ok") or done[r].get("oom")) for r in todo)

    # Rank 0 often does extra work (logging, checkpoints), so roles are probed around the last rank
    # instead, and rank 0 is always emulated and kept as its own trace.
    base = world_size - 1
    if not run([0, base]):
        return None
    parts = partitions(done[0].get("groups") or [], world_size)
    probe_list = probes(parts, base)
    if not run([r for _, r in probe_list]):
        return None
    significant = [True] * len(parts)
    for i, r in probe_list:
        significant[i] = _hash(done[r]) != _hash(done[base])
    boundary = [False] * len(parts)
    inner = [(i, r) for i, r in interior_probes(parts, base, probe_list) if significant[i]]
    if inner and not run([r for _, r in inner]):
        return None
    first_probe = dict(probe_list)
    for i, r in inner:
        boundary[i] = _hash(done[r]) == _hash(done[first_probe[i]])
    keys = classes(world_size, parts, significant, boundary)
    rep_of_class: dict[tuple, int] = {}
    # Representatives: ranks already emulated first, highest first (again: low ranks are the ones
    # that tend to log), never rank 0 unless it is alone in its class.
    for r in sorted(done, reverse=True):
        if r != 0:
            rep_of_class.setdefault(keys[r], r)
    for r in range(world_size - 1, 0, -1):
        rep_of_class.setdefault(keys[r], r)
    if not run(sorted(set(rep_of_class.values()))):
        return None
    rank_map = {r: (r if r in done else rep_of_class[keys[r]]) for r in range(world_size)}
    mismatches: list[dict] = []
    if verify > 0:
        candidates = [r for r in range(world_size) if r not in done]
        picked = sorted(random.Random(seed).sample(candidates, min(verify, len(candidates))))
        if unit_of is not None:
            picked = sorted({u for r in picked for u in unit_of(r)} - set(done))
        if picked and not run(picked):
            return None
        for r in picked:
            rep = rank_map[r]
            rank_map[r] = r  # it has its own trace now
            if _hash(done[r]) != _hash(done[rep]):
                mismatches.append({"rank": r, "representative": rep})
    return DedupResult(rank_map=rank_map, emulated=sorted(done), partitions=parts, significant=significant,
                       mismatches=mismatches, boundary=boundary)


# --------------------------------------------------------------------------- trace expansion
def expand_rank(rep_table: pa.Table, rep_rank: int, rank: int, groups: list[dict],
                world_size: int | None = None) -> pa.Table:
    """`rep_rank`'s trace rows rewritten as `rank`'s (rank, group, group_ranks and peer columns).

    A collective on group G of partition P becomes the same collective on the group of P that
    holds `rank`; a p2p peer at position i of the smallest group holding both ends becomes the
    member at position i of the corresponding group (else the peer is shifted by the rank
    offset, modulo the world). Groups holding every rank are left as they are.
    """
    if rank == rep_rank:
        return rep_table
    if world_size is None:
        world_size = max([max((int(r) for r in g["ranks"]), default=-1) for g in groups] + [rep_rank, rank]) + 1
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
        return best.groups[best.group_of(rank)][best.position(peer)]

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
