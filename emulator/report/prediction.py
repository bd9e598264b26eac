"""`OUT/prediction.json`: the answer (`Prediction`), with key names that are a contract.

Definitions behind the numbers:
- iteration_time_s: steady state, the median of the iterations after the first
  (`emulator.simulate.analysis`); iterations_s lists every iteration.
- memory: from emulation.json (the emulated caching allocator), per rank, deduplicated ranks
  taking their representative's figure. When the simulated part has less memory than the
  reserved peak (re-targeting a trace to a smaller GPU) the prediction is OOM too.
- model_flops_per_iteration: the FLOPs of every kernel of every rank in a steady iteration, as
  recorded. Recomputation (activation checkpointing) *is* counted, because the trace holds the
  recomputed forward kernels; the `mfu` is therefore a hardware-FLOPs utilisation (HFU) when
  the program recomputes.
- mfu: model_flops_per_iteration / (iteration_time_s x world_size x peak), with the peak of the
  dtype doing most of the tensor-core FLOPs (bf16 for a bf16 autocast run).
- tokens_per_iteration: the flag if given; otherwise inferred as the number of token ids fed to
  the vocabulary embedding (each rank's largest `aten::embedding` table) in forward, summed over
  ranks and divided by the iterations counted. Ranks that share a batch (tensor/context
  parallel) are each counted, so pass `--tokens-per-iteration` for those layouts;
  `tokens_source` says which rule applied. null when neither gives a number.
- cost: iteration_time_s x world_size x price per GPU-hour / 3600.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from emulator.collate.hangs import HangReport
from emulator.collate.job import CollatedJob
from emulator.core.ops import numel, op_family
from emulator.core.roofline import TENSOR_CORE_FAMILIES, row_dtype
from emulator.estimate.durations import Estimates
from emulator.simulate.analysis import Timing
from emulator.simulate.cluster import Cluster
from emulator.trace.summaries import EmulationSummary

CONTRACT_KEYS = ("gpu", "world_size", "nnodes", "nproc_per_node", "iteration_time_s", "iterations_s", "breakdown_s",
                 "peak_memory_bytes", "peak_memory_bytes_per_rank", "memory_reserved_bytes", "oom",
                 "model_flops_per_iteration", "mfu", "tokens_per_iteration", "tokens_per_s", "cost_per_iteration_usd",
                 "estimator", "emulation_wall_s", "simulation_wall_s")


def memory_section(summary: EmulationSummary, world: int, capacity: int) -> dict:
    alloc = summary.per_rank(summary.peak_allocated_bytes)[:world]
    reserved = summary.per_rank(summary.peak_reserved_bytes)[:world]
    known_a = [a for a in alloc if a is not None]
    known_r = [r for r in reserved if r is not None]
    oom_ranks = sorted({int(r) for r in summary.oom_ranks})
    emulated_oom = bool(summary.oom) or bool(oom_ranks)
    over = [r for r, v in enumerate(reserved) if v is not None and v > capacity]
    oom = emulated_oom or bool(over)
    reason = None
    if emulated_oom:
        reason = (f"out of memory on rank(s) {oom_ranks or '?'} during emulation on {summary.gpu}: "
                  "the program raised torch.cuda.OutOfMemoryError")
    elif over:
        reason = (f"peak reserved memory {max(reserved[r] for r in over) / 2**30:.1f} GiB on rank(s) {over[:16]} "
                  f"exceeds the target's {capacity / 2**30:.1f} GiB")
    return dict(peak_memory_bytes=max(known_a) if known_a else None, peak_memory_bytes_per_rank=alloc,
                memory_reserved_bytes=max(known_r) if known_r else None,
                memory_reserved_bytes_per_rank=reserved, memory_capacity_bytes=capacity, oom=oom,
                oom_ranks=oom_ranks or over, oom_reason=reason, fits=not oom)


def _steady_rows(rep, steady: list[int]) -> np.ndarray:
    return np.isin(np.asarray(rep.iteration), steady)


def flops_and_dtype(job: CollatedJob, steady: list[int]) -> tuple[float, str]:
    """Total kernel FLOPs of one steady iteration over all ranks, and the dtype doing most tensor-core FLOPs."""
    if not steady:
        return 0.0, "bfloat16"
    count: dict[int, int] = {}
    for v in job.ranks:
        count[v.rep.rank] = count.get(v.rep.rank, 0) + 1
    total = 0.0
    by_dtype: dict[str, float] = {}
    for r, rep in job.reps.items():
        mask = _steady_rows(rep, steady) & np.array([k == "kernel" for k in rep.kind])
        total += float(rep.flops[mask].sum()) * count.get(r, 0)
        dtypes = rep.table.column("dtypes").to_pylist() if "dtypes" in rep.table.column_names else None
        for i in np.flatnonzero(mask):
            if rep.flops[i] > 0 and op_family(rep.op[i]) in TENSOR_CORE_FAMILIES:
                d = row_dtype(rep.op[i], dtypes[i] if dtypes else None)
                by_dtype[d] = by_dtype.get(d, 0.0) + rep.flops[i]
    dtype = max(by_dtype, key=by_dtype.get) if by_dtype else "bfloat16"
    return total / len(steady), dtype


def infer_tokens(job: CollatedJob, steady: list[int]) -> float | None:
    if not steady:
        return None
    count: dict[int, int] = {}
    for v in job.ranks:
        count[v.rep.rank] = count.get(v.rep.rank, 0) + 1
    total = 0.0
    for r, rep in job.reps.items():
        mask = _steady_rows(rep, steady)
        rows = [i for i in np.flatnonzero(mask) if rep.op[i] == "aten::embedding" and rep.phase[i] == "forward"]
        if not rows:
            continue
        shapes = rep.table.column("shapes").to_pylist()
        sizes = [(numel(shapes[i][0]) if shapes[i] else 0, numel(shapes[i][1]) if shapes[i] and len(shapes[i]) > 1
                  else 0) for i in rows]
        biggest = max(s[0] for s in sizes)
        total += sum(ids for table, ids in sizes if table == biggest) * count.get(r, 0)
    return total / len(steady) if total else None


def _finite(x):
    return x if x is not None and isinstance(x, (int, float)) and math.isfinite(x) else None


OPTIONAL_KEYS = ("emulation_failed", "warning")  # present only when they say something


@dataclass
class Prediction:
    """What `maya simulate` / `maya predict` answer; `to_json()` is prediction.json."""

    gpu: str
    gpu_name: str
    world_size: int
    nnodes: int
    nproc_per_node: int
    iteration_time_s: float | None
    iterations_s: list[float]
    breakdown_s: dict[str, float | None]  # compute, communication, exposed_communication, host, idle
    peak_memory_bytes: int | None
    peak_memory_bytes_per_rank: list[int | None]
    memory_reserved_bytes: int | None
    memory_reserved_bytes_per_rank: list[int | None]
    memory_capacity_bytes: int
    oom: bool
    oom_ranks: list[int]
    oom_reason: str | None
    fits: bool
    model_flops_per_iteration: float
    mfu: float | None
    mfu_peak_dtype: str
    tokens_per_iteration: float | None
    tokens_source: str | None
    tokens_per_s: float | None
    price_per_gpu_hour: float
    cost_per_iteration_usd: float | None
    cost_per_million_tokens_usd: float | None
    estimator: dict  # kernels, collectives (labels), coverage{learned, fallback} (shares of device time)
    emulation_wall_s: float | None
    simulation_wall_s: float
    hang: dict | None
    cluster: dict
    emulated_gpu: str | None
    iterations: list[int]
    setup_s: float | None
    steady_iterations: list[int]
    host_speed: dict = field(default_factory=dict)  # how host gaps were scaled (emulator.hosttime)
    timeline: bool = False  # timeline.json was written
    # emulator.core.routing: the policy that decided router choices and token counts, when the program had any
    routing: str | None = None
    # ops without a fake kernel recorded with a best guess (`--allow-unsupported`), timed by the roofline
    unsupported_ops: dict = field(default_factory=dict)
    emulation_failed: dict | None = None  # {rank, error}: the trace stops where the program failed
    warning: str | None = None

    def to_json(self) -> dict:
        out = asdict(self)
        for k in OPTIONAL_KEYS:
            if out[k] is None:
                del out[k]
        return out

    @classmethod
    def from_json(cls, data: dict) -> Prediction:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def build_prediction(job: CollatedJob, cluster: Cluster, timing: Timing | None, estimates: Estimates | None,
                     simulation_wall_s: float, tokens_per_iteration: float | None = None,
                     hang: HangReport | None = None, host_speed: dict | None = None) -> Prediction:
    spec = cluster.spec
    world = job.world_size
    summary = job.summary
    mem = memory_section(summary, world, spec.memory_bytes)
    t_iter = timing.iteration_time_s if timing and timing.iterations_s and hang is None else None
    steady = timing.steady if timing else []
    flops, dtype = flops_and_dtype(job, steady)
    peak = spec.peak_for(dtype)
    tokens_source = "flag" if tokens_per_iteration else None
    if not tokens_per_iteration:
        tokens_per_iteration = infer_tokens(job, steady)
        tokens_source = "inferred from the vocabulary embedding's inputs" if tokens_per_iteration else None
    cost = t_iter * world * cluster.price_per_gpu_hour / 3600 if t_iter else None
    tokens_per_s = tokens_per_iteration / t_iter if t_iter and tokens_per_iteration else None
    pred = Prediction(
        gpu=spec.key, gpu_name=spec.name, world_size=world, nnodes=cluster.nnodes, nproc_per_node=cluster.gpus_per_node,
        iteration_time_s=_finite(t_iter),
        iterations_s=[float(x) for x in timing.iterations_s] if timing and hang is None else [],
        breakdown_s={k: float(v) for k, v in timing.breakdown_s.items()} if timing and hang is None else
        dict.fromkeys(("compute", "communication", "exposed_communication", "host", "idle")),
        **mem,
        model_flops_per_iteration=flops,
        mfu=_finite(flops / (t_iter * world * peak)) if t_iter else None,
        mfu_peak_dtype=dtype,
        tokens_per_iteration=tokens_per_iteration,
        tokens_source=tokens_source,
        tokens_per_s=_finite(tokens_per_s),
        price_per_gpu_hour=cluster.price_per_gpu_hour,
        cost_per_iteration_usd=_finite(cost),
        cost_per_million_tokens_usd=_finite(cost / tokens_per_iteration * 1e6) if cost and tokens_per_iteration
        else None,
        estimator=dict(kernels=estimates.kernels if estimates else None,
                       collectives=estimates.collectives if estimates else None,
                       coverage=estimates.coverage if estimates else {"learned": None, "fallback": None}),
        emulation_wall_s=summary.emulation_wall_s,
        simulation_wall_s=simulation_wall_s,
        hang=hang.to_dict() if hang else None,
        cluster=cluster.describe(),
        emulated_gpu=summary.gpu,
        iterations=timing.iterations if timing else [],
        setup_s=timing.setup_s if timing and hang is None else None,
        steady_iterations=steady,
        host_speed=dict(host_speed or {}),
        routing=(summary.routing or "balanced") if {"topk", "bincount"} & set(summary.placeholders) else None,
        unsupported_ops=dict(summary.unsupported_ops),
    )
    if summary.ok is False and not pred.oom:
        err = (summary.error or "").strip().splitlines()
        pred.emulation_failed = dict(rank=summary.failed_rank, error=err[-1] if err else None)
    if not summary.complete and not pred.oom:
        pred.warning = "the emulation did not complete; the trace may miss work"
    return pred
