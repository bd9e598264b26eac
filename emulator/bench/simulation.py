"""Simulation speed benchmarks (`make bench` runs them through `emulator.bench`).

Targets (from the project's issue): simulating one iteration of an 8-rank job takes at most 2 s,
and one iteration of a 1,024-rank 3-D parallel (TP 8 x PP 4 x DP 32) job at most 60 s on the
2-core development machine. The jobs are synthetic traces (`emulator.bench.synthetic`: the
shape of the work of a transformer, timed by the roofline), because this machine cannot
emulate 1,024 ranks within a benchmark; the simulator's cost depends on the number of rows,
ranks and collectives, which these reproduce.

- `sim-8-ranks`: `predict_from_trace` on a saved 8-rank data-parallel folder (read, collate,
  estimate, simulate, prediction.json and timeline.json), divided by the iterations simulated.
- `sim-long-trace`: the trial path of `maya search` (`predict_from_trace` without a timeline) on a saved
  8-rank data-parallel folder of 21 gradient-accumulation micro-batches x 48 layers x 2 iterations
  (about 46,000 rows per rank, the shape of the MPT-30B-style FSDP2 trial): read, collate, host time,
  estimate, simulate, prediction, in seconds for the whole trace.
- `sim-1024-ranks-3d`: collate-checked, deduplicated 1,024-rank job in memory: estimate,
  simulate, analyse, per iteration. The simulator runs one representative per class of provably
  identical ranks (`emulator.simulate.classes`); the full per-rank simulation of the same job
  (`simulate(..., classes=False)`) gives the same times and is what `engine_all_ranks_s` measures
  when `all_ranks=True`.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from emulator.bench.synthetic import parallel3d_job, parallel3d_rank, write_job
from emulator.collate.hangs import check_matching
from emulator.core.hardware import get_gpu
from emulator.estimate import estimate, load_predictors
from emulator.simulate.analysis import timing
from emulator.simulate.engine import simulate


def _bench_8_ranks(iterations: int = 3) -> dict:
    kw = dict(tp=1, pp=1, dp=8, layers_per_stage=24, microbatches=2, hidden=2048, tokens=2048,
              iterations=iterations)
    from emulator.pipeline import predict_from_trace

    with tempfile.TemporaryDirectory(prefix="maya-simbench-") as d:
        tables = {r: parallel3d_rank(r, kw["tp"], kw["pp"], kw["dp"], **{k: v for k, v in kw.items()
                                                                        if k not in ("tp", "pp", "dp")}).table()
                  for r in range(8)}
        out = write_job(Path(d) / "out", tables)
        rows = sum(t.num_rows for t in tables.values())
        t0 = time.perf_counter()
        pred = predict_from_trace(out, roofline_only=True)
        wall = time.perf_counter() - t0
    per_it = wall / iterations
    return dict(name="sim-8-ranks", wall_s=per_it, limit_s=2.0, ok=per_it <= 2.0,
                detail=f"{rows // iterations} rows/iteration over 8 ranks; whole run {wall:.2f} s for {iterations} "
                       f"iterations incl. parquet read and timeline; predicted {pred.iteration_time_s * 1e3:.1f} ms")


def _bench_long_trace() -> dict:
    from emulator.pipeline import predict_from_trace

    kw = dict(layers_per_stage=48, microbatches=21, hidden=7168, tokens=2048, iterations=2)
    with tempfile.TemporaryDirectory(prefix="maya-simbench-") as d:
        tables = {r: parallel3d_rank(r, 1, 1, 8, **kw).table() for r in range(8)}
        out = write_job(Path(d) / "out", tables)
        rows = tables[0].num_rows
        t0 = time.perf_counter()
        pred = predict_from_trace(out, roofline_only=True, timeline=False, write=False)
        wall = time.perf_counter() - t0
    return dict(name="sim-long-trace", wall_s=wall, limit_s=60.0, ok=wall <= 60.0,
                detail=f"8 ranks x 21 micro-batches x 48 layers x 2 iterations, no timeline; predicted "
                       f"{pred.iteration_time_s:.3f} s per iteration; {rows:,} rows per rank")


def _bench_1024_ranks(iterations: int = 2, all_ranks: bool = False) -> dict:
    t0 = time.perf_counter()
    job = parallel3d_job(tp=8, pp=4, dp=32, layers_per_stage=8, microbatches=8, hidden=8192, tokens=4096,
                         iterations=iterations)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert check_matching(job) is None
    spec = get_gpu("h100")
    kernels, colls = load_predictors(spec, "roofline")
    est = estimate(job, spec, kernels, colls, 8)
    res = simulate(job, est.durations)
    tm = timing(res, 4e-6)
    wall = time.perf_counter() - t0
    rows = sum(len(v.rep) for v in job.ranks)
    per_it = wall / iterations
    extra = {}
    if all_ranks:
        extra["engine_all_ranks_s"] = simulate(job, est.durations, classes=False).wall_s / iterations
    return dict(name="sim-1024-ranks-3d", wall_s=per_it, limit_s=60.0, ok=per_it <= 60.0 and res.hang is None, **extra,
                detail=f"TP8 x PP4 x DP32, {rows // iterations:,} rows/iteration; collate check + estimate + simulate "
                       f"{wall:.2f} s for {iterations} iterations (engine {res.wall_s:.2f} s; "
                       f"trace build {build:.2f} s not counted); predicted {tm.iteration_time_s * 1e3:.1f} ms")


def bench_sim_8_ranks(out_root: Path) -> dict:
    r = _bench_8_ranks()
    return {"s_per_iteration": r["wall_s"], "detail": r["detail"], "target": "<= 2 s per iteration",
            "meets_target": r["ok"]}


def bench_sim_long_trace(out_root: Path) -> dict:
    r = _bench_long_trace()
    return {"s_whole_trace": r["wall_s"], "detail": r["detail"], "target": "<= 60 s", "meets_target": r["ok"]}


def bench_sim_1024_ranks(out_root: Path) -> dict:
    r = _bench_1024_ranks()
    return {"s_per_iteration": r["wall_s"], "detail": r["detail"], "target": "<= 60 s per iteration",
            "meets_target": r["ok"]}


BENCHMARKS = {"sim_8_ranks": bench_sim_8_ranks, "sim_long_trace": bench_sim_long_trace,
              "sim_1024_ranks_3d": bench_sim_1024_ranks}
