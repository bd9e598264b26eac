"""The prediction stages in order, for a saved emulation folder: the library face of `maya simulate`.

    collate (emulator.collate)  ->  host time (emulator.hosttime)  ->  estimate (emulator.estimate)
        ->  simulate + analyse (emulator.simulate)  ->  report (emulator.report)

`predict_from_trace` returns the `Prediction` and writes `OUT/prediction.json` and
`OUT/timeline.json`, after removing the ones an earlier simulation left: whatever happens, the
folder never shows a prediction beside a trace it was not made from. It raises one of
EXPECTED_ERRORS for inputs that cannot be simulated (a trace of another schema version, a
truncated or damaged file, an interrupted emulation, no predictors for the GPU, a cluster file
with a typo, a layout that does not match the trace); the CLI turns those into one clear line.

A hang (collectives that do not match across ranks) is an answer, not a crash: the prediction
is written with `hang` set and no time. An OOM is an answer too: it is reported first, and the
time is still predicted when the trace is complete enough to simulate.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from emulator.collate.hangs import HangError
from emulator.collate.job import CollatedJob, CollateError, collate
from emulator.core.hardware import UnknownGPUError
from emulator.core.variants import GPUVariantError, read_gpu_spec_file, variant_from_table
from emulator.estimate import NoPredictorError, estimate, load_predictors
from emulator.estimate.durations import Estimates
from emulator.hosttime import apply_host_time, probe_bands
from emulator.report.prediction import Prediction, build_prediction
from emulator.report.timeline import write_timeline
from emulator.simulate.analysis import timing
from emulator.simulate.cluster import Cluster, ClusterFileError, build_cluster, read_cluster_file
from emulator.simulate.cuda_events import cuda_event_timings
from emulator.simulate.engine import simulate
from emulator.trace.io import DamagedFile, read_summary, write_json
from emulator.trace.layout import EMULATION_JSON, PREDICTION_JSON, TIMELINE_JSON
from emulator.trace.schema import TraceSchemaError
from emulator.trace.summaries import InterruptedEmulation, SummaryError

EXPECTED_ERRORS = (TraceSchemaError, SummaryError, DamagedFile, CollateError, ClusterFileError, NoPredictorError,
                   UnknownGPUError, GPUVariantError, FileNotFoundError)


def host_speed_band(job: CollatedJob, cl: Cluster, est: Estimates) -> list[float] | None:
    """[low, high] iteration time of a host-bound step with each rank's host gaps read at the slowest and
    the fastest of its host-speed probes instead of their median (`emulator.hosttime.probe_bands`); None
    when no rank's probes spread (fewer than two: a trace from before probes).

    Why: such a step is this machine's host time, scaled; the probes bracket the speed its gaps were
    recorded at, and the range is what the figure carries from it (the same program emulated five
    times moves that much, `make bench`). Two more simulations of a step that is mostly host time,
    without a timeline; each rank's median-read gaps are put back after."""
    factors = probe_bands(job)
    if all(f == (1.0, 1.0) for f in factors.values()):
        return None
    median = {rep.rank: rep.host_gap for rep in job.reps.values()}
    ends = []
    try:
        for end in (0, 1):
            for rep in job.reps.values():
                rep.host_gap = [g * factors[rep.rank][end] for g in median[rep.rank]]
            result = simulate(job, est.durations, cl.launch_overhead_s, synchronous=cl.spec.is_cpu, classes=True)
            tm = timing(result, cl.launch_overhead_s) if result.hang is None else None
            if tm is None or not tm.iteration_time_s:
                return None
            ends.append(float(tm.iteration_time_s))
    finally:
        for rep in job.reps.values():
            rep.host_gap = median[rep.rank]
    return sorted(ends)


def predict_from_trace(trace_dir: Path, gpu: str | None = None, nnodes: int | None = None,
                       nproc_per_node: int | None = None, cluster: Path | None = None,
                       price_per_gpu_hour: float | None = None, tokens_per_iteration: float | None = None,
                       timeline: bool = True, roofline_only: bool = False, write: bool = True,
                       gpu_spec: Path | None = None, predictors=load_predictors) -> Prediction:
    """Predict iteration time, memory and cost of the emulated job in `trace_dir` on a (possibly different)
    GPU and cluster shape. Raises the EXPECTED_ERRORS for inputs that cannot be simulated.

    The part: `gpu`, else the variant of `gpu_spec` (a `[gpu]` file), else the cluster file's, else the
    emulated one (a variant the emulation ran on is registered again from emulation.json).
    `predictors(spec, source)` returns the (kernel, collective) predictors; a caller that predicts many
    traces (`maya search`) passes a memoized `load_predictors` so each model is loaded once per process."""
    t0 = time.perf_counter()
    trace_dir = Path(trace_dir)
    if write and (trace_dir / EMULATION_JSON).exists():  # only in maya's own folders
        for name in (PREDICTION_JSON, TIMELINE_JSON):
            (trace_dir / name).unlink(missing_ok=True)
    summary = read_summary(trace_dir)
    if summary.interrupted:
        raise InterruptedEmulation(f"{trace_dir}: the emulation was interrupted (Ctrl-C / SIGTERM) after "
                                   f"{summary.emulation_wall_s:.1f} s; its traces are partial. Re-run "
                                   f"`maya emulate` (or `maya predict`) into this folder")
    if summary.gpu_spec:
        variant_from_table(summary.gpu_spec, f"{trace_dir}/emulation.json gpu_spec")
    file = read_cluster_file(cluster) if cluster else {}
    variant = read_gpu_spec_file(gpu_spec).key if gpu_spec else None
    gpu_key = gpu or variant or file.get("gpu") or summary.gpu or "h100"
    nn = nnodes or file.get("nnodes")
    npn = nproc_per_node or file.get("gpus_per_node") or file.get("nproc_per_node")
    hang = None
    try:
        job = collate(trace_dir, nn, npn)
    except HangError as e:
        hang = e.report
        job = collate(trace_dir, nn, npn, check=False)
    cl = build_cluster(gpu_key, job.nnodes, job.nproc_per_node, file, price_per_gpu_hour)
    host = apply_host_time(job, cl.spec.key, cl.host_gap_scale if "host_gap_scale" in file else None)
    cl = replace(cl, host_gap_scale=host["scale"])
    kernels, collectives = predictors(cl.spec, "roofline" if roofline_only else "registry")
    est = tm = result = None
    if hang is None:
        est = estimate(job, cl.spec, kernels, collectives, cl.gpus_per_node, cl.learned_internode)
        # rank classes give the same times; without a timeline (whose flows need every rank's collectives)
        # use them for any job, not only the large ones
        result = simulate(job, est.durations, cl.launch_overhead_s, synchronous=cl.spec.is_cpu,
                          classes=None if timeline else True)
        hang = result.hang
        if hang is None:
            tm = timing(result, cl.launch_overhead_s)
    if hang is not None and job.summary.oom:
        hang = None  # a run that died of OOM stops mid-iteration: the OOM is the answer, not the hang
    pred = build_prediction(job, cl, tm, est, time.perf_counter() - t0, tokens_per_iteration, hang, host)
    if result is not None and hang is None:
        pred.cuda_event_timings = cuda_event_timings(result)
    if pred.bound_by == "host" and est is not None:
        pred.iteration_time_band_s = host_speed_band(job, cl, est)
    pred.timeline = bool(timeline and result is not None and tm is not None)
    if write:
        if pred.timeline:
            write_timeline(trace_dir / TIMELINE_JSON, result, launch_overhead_s=cl.launch_overhead_s)
        pred.simulation_wall_s = time.perf_counter() - t0
        write_json(trace_dir / PREDICTION_JSON, pred.to_json())
    return pred
