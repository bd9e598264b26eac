"""`maya simulate OUT` / the second half of `maya predict`: collate -> estimate -> simulate -> report.

`predict_from_trace` is the library entry point (returns the prediction dict and writes
`OUT/prediction.json`, `OUT/timeline.json`); `simulate_command` wraps it for the CLI: it prints
the table, turns every expected failure (a trace of another schema version, no predictors for
the GPU, a cluster file with a typo, a layout that does not match the trace) into one clear
message instead of a traceback, and returns `{"ok": False, "error": ...}` for those.

A hang (collectives that do not match across ranks) is an answer, not a crash: the prediction
is written with `hang` set and no time. An OOM is an answer too: it is reported first, and the
time is still predicted when the trace is complete enough to simulate.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from emulator.collate.job import CollateError, HangError, collate
from emulator.core.hardware import UnknownGPUError
from emulator.core.hostspeed import host_gap_scale
from emulator.estimate.estimate import NoPredictorError, estimate, load_predictors
from emulator.report.prediction import build_prediction
from emulator.report.table import print_prediction
from emulator.report.timeline import write_timeline
from emulator.simulate.analysis import timing
from emulator.simulate.cluster import ClusterFileError, build_cluster, read_cluster_file
from emulator.simulate.engine import simulate
from emulator.trace.io import read_summary, write_json
from emulator.trace.schema import TraceSchemaError

PREDICTION_JSON = "prediction.json"
TIMELINE_JSON = "timeline.json"
EXPECTED_ERRORS = (TraceSchemaError, CollateError, ClusterFileError, NoPredictorError, UnknownGPUError,
                   FileNotFoundError)


def predict_from_trace(trace_dir: Path, gpu: str | None = None, nnodes: int | None = None,
                       nproc_per_node: int | None = None, cluster: Path | None = None,
                       price_per_gpu_hour: float | None = None, tokens_per_iteration: float | None = None,
                       timeline: bool = True, roofline_only: bool = False, write: bool = True) -> dict:
    """Predict iteration time, memory and cost of the emulated job in `trace_dir` on a (possibly different)
    GPU and cluster shape. Raises the EXPECTED_ERRORS for inputs that cannot be simulated."""
    t0 = time.perf_counter()
    trace_dir = Path(trace_dir)
    summary = read_summary(trace_dir)
    file = read_cluster_file(cluster) if cluster else {}
    gpu_key = gpu or file.get("gpu") or summary.get("gpu") or "h100"
    nn = nnodes or file.get("nnodes")
    npn = nproc_per_node or file.get("gpus_per_node") or file.get("nproc_per_node")
    hang = None
    try:
        job = collate(trace_dir, nn, npn)
    except HangError as e:
        hang = e.report
        job = collate(trace_dir, nn, npn, check=False)
    cl = build_cluster(gpu_key, job.nnodes, job.nproc_per_node, file, price_per_gpu_hour)
    host = host_gap_scale(job.summary.get("host_speed"), cl.spec.key,
                          cl.host_gap_scale if "host_gap_scale" in file else None)
    cl = replace(cl, host_gap_scale=host["scale"])
    kernels, collectives = load_predictors(cl.spec, roofline_only)
    est = tm = result = None
    if hang is None:
        est = estimate(job, cl.spec, kernels, collectives, cl.gpus_per_node, cl.learned_internode)
        result = simulate(job, est.durations, cl.launch_overhead_s, cl.host_gap_scale, synchronous=cl.spec.is_cpu)
        hang = result.hang
        if hang is None:
            tm = timing(result, cl.launch_overhead_s, host_gap_scale=cl.host_gap_scale)
    if hang is not None and job.summary.get("oom"):
        hang = None  # a run that died of OOM stops mid-iteration: the OOM is the answer, not the hang
    pred = build_prediction(job, cl, tm, est, time.perf_counter() - t0, tokens_per_iteration, hang)
    pred["host_speed"] = host
    pred["timeline"] = bool(timeline and result is not None and tm is not None)
    if write:
        if pred["timeline"]:
            write_timeline(trace_dir / TIMELINE_JSON, result)
        pred["simulation_wall_s"] = time.perf_counter() - t0
        write_json(trace_dir / PREDICTION_JSON, pred)
    return pred


def simulate_command(trace_dir: Path, gpu: str | None = None, nnodes: int | None = None,
                     nproc_per_node: int | None = None, cluster: Path | None = None,
                     price_per_gpu_hour: float | None = None, tokens_per_iteration: int | None = None,
                     timeline: bool = True, roofline_only: bool = False, console: Console | None = None) -> dict:
    """The CLI's `maya simulate` (and the simulate half of `maya predict`): prints, returns the prediction."""
    c = console or Console()
    try:
        pred = predict_from_trace(trace_dir, gpu=gpu, nnodes=nnodes, nproc_per_node=nproc_per_node, cluster=cluster,
                                  price_per_gpu_hour=price_per_gpu_hour, tokens_per_iteration=tokens_per_iteration,
                                  timeline=timeline, roofline_only=roofline_only)
    except EXPECTED_ERRORS as e:
        c.print(f"[red]error:[/red] {e}", highlight=False)
        return {"ok": False, "error": str(e)}
    print_prediction(pred, c, out_dir=trace_dir)
    pred["ok"] = pred.get("hang") is None
    return pred
