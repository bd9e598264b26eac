"""Collate: turn an emulation folder into the per-rank programs the simulator runs.

1. read every emulated rank's trace (schema-checked) and the run summary;
2. expand deduplicated ranks: a rank that shares a representative's trace gets a *view* of it
   whose collective/p2p rows carry its own groups and peers (`emulator.trace.expand` rewrites
   them); kernels are shared, so 1,024 identical ranks cost one trace in memory;
3. check that the collectives match across ranks (`emulator.collate.hangs`).
Host gaps are read as recorded (`host_gap_raw`); the host-time stage (`emulator.hosttime`) sets
the `host_gap` the simulator spends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from emulator.collate.hangs import HangError, check_matching
from emulator.collate.views import RankView, RowSlots, own_view
from emulator.core.ops import collective_name, is_view_op
from emulator.trace.expand import GroupIndex, RankMapping
from emulator.trace.io import read_summary, read_traces
from emulator.trace.schema import COMM_KINDS, DEVICE_KINDS, conform
from emulator.trace.summaries import EmulationSummary


class CollateError(ValueError):
    """The folder cannot be simulated as asked (layout mismatch, missing ranks)."""


@dataclass
class RepTrace:
    """One emulated rank's trace, sorted by host order, as plain columns the simulator indexes fast."""

    rank: int
    table: pa.Table
    kind: list[str]
    op: list[str]
    stream: list[int]
    host_gap_raw: list[float]  # as recorded: this machine's host CPU time before each row
    iteration: list[int]
    phase: list[str]
    module: list[str]
    flops: np.ndarray
    event_id: list
    coll_seq: list
    coll_bytes: list
    group: list
    group_ranks: list
    peer: list
    async_op: list[bool]
    blocking: list[bool]  # a device-to-host copy the host waits for
    launches: list[bool]  # the row launches device work (not a view op)
    pays_launch: list[bool]  # the host pays a launch before it: launches, and is not inside a graph replay's
    collective: list  # emulator.core.ops.collective_name for comm rows, else None
    waits_for: list  # for a completion wait row: collective_name of the op it waits for
    graph_replay: list  # the CUDA-graph replay that launched the row, else None
    host_gap: list[float] = field(default_factory=list)  # what the simulated host spends (emulator.hosttime)
    comm_rows: list[int] = field(default_factory=list)
    ranked_rows: list[int] = field(default_factory=list)  # rows whose group/peer depend on the rank
    slots: RowSlots | None = None  # the ranked rows' distinct groups and peers (emulator.collate.views)
    p2p_waits: bool = False  # the worker recorded completion waits for p2p ops (else they are implied)

    def __len__(self) -> int:
        return len(self.kind)


@dataclass
class CollatedJob:
    """Every rank of the job, as views of the emulated ranks' traces, on a cluster layout."""

    out: Path | None
    summary: EmulationSummary
    world_size: int
    nnodes: int
    nproc_per_node: int
    reps: dict[int, RepTrace]
    ranks: list[RankView]

    def node_of(self, rank: int) -> int:
        return rank // self.nproc_per_node

    def nodes_spanned(self, ranks) -> int:
        return len({r // self.nproc_per_node for r in ranks})


def rep_trace(rank: int, table: pa.Table) -> RepTrace:
    """Index one rank's table (sorted by `seq`) for the simulator; host gaps are used as recorded until
    the host-time stage sets them."""
    table = conform(table, rank).sort_by("seq")
    d = {c: table.column(c).to_pylist() for c in ("kind", "op", "stream", "host_gap_s", "iteration", "phase",
                                                  "event_id", "coll_seq", "coll_bytes", "group", "group_ranks",
                                                  "peer", "module", "async_op", "waits_for", "blocking",
                                                  "graph_replay")}
    kinds, ops = d["kind"], d["op"]
    flops = np.nan_to_num(np.asarray(table.column("flops").to_numpy(zero_copy_only=False), dtype=np.float64))
    gaps = [float(g) if g is not None and g == g else 0.0 for g in d["host_gap_s"]]
    rep = RepTrace(
        rank=rank, table=table, kind=kinds, op=ops, stream=[s or 0 for s in d["stream"]], host_gap_raw=gaps,
        iteration=[int(i) for i in d["iteration"]], phase=[p or "other" for p in d["phase"]],
        module=[m or "" for m in d["module"]], flops=flops, event_id=d["event_id"], coll_seq=d["coll_seq"],
        coll_bytes=d["coll_bytes"], group=d["group"],
        group_ranks=[tuple(g) if g is not None else None for g in d["group_ranks"]], peer=d["peer"],
        async_op=[bool(a) for a in d["async_op"]], blocking=[bool(b) for b in d["blocking"]],
        launches=[(k in DEVICE_KINDS and not is_view_op(o)) or k in COMM_KINDS
                  for k, o in zip(kinds, ops, strict=True)],
        collective=[collective_name(o) if k in COMM_KINDS else None for k, o in zip(kinds, ops, strict=True)],
        waits_for=[collective_name(w) if k == "event_wait" and w else None
                   for k, w in zip(kinds, d["waits_for"], strict=True)],
        graph_replay=d["graph_replay"], pays_launch=[], host_gap=list(gaps),
    )
    rep.pays_launch = _launches_paid(rep.launches, rep.graph_replay)
    rep.p2p_waits = any(w in ("send", "recv") for w in rep.waits_for)
    rep.comm_rows = [i for i, k in enumerate(kinds) if k in COMM_KINDS]
    rep.ranked_rows = [i for i, k in enumerate(kinds)
                       if k in COMM_KINDS or (k == "event_wait" and rep.group[i] is not None)]
    rep.slots = RowSlots.of(rep, rep.ranked_rows)
    return rep


def _launches_paid(launches: list[bool], graph_replay: list) -> list[bool]:
    """Which rows the host pays a launch for: every launching row, except that the rows of one CUDA-graph
    replay are launched together, by one call (the first pays)."""
    paid, last = [], None
    for launch, g in zip(launches, graph_replay, strict=True):
        paid.append(launch and (g is None or g != last))
        if launch:
            last = g
    return paid


def _expanded_view(rep: RepTrace, mapping: RankMapping) -> RankView:
    """A view of `rep` as `mapping.rank`: its groups and peers rewritten by the rules of
    `trace.expand.expand_rank`, each of the trace's distinct groups and peers mapped once."""
    by_name = mapping.index.by_name
    groups = []
    for name, ranks in rep.slots.group_keys:
        known = ranks if ranks is not None else (by_name.get(str(name)) if name is not None else None)
        if known is None:
            groups.append((name, None))
            continue
        new_name, new_ranks = mapping.group(name, known)
        groups.append((new_name, new_ranks if ranks is not None else None))
    peers = [mapping.peer(p) if p is not None else None for p in rep.slots.peer_keys]
    return RankView(rank=mapping.rank, rep=rep, groups=groups, peers=peers)


def layout(summary: EmulationSummary, nnodes: int | None, nproc_per_node: int | None) -> tuple[int, int, int]:
    """(world_size, nnodes, nproc_per_node) of the simulated cluster; the world size is the emulated one."""
    world = int(summary.world_size or 1)
    nn = nnodes or None
    npn = nproc_per_node or None
    if nn is None and npn is None:
        nn, npn = int(summary.nnodes or 1), int(summary.nproc_per_node or world)
    elif nn is None:
        nn = max(world // npn, 1)
    elif npn is None:
        npn = max(world // nn, 1)
    if nn * npn != world:
        raise CollateError(f"the trace has {world} ranks but --nnodes {nn} x --nproc-per-node {npn} = {nn * npn}; "
                           "re-simulating can reshape the cluster, not change the world size (re-run `maya emulate`)")
    return world, nn, npn


def collate(out: Path, nnodes: int | None = None, nproc_per_node: int | None = None,
            check: bool = True) -> CollatedJob:
    """Read `out`, expand every rank and check collectives match (raises HangError if not)."""
    out = Path(out)
    summary = read_summary(out)
    tables = read_traces(out)
    if not tables:
        raise CollateError(f"{out}: no traces under {out / 'trace'}; the emulation wrote none")
    return collate_tables(tables, summary, nnodes, nproc_per_node, out=out, check=check)


def collate_tables(tables: dict[int, pa.Table], summary: EmulationSummary, nnodes: int | None = None,
                   nproc_per_node: int | None = None, out: Path | None = None, check: bool = True) -> CollatedJob:
    world, nn, npn = layout(summary, nnodes, nproc_per_node)
    reps = {r: rep_trace(r, t) for r, t in tables.items()}
    rank_map = {int(k): int(v) for k, v in summary.rank_map.items()}
    groups = summary.groups
    views = []
    index = GroupIndex(groups, world) if any(rank_map.get(r, r) != r for r in range(world)) else None
    for rank in range(world):
        # rank_map names the trace each rank uses: an emulated rank that did its role's work shares the
        # representative's (emulator.launch.roles), so its own trace is not used
        rep_rank = rank_map.get(rank, rank)
        if rep_rank not in reps and rank in reps:
            rep_rank = rank
        if rep_rank not in reps:
            raise CollateError(f"rank {rank} has no trace and no representative in emulation.json rank_map")
        rep = reps[rep_rank]
        views.append(own_view(rep) if rep_rank == rank else _expanded_view(rep, RankMapping(index, rep.rank, rank)))
    used = {v.rep.rank for v in views}
    reps = {r: rep for r, rep in reps.items() if r in used}  # a trace no rank uses is not estimated
    job = CollatedJob(out=out, summary=summary, world_size=world, nnodes=nn, nproc_per_node=npn, reps=reps, ranks=views)
    if check:
        report = check_matching(job)
        if report is not None:
            raise HangError(report)
    return job


