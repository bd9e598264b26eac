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
- cuda_event_timings: for each pair of `torch.cuda.Event`s the program timed with `elapsed_time`
  (which reads a placeholder during emulation), the simulated milliseconds between them on rank 0.
- iteration_time_band_s: only for a host-bound step (`bound_by` "host"): the iteration time with each
  rank's host gaps read at the slowest and at the fastest of its host-speed probes instead of their
  median. The step is this machine's host time, scaled, and the probes bracket the speed it was
  recorded at; the same program emulated again lands about that far away (`make bench`).
- notes: what the user should know that does not make the prediction wrong, e.g. OOMs the
  program caught and recovered from (`oom` is only for an OOM that ended a rank).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

import numpy as np
import pyarrow as pa

from emulator.collate.hangs import HangReport
from emulator.collate.job import CollatedJob
from emulator.core.ops import numel, op_family
from emulator.core.roofline import TENSOR_CORE_FAMILIES, row_dtype
from emulator.core.routing import POLICY_PLACEHOLDERS
from emulator.core.variants import describe_variant
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


def _rep_counts(job: CollatedJob) -> dict[int, int]:
    count: dict[int, int] = {}
    for v in job.ranks:
        count[v.rep.rank] = count.get(v.rep.rank, 0) + 1
    return count


def flops_and_dtype(job: CollatedJob, steady: list[int]) -> tuple[float, str]:
    """Total kernel FLOPs of one steady iteration over all ranks, and the dtype doing most tensor-core FLOPs."""
    if not steady:
        return 0.0, "bfloat16"
    count = _rep_counts(job)
    total = 0.0
    by_dtype: dict[str, float] = {}
    families: dict[str, bool] = {}
    for r, rep in job.reps.items():
        mask = _steady_rows(rep, steady) & np.array([k == "kernel" for k in rep.kind])
        total += float(rep.flops[mask].sum()) * count.get(r, 0)
        rows = [i for i in np.flatnonzero(mask & (rep.flops > 0)).tolist()
                if families.setdefault(rep.op[i], op_family(rep.op[i]) in TENSOR_CORE_FAMILIES)]
        if not rows:
            continue
        has_dtypes = "dtypes" in rep.table.column_names
        dtypes = rep.table.column("dtypes").take(pa.array(rows, type=pa.int64())).to_pylist() if has_dtypes else None
        chosen: dict[tuple, str] = {}
        for j, i in enumerate(rows):
            dt = dtypes[j] if dtypes else None
            key = (rep.op[i], tuple(dt) if dt else None)
            if key not in chosen:
                chosen[key] = row_dtype(rep.op[i], dt)
            by_dtype[chosen[key]] = by_dtype.get(chosen[key], 0.0) + rep.flops[i]
    dtype = max(by_dtype, key=by_dtype.get) if by_dtype else "bfloat16"
    return total / len(steady), dtype


def infer_tokens(job: CollatedJob, steady: list[int]) -> float | None:
    if not steady:
        return None
    count = _rep_counts(job)
    total = 0.0
    for r, rep in job.reps.items():
        mask = _steady_rows(rep, steady)
        rows = [i for i in np.flatnonzero(mask).tolist()
                if rep.op[i] == "aten::embedding" and rep.phase[i] == "forward"]
        if not rows:
            continue
        shapes = rep.table.column("shapes").take(pa.array(rows, type=pa.int64())).to_pylist()
        sizes = [(numel(sh[0]) if sh else 0, numel(sh[1]) if sh and len(sh) > 1 else 0) for sh in shapes]
        biggest = max(s[0] for s in sizes)
        total += sum(ids / _lookup_sharers(rep, i) for i, (table, ids) in zip(rows, sizes, strict=True)
                     if table == biggest) * count.get(r, 0)
    return total / len(steady) if total else None


_COMBINES = ("all_reduce", "reduce_scatter")
_LOOKUP_WINDOW = 8  # rows after the lookup in which a vocabulary-parallel embedding combines its partial output


def _lookup_sharers(rep, i: int) -> int:
    """How many ranks looked up the same token ids as row `i`: a vocabulary-parallel embedding (Megatron's,
    or a row-wise sharded one) gives each tensor-parallel rank a slice of the table and the same ids, then
    all-reduces (or reduce-scatters) the partial output over that group inside the embedding module. Those
    ranks count the tokens once between them; any other lookup is its rank's own."""
    for j in range(i + 1, min(i + 1 + _LOOKUP_WINDOW, len(rep))):
        if rep.module[j] != rep.module[i]:
            break
        if rep.collective[j] in _COMBINES and rep.group_ranks[j]:
            return len(rep.group_ranks[j])
    return 1


def _finite(x):
    return x if x is not None and isinstance(x, (int, float)) and math.isfinite(x) else None


OPTIONAL_KEYS = ("emulation_failed", "warning", "gpu_variant")  # present only when they say something


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
    estimator: dict  # kernels, collectives (labels), coverage{learned, fallback}, adjusted_share, conditions
    device_time_by_family: dict  # family -> device_s per steady iteration and rank, fallback/adjusted shares
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
    gpu_variant: dict | None = None  # a variant of a known part: its base and what differs (emulator.core.variants)
    notes: list[str] = field(default_factory=list)
    cuda_event_timings: list[dict] = field(default_factory=list)  # emulator.simulate.cuda_events
    # phase (forward, backward, optimizer, other) -> compute device_s per steady iteration and rank (no collectives)
    device_time_by_phase: dict = field(default_factory=dict)
    bound_by: str | None = None  # what sets the step: host | waiting | communication | compute (see `bound_by`)
    # a host-bound step: [low, high] with each rank's host gaps read at its slowest and fastest host-speed probe
    iteration_time_band_s: list[float] | None = None

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
                       coverage=estimates.coverage if estimates else {"learned": None, "fallback": None},
                       adjusted_share=estimates.adjusted_share if estimates else None,
                       conditions=estimates.conditions if estimates else {}),
        device_time_by_family=estimates.family_budget(steady, world) if estimates and steady else {},
        device_time_by_phase=estimates.phase_budget(steady, world) if estimates and steady else {},
        emulation_wall_s=summary.emulation_wall_s,
        simulation_wall_s=simulation_wall_s,
        hang=hang.to_dict() if hang else None,
        cluster=cluster.describe(),
        emulated_gpu=summary.gpu,
        iterations=timing.iterations if timing else [],
        setup_s=timing.setup_s if timing and hang is None else None,
        steady_iterations=steady,
        host_speed=dict(host_speed or {}),
        gpu_variant=describe_variant(spec),
        routing=(summary.routing or "balanced") if POLICY_PLACEHOLDERS & set(summary.placeholders) else None,
        unsupported_ops=dict(summary.unsupported_ops),
    )
    if summary.ok is False and not pred.oom:
        err = (summary.error or "").strip().splitlines()
        pred.emulation_failed = dict(rank=summary.failed_rank, error=err[-1] if err else None)
    if not summary.complete and not pred.oom:
        pred.warning = "the emulation did not complete; the trace may miss work"
    pred.notes = notes(summary)
    pred.bound_by = bound_by(pred.iteration_time_s, pred.breakdown_s, timing.busiest_host_s if timing else None)
    return pred


HOST_BOUND_SHARE = 0.9  # the host's own work per step, as a share of the step, that makes it the limit
IDLE_BOUND_SHARE = 0.5  # the device idle for more than this share of the step: it is not what sets the step


def bound_by(iteration_s: float | None, breakdown: dict, busiest_host_s: float | None = None) -> str | None:
    """What sets the step, from its breakdown: "host" when a rank's own host work (the busiest rank's where
    given, else the ranks' mean in `breakdown`) fills the step (a faster GPU would not shorten it, and the
    figure is host time scaled to the target's CPU), "waiting" when the device idles most of the step without
    that (pipeline bubbles, a slower peer), else "communication" when exposed communication exceeds compute,
    else "compute"."""
    if not iteration_s or any(breakdown.get(k) is None for k in ("compute", "exposed_communication", "host", "idle")):
        return None
    if max(breakdown["host"], busiest_host_s or 0.0) >= HOST_BOUND_SHARE * iteration_s:
        return "host"
    if breakdown["idle"] > IDLE_BOUND_SHARE * iteration_s:
        return "waiting"
    return "communication" if breakdown["exposed_communication"] > breakdown["compute"] else "compute"


def notes(summary: EmulationSummary) -> list[str]:
    """Things the run did that the numbers already account for, said once."""
    out = []
    if summary.ooms_caught:
        ranks = sorted(int(r) for r in summary.ooms_caught)
        total = sum(summary.ooms_caught.values())
        out.append(f"the program caught {total} torch.cuda.OutOfMemoryError on rank(s) {ranks} and went on; "
                   "the memory figures are those of the run that continued")
    return out
