"""Collate: turn an emulation folder into the per-rank programs the simulator runs.

Three jobs (DESIGN section 2):
1. read every emulated rank's trace (schema-checked) and the run summary;
2. expand deduplicated ranks: a rank that shares a representative's trace gets a *view* of it
   whose collective/p2p rows carry its own groups and peers (`emulator.launch.roles.expand_rank`
   rewrites them); kernels are shared, so 1,024 identical ranks cost one trace in memory;
3. check that every member of every group issued the same collectives (matched by
   (group, coll_seq)) and that every send has its receive (matched by (peer, order)). A
   mismatch means the real job would hang, so collate raises `HangError` carrying a report
   that names the ranks, the group and the collective, instead of letting the simulator
   invent a number.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from emulator.core.ops import collective_name, is_view_op, parse_args
from emulator.trace.io import read_summary, read_traces

DEVICE_KINDS = frozenset({"kernel", "memset", "memcpy"})
COMM_KINDS = frozenset({"collective", "p2p"})
_LAYER_INDEX = re.compile(r"\.\d+(?=\.|$)")
WAIT_OPS = frozenset({"c10d::wait", "_c10d_functional::wait_tensor", "c10d_functional::wait_tensor"})


class CollateError(ValueError):
    """The folder cannot be simulated as asked (layout mismatch, missing ranks)."""


@dataclass
class HangIssue:
    """One collective or p2p exchange the real job would block on."""

    kind: str  # "missing" (some members never issued it), "mismatch" (members issued different ops), "p2p"
    group: str | None
    group_ranks: list[int]
    coll_seq: int | None
    collective: str
    issued_by: list[int]
    missing: list[int]
    detail: str

    def to_dict(self) -> dict:
        return dict(kind=self.kind, group=self.group, group_ranks=self.group_ranks, coll_seq=self.coll_seq,
                    collective=self.collective, issued_by=self.issued_by, missing=self.missing, detail=self.detail)


@dataclass
class HangReport:
    issues: list[HangIssue]
    total: int = 0

    def message(self) -> str:
        lines = ["the real job would hang: collectives do not match across ranks"]
        lines += [f"  - {i.detail}" for i in self.issues]
        if self.total > len(self.issues):
            lines.append(f"  ... and {self.total - len(self.issues)} more")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"message": self.message(), "issues": [i.to_dict() for i in self.issues], "total": self.total}


class HangError(RuntimeError):
    def __init__(self, report: HangReport):
        super().__init__(report.message())
        self.report = report


@dataclass
class RepTrace:
    """One emulated rank's trace, sorted by host order, as plain columns the simulator indexes fast."""

    rank: int
    table: pa.Table
    kind: list[str]
    op: list[str]
    stream: list[int]
    host_gap: list[float]
    iteration: list[int]
    phase: list[str]
    flops: np.ndarray
    event_id: list
    coll_seq: list
    coll_bytes: list
    group: list
    group_ranks: list
    peer: list
    async_op: list[bool]
    sync_copy: list[bool]  # a device-to-host copy the host waits for
    launches: list[bool]  # the row launches device work (not a view op)
    collective: list  # emulator.core.ops.collective_name for comm rows, else None
    waits_for: list  # for a completion wait row: collective_name of the op it waits for (args "waits_for")
    comm_rows: list[int] = field(default_factory=list)
    ranked_rows: list[int] = field(default_factory=list)  # rows whose group/peer depend on the rank
    p2p_waits: bool = False  # the worker recorded completion waits for p2p ops (else they are implied)

    def __len__(self) -> int:
        return len(self.kind)


@dataclass
class RankView:
    """A rank of the job: a representative's trace with this rank's own groups and peers."""

    rank: int
    rep: RepTrace
    group: dict[int, str]
    group_ranks: dict[int, tuple[int, ...]]
    peer: dict[int, int]


@dataclass
class Job:
    out: Path | None
    summary: dict
    world_size: int
    nnodes: int
    nproc_per_node: int
    reps: dict[int, RepTrace]
    ranks: list[RankView]

    def node_of(self, rank: int) -> int:
        return rank // self.nproc_per_node

    def nodes_spanned(self, ranks) -> int:
        return len({r // self.nproc_per_node for r in ranks})


def _is_sync_copy(op: str, args: dict) -> bool:
    o = op.lower()
    to_host = "d2h" in o or "dtoh" in o or "device_to_host" in o or args.get("direction") in ("d2h", "DtoH")
    return to_host and not args.get("non_blocking", False)


def rep_trace(rank: int, table: pa.Table) -> RepTrace:
    """Index one rank's table (sorted by `seq`) for the simulator."""
    table = table.sort_by("seq")
    d = {c: table.column(c).to_pylist() for c in ("kind", "op", "stream", "host_gap_s", "iteration", "phase",
                                                  "event_id", "coll_seq", "coll_bytes", "group", "group_ranks",
                                                  "peer", "args", "module") if c in table.column_names}
    n = table.num_rows
    kinds, ops = d["kind"], d["op"]
    args = [parse_args(a) for a in d.get("args", [None] * n)]
    flops = table.column("flops").to_numpy(zero_copy_only=False) if "flops" in table.column_names else np.zeros(n)
    flops = np.nan_to_num(np.asarray(flops, dtype=np.float64))
    col = lambda c, default=None: d.get(c) or [default] * n  # noqa: E731
    phases = [p or "other" for p in col("phase", "other")]
    gaps = [float(g) if g is not None and g == g else 0.0 for g in col("host_gap_s", 0.0)]
    rep = RepTrace(
        rank=rank, table=table, kind=kinds, op=ops, stream=[s or 0 for s in col("stream", 0)],
        host_gap=robust_host_gaps(ops, phases, col("module", ""), gaps),
        iteration=[int(i) for i in col("iteration", 0)], phase=phases,
        flops=flops, event_id=col("event_id"), coll_seq=col("coll_seq"), coll_bytes=col("coll_bytes"),
        group=col("group"), group_ranks=[tuple(g) if g is not None else None for g in col("group_ranks")],
        peer=col("peer"), async_op=[bool(a.get("async_op", False)) for a in args],
        sync_copy=[k == "memcpy" and _is_sync_copy(o, a) for k, o, a in zip(kinds, ops, args, strict=True)],
        launches=[(k in DEVICE_KINDS and not is_view_op(o)) or k in COMM_KINDS
                  for k, o in zip(kinds, ops, strict=True)],
        collective=[collective_name(o) if k in COMM_KINDS else None for k, o in zip(kinds, ops, strict=True)],
        waits_for=[collective_name(a["waits_for"]) if k == "event_wait" and a.get("waits_for") else None
                   for k, a in zip(kinds, args, strict=True)],
    )
    rep.p2p_waits = any(w in ("send", "recv") for w in rep.waits_for)
    rep.comm_rows = [i for i, k in enumerate(kinds) if k in COMM_KINDS]
    rep.ranked_rows = [i for i, k in enumerate(kinds)
                       if k in COMM_KINDS or (k == "event_wait" and rep.group[i] is not None)]
    return rep


SPIKE_FACTOR = 3.0  # a host gap above this many times its class median is a measurement spike
SPIKE_MIN_CLASS = 4  # classes smaller than this keep their gaps as measured


def robust_host_gaps(ops: list[str], phases: list, modules: list, gaps: list[float]) -> list[float]:
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


def _own_view(rep: RepTrace) -> RankView:
    rows = rep.ranked_rows
    return RankView(rank=rep.rank, rep=rep, group={i: rep.group[i] for i in rows},
                    group_ranks={i: rep.group_ranks[i] for i in rows if rep.group_ranks[i] is not None},
                    peer={i: rep.peer[i] for i in rows if rep.peer[i] is not None})


def _expanded_view(rep: RepTrace, rank: int, groups, world: int) -> RankView:
    """A view of `rep` as `rank`: B's expand_rank rewrites the rank-dependent rows (groups, peers)."""
    try:
        from emulator.launch.roles import expand_rank
    except ImportError as e:  # pragma: no cover - depends on the launcher being installed
        raise CollateError(f"rank {rank} shares rank {rep.rank}'s trace but emulator.launch.roles is unavailable: {e}") \
            from e
    rows = rep.ranked_rows
    sub = rep.table.take(pa.array(rows, type=pa.int64())) if rows else rep.table.slice(0, 0)
    exp = expand_rank(sub, rep.rank, rank, groups, world_size=world)
    g = exp.column("group").to_pylist()
    gr = exp.column("group_ranks").to_pylist()
    pe = exp.column("peer").to_pylist()
    return RankView(rank=rank, rep=rep, group=dict(zip(rows, g, strict=True)),
                    group_ranks={i: tuple(x) for i, x in zip(rows, gr, strict=True) if x is not None},
                    peer={i: p for i, p in zip(rows, pe, strict=True) if p is not None})


def layout(summary: dict, nnodes: int | None, nproc_per_node: int | None) -> tuple[int, int, int]:
    """(world_size, nnodes, nproc_per_node) of the simulated cluster; the world size is the emulated one."""
    world = int(summary.get("world_size") or 1)
    nn = nnodes or None
    npn = nproc_per_node or None
    if nn is None and npn is None:
        nn, npn = int(summary.get("nnodes") or 1), int(summary.get("nproc_per_node") or world)
    elif nn is None:
        nn = max(world // npn, 1)
    elif npn is None:
        npn = max(world // nn, 1)
    if nn * npn != world:
        raise CollateError(f"the trace has {world} ranks but --nnodes {nn} x --nproc-per-node {npn} = {nn * npn}; "
                           "re-simulating can reshape the cluster, not change the world size (re-run `maya emulate`)")
    return world, nn, npn


def collate(out: Path, nnodes: int | None = None, nproc_per_node: int | None = None, check: bool = True) -> Job:
    """Read `out`, expand every rank and check collectives match (raises HangError if not)."""
    out = Path(out)
    summary = read_summary(out)
    tables = read_traces(out)
    if not tables:
        raise CollateError(f"{out}: no traces under {out / 'trace'}; the emulation wrote none")
    return collate_tables(tables, summary, nnodes, nproc_per_node, out=out, check=check)


def collate_tables(tables: dict[int, pa.Table], summary: dict, nnodes: int | None = None,
                   nproc_per_node: int | None = None, out: Path | None = None, check: bool = True) -> Job:
    world, nn, npn = layout(summary, nnodes, nproc_per_node)
    reps = {r: rep_trace(r, t) for r, t in tables.items()}
    rank_map = {int(k): int(v) for k, v in (summary.get("rank_map") or {}).items()}
    groups = summary.get("groups") or []
    views = []
    for rank in range(world):
        rep_rank = rank if rank in reps else rank_map.get(rank)
        if rep_rank is None or rep_rank not in reps:
            raise CollateError(f"rank {rank} has no trace and no representative in emulation.json rank_map")
        rep = reps[rep_rank]
        views.append(_own_view(rep) if rep_rank == rank else _expanded_view(rep, rank, groups, world))
    job = Job(out=out, summary=summary, world_size=world, nnodes=nn, nproc_per_node=npn, reps=reps, ranks=views)
    if check:
        report = check_matching(job)
        if report is not None:
            raise HangError(report)
    return job


def check_matching(job: Job, limit: int = 10) -> HangReport | None:
    """Every group member issued the same collectives, every send has its receive; else a HangReport."""
    issued: dict[tuple[str, int], dict[int, tuple[str, int]]] = defaultdict(dict)
    members: dict[tuple[str, int], tuple[int, ...]] = {}
    sends: dict[tuple[int, int], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[int]] = defaultdict(list)
    world = tuple(range(job.world_size))
    for v in job.ranks:
        rep = v.rep
        for i in rep.comm_rows:
            if rep.kind[i] == "p2p":
                peer = v.peer.get(i)
                if peer is None:
                    continue
                (sends if rep.collective[i] == "send" else recvs)[(v.rank, peer)].append(int(rep.coll_bytes[i] or 0))
                continue
            key = (v.group.get(i), int(rep.coll_seq[i] if rep.coll_seq[i] is not None else -1))
            issued[key][v.rank] = (rep.collective[i], int(rep.coll_bytes[i] or 0))
            members.setdefault(key, v.group_ranks.get(i) or world)
    issues: list[HangIssue] = []
    for key, by_rank in issued.items():
        group, seq = key
        ranks = list(members[key])
        missing = [r for r in ranks if r not in by_rank]
        first = next(iter(by_rank.values()))
        if missing:
            issues.append(HangIssue(
                "missing", group, ranks, seq, first[0], sorted(by_rank), missing,
                f"{first[0]} #{seq} on group {group!r} (ranks {_fmt(ranks)}) was issued by ranks "
                f"{_fmt(sorted(by_rank))} but never by ranks {_fmt(missing)}"))
        elif len(set(by_rank.values())) > 1:
            variants = defaultdict(list)
            for r, sig in sorted(by_rank.items()):
                variants[sig].append(r)
            desc = "; ".join(f"ranks {_fmt(rs)} issued {s[0]} of {s[1]} bytes" for s, rs in variants.items())
            issues.append(HangIssue("mismatch", group, ranks, seq, first[0], sorted(by_rank), [],
                                    f"collective #{seq} on group {group!r} (ranks {_fmt(ranks)}) differs: {desc}"))
    for (src, dst) in sorted(set(sends) | {(s, d) for (d, s) in recvs}):
        s, r = sends.get((src, dst), []), recvs.get((dst, src), [])
        if len(s) != len(r):
            issues.append(HangIssue(
                "p2p", None, [src, dst], None, "send/recv", [src] if len(s) > len(r) else [dst],
                [dst] if len(s) > len(r) else [src],
                f"rank {src} sends {len(s)} message(s) to rank {dst}, which receives {len(r)} from it"))
        elif s != r:
            k = next(i for i, (a, b) in enumerate(zip(s, r, strict=True)) if a != b)
            issues.append(HangIssue("p2p", None, [src, dst], k, "send/recv", [src, dst], [],
                                    f"message {k} from rank {src} to rank {dst}: {s[k]} bytes sent, {r[k]} received"))
    if not issues:
        return None
    return HangReport(issues=issues[:limit], total=len(issues))


def _fmt(ranks) -> str:
    ranks = list(ranks)
    if len(ranks) > 12:
        return f"[{', '.join(map(str, ranks[:10]))}, ... ({len(ranks)} ranks)]"
    return json.dumps(ranks)


def iteration_ids(rep: RepTrace) -> list[int]:
    return sorted(set(rep.iteration))
