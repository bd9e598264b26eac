"""Synthetic traces in TRACE_SCHEMA: fixtures for tests and the simulation benchmark.

These are *shapes of work*, not measurements: a builder that writes rows the way the worker
does (host order, per-group coll_seq, async collectives with wait rows) so the simulator can be
exercised on layouts larger than this machine can emulate (a 1,024-rank 3-D parallel job).
Durations always come from an estimator; nothing here carries a time except `host_gap_s`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow as pa

from emulator.collate.job import CollatedJob, RankView, rep_trace
from emulator.core.ops import flops_and_bytes
from emulator.trace.io import write_rank_trace, write_summary
from emulator.trace.schema import TRACE_SCHEMA
from emulator.trace.summaries import EmulationSummary


class TraceBuilder:
    """Rows of one rank, appended in host order."""

    def __init__(self, rank: int, host_gap_s: float = 5e-6):
        self.rank = rank
        self.gap = host_gap_s
        self.rows: list[dict] = []
        self.iteration = 0
        self.phase = "forward"
        self._seq = defaultdict(int)  # per-group collective sequence numbers

    def _row(self, kind: str, op: str, stream: int = 0, **kw) -> dict:
        row = dict(rank=self.rank, seq=len(self.rows), iteration=self.iteration, kind=kind, op=op, stream=stream,
                   phase=self.phase, module="", host_gap_s=self.gap, args=json.dumps(kw.pop("args", {})))
        row.update(kw)
        self.rows.append(row)
        return row

    def kernel(self, op: str, shapes, dtypes, out_shapes=None, stream: int = 0, args: dict | None = None) -> dict:
        out_shapes = out_shapes or [shapes[0]]
        fl, by = flops_and_bytes(op, shapes, dtypes, out_shapes, dtypes[:1], args)
        return self._row("kernel", op, stream, shapes=shapes, dtypes=dtypes, out_shapes=out_shapes,
                         out_dtypes=dtypes[:1], flops=fl, bytes=by, args=args or {})

    def mm(self, m: int, n: int, k: int, dtype: str = "bfloat16", stream: int = 0) -> dict:
        return self.kernel("aten::mm", [[m, k], [k, n]], [dtype, dtype], [[m, n]], stream)

    def collective(self, op: str, group: str, ranks, coll_bytes: int, async_op: bool = False,
                   stream: int = 0) -> dict:
        seq = self._seq[group]
        self._seq[group] += 1
        return self._row("collective", op, stream, group=group, group_ranks=list(ranks), coll_seq=seq,
                         coll_bytes=int(coll_bytes), async_op=async_op)

    def wait(self, row: dict, stream: int = 0) -> dict:
        """The completion wait of a collective or p2p `row`, as the worker records `Work.wait()`."""
        return self._row("event_wait", "c10d::wait", stream, group=row["group"], coll_seq=row["coll_seq"],
                         peer=row.get("peer"), waits_for=row["op"])

    def p2p(self, op: str, peer: int, coll_bytes: int, async_op: bool = False, stream: int = 0,
            group: str | None = None) -> dict:
        row = dict(peer=peer, coll_bytes=int(coll_bytes), async_op=async_op)
        if group is not None:  # the worker numbers p2p per (group, direction, peer)
            key = f"{group}|{op}|{peer}"
            row.update(group=group, coll_seq=self._seq[key])
            self._seq[key] += 1
        return self._row("p2p", op, stream, **row)

    def record(self, event_id: int, stream: int) -> dict:
        return self._row("event_record", "cuda::event_record", stream, event_id=event_id)

    def wait_event(self, event_id: int, stream: int) -> dict:
        return self._row("event_wait", "cuda::event_wait", stream, event_id=event_id)

    def sync(self, stream: int | None = None) -> dict:
        if stream is None:
            return self._row("device_sync", "cuda::synchronize", 0)
        return self._row("stream_sync", "cuda::stream_synchronize", stream)

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=TRACE_SCHEMA)


def write_job(out: Path, tables: dict[int, pa.Table], gpu: str = "h100", nnodes: int = 1,
              nproc_per_node: int | None = None, **summary) -> Path:
    """Write an emulation folder (traces + emulation.json) the way the launcher does."""
    out = Path(out)
    world = summary.pop("world_size", None) or len(tables)
    for r, t in tables.items():
        write_rank_trace(out, r, t)
    base = dict(ok=True, complete=True, gpu=gpu, world_size=world, nnodes=nnodes,
                nproc_per_node=nproc_per_node or world // nnodes, iterations_found=1,
                peak_allocated_bytes={str(r): 2**30 for r in range(world)},
                peak_reserved_bytes={str(r): 2**30 + 2**28 for r in range(world)}, oom=False, oom_ranks=[],
                emulation_wall_s=1.0, ranks_emulated=sorted(tables), rank_map={str(r): r for r in range(world)},
                groups=[])
    base.update(summary)
    write_summary(out, EmulationSummary(**base))
    return out


# -- a 3-D parallel (TP x PP x DP) transformer iteration --------------------------------------------

def parallel3d_rank(rank: int, tp: int, pp: int, dp: int, layers_per_stage: int = 4, microbatches: int = 4,
                    hidden: int = 4096, tokens: int = 4096, iterations: int = 2, dp_buckets: int = 4) -> TraceBuilder:
    """One rank of a GPipe-scheduled TP x PP x DP transformer (rank = (dp_i * pp + pp_i) * tp + tp_i)."""
    tp_i, pp_i, dp_i = rank % tp, (rank // tp) % pp, rank // (tp * pp)
    tp_ranks = [(dp_i * pp + pp_i) * tp + t for t in range(tp)]
    dp_ranks = [(d * pp + pp_i) * tp + tp_i for d in range(dp)]
    prev = (dp_i * pp + pp_i - 1) * tp + tp_i if pp_i > 0 else None
    nxt = (dp_i * pp + pp_i + 1) * tp + tp_i if pp_i < pp - 1 else None
    tp_group, dp_group = f"tp{dp_i}.{pp_i}", f"dp{pp_i}.{tp_i}"
    h, t, f = hidden, tokens, 4 * hidden
    heads, hd = max(hidden // 128 // tp, 1), 128
    act = t * h * 2
    b = TraceBuilder(rank)
    params = layers_per_stage * 12 * h * h // tp
    for it in range(iterations):
        b.iteration = it
        b.phase = "forward"
        for _ in range(microbatches):
            if prev is not None:
                b.p2p("c10d::recv_", prev, act)
            for _ in range(layers_per_stage):
                b.kernel("aten::native_layer_norm", [[t, h], [h], [h]], ["bfloat16"] * 3)
                b.mm(t, 3 * h // tp, h)
                q = [1, heads, t, hd]
                b.kernel("aten::_scaled_dot_product_flash_attention", [q, q, q], ["bfloat16"] * 3,
                         args={"is_causal": True})
                b.mm(t, h, h // tp)
                if tp > 1:
                    b.collective("c10d::allreduce_", tp_group, tp_ranks, act)
                b.kernel("aten::add", [[t, h], [t, h]], ["bfloat16"] * 2)
                b.mm(t, f // tp, h)
                b.kernel("aten::gelu", [[t, f // tp]], ["bfloat16"])
                b.mm(t, h, f // tp)
                if tp > 1:
                    b.collective("c10d::allreduce_", tp_group, tp_ranks, act)
            if nxt is not None:
                b.p2p("c10d::send", nxt, act)
        b.phase = "backward"
        for _ in range(microbatches):
            if nxt is not None:
                b.p2p("c10d::recv_", nxt, act)
            for _ in range(layers_per_stage):
                b.mm(t, f // tp, h)
                b.mm(h, f // tp, t)
                b.kernel("aten::gelu_backward", [[t, f // tp], [t, f // tp]], ["bfloat16"] * 2)
                b.mm(t, h, f // tp)
                b.mm(f // tp, h, t)
                if tp > 1:
                    b.collective("c10d::allreduce_", tp_group, tp_ranks, act)
                q = [1, heads, t, hd]
                b.kernel("aten::_scaled_dot_product_flash_attention_backward", [q, q, q, q], ["bfloat16"] * 4,
                         args={"is_causal": True})
                b.mm(t, h // tp, h)
                b.mm(h, h // tp, t)
                b.mm(t, h, 3 * h // tp)
                b.mm(3 * h // tp, h, t)
                if tp > 1:
                    b.collective("c10d::allreduce_", tp_group, tp_ranks, act)
                b.kernel("aten::native_layer_norm_backward", [[t, h], [t, h], [h]], ["bfloat16"] * 3)
            if prev is not None:
                b.p2p("c10d::send", prev, act)
        pending = []
        if dp > 1:
            for _ in range(dp_buckets):
                pending.append(b.collective("c10d::allreduce_", dp_group, dp_ranks, params * 2 // dp_buckets,
                                            async_op=True))
            for row in pending:
                b.wait(row)
        b.phase = "optimizer"
        n = params // 4
        b.kernel("aten::_fused_adamw_", [[n]] * 4, ["float32"] * 4, args={"list_lengths": [1, 1, 1, 1]})
    return b


def _roles(rank: int, tp: int, pp: int) -> tuple[str, list[int], str, list[int], int | None, int | None]:
    tp_i, pp_i, dp_i = rank % tp, (rank // tp) % pp, rank // (tp * pp)
    return (f"tp{dp_i}.{pp_i}", [(dp_i * pp + pp_i) * tp + t for t in range(tp)],
            f"dp{pp_i}.{tp_i}", None, (dp_i * pp + pp_i - 1) * tp + tp_i if pp_i > 0 else None,
            (dp_i * pp + pp_i + 1) * tp + tp_i if pp_i < pp - 1 else None)


def parallel3d_job(tp: int, pp: int, dp: int, gpus_per_node: int = 8, **kw) -> CollatedJob:
    """A collated 3-D parallel job, deduplicated like the launcher would: one trace per pipeline stage,
    shared by every rank of that stage, each rank with its own groups and peers."""
    world = tp * pp * dp
    reps = {}
    for stage in range(pp):
        r = stage * tp
        reps[stage] = rep_trace(r, parallel3d_rank(r, tp, pp, dp, **kw).table())
    views = []
    for rank in range(world):
        rep = reps[(rank // tp) % pp]
        tpg, tpr, dpg, _, prev, nxt = _roles(rank, tp, pp)
        dpr = [(d * pp + (rank // tp) % pp) * tp + rank % tp for d in range(dp)]
        groups = [(None, None) if g is None else (tpg, tuple(tpr)) if g.startswith("tp") else (dpg, tuple(dpr))
                  for g, _ in rep.slots.group_keys]
        peers = [None if p is None else prev if p < rep.rank else nxt for p in rep.slots.peer_keys]
        views.append(RankView(rank, rep, groups, peers))
    summary = EmulationSummary(world_size=world, nnodes=max(world // gpus_per_node, 1),
                               nproc_per_node=min(gpus_per_node, world), gpu="h100", ok=True, complete=True)
    return CollatedJob(out=None, summary=summary, world_size=world, nnodes=summary.nnodes,
                       nproc_per_node=summary.nproc_per_node, reps={rep.rank: rep for rep in reps.values()},
                       ranks=views)


def host_bound_tables(host_gaps_s: list[float], iterations: int = 3, kernels: int = 10) -> dict[int, pa.Table]:
    """One table per rank (one rank per entry of `host_gaps_s`): `kernels` tiny adds an iteration, each after
    that rank's host gap (its Python), and with several ranks an all-reduce closing every iteration."""
    world = len(host_gaps_s)
    tables = {}
    for r, gap in enumerate(host_gaps_s):
        b = TraceBuilder(r, host_gap_s=gap)
        for it in range(iterations):
            b.iteration = it
            for _ in range(kernels):
                b.kernel("aten::add", [[64, 64], [64, 64]], ["float32"] * 2)
            if world > 1:
                b.collective("c10d::allreduce_", "0", list(range(world)), 4096)
        tables[r] = b.table()
    return tables


def ddp_rank(rank: int, world: int, layers: int = 4, hidden: int = 2048, tokens: int = 8192,
             async_op: bool = True, iterations: int = 3, record_waits: bool = False) -> TraceBuilder:
    """One rank of a data-parallel MLP stack: each layer's gradient bucket is all-reduced as soon as the
    backward produced it (async, DDP-style, so it can overlap the rest of the backward) or synchronously."""
    b = TraceBuilder(rank)
    ranks = list(range(world))
    h, t = hidden, tokens
    for it in range(iterations):
        b.iteration = it
        b.phase = "forward"
        b.kernel("aten::embedding", [[50304, h], [8, t // 8]], ["bfloat16", "int64"], [[8, t // 8, h]])
        for _ in range(layers):
            b.mm(t, 4 * h, h)
            b.kernel("aten::gelu", [[t, 4 * h]], ["bfloat16"])
            b.mm(t, h, 4 * h)
        b.phase = "backward"
        pending = []
        for _ in range(layers):
            b.mm(t, 4 * h, h)
            b.mm(4 * h, h, t)
            b.kernel("aten::gelu_backward", [[t, 4 * h], [t, 4 * h]], ["bfloat16"] * 2)
            b.mm(t, h, 4 * h)
            b.mm(h, 4 * h, t)
            pending.append(b.collective("c10d::allreduce_", "0", ranks, 8 * h * h * 4, async_op=async_op))
        if record_waits:
            for row in pending:
                b.wait(row)
        b.phase = "optimizer"
        b.kernel("aten::_fused_adamw_", [[8 * h * h * layers]] * 4, ["float32"] * 4,
                 args={"list_lengths": [1, 1, 1, 1]})
    return b
