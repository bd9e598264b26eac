"""When calibration runs by itself: a periodic recalibration per GPU and a sensor for new trace shapes.

- `recalibration_schedule` (weekly, off by default) requests the whole chain for every GPU listed in
  $MAYA_CALIBRATE_GPUS (comma separated, default `cpu`); the `maya/gpu` tag lets a fleet's run
  launcher place each run on a node with that part.
- `trace_shapes_sensor` watches a folder of emulation outputs ($MAYA_TRACES, default
  `<warehouse>/traces`): when a trace holds kernel signatures the warehouse has not measured on its
  target GPU, it requests a kernel run benchmarking exactly those (trace-driven calibration).
"""

import hashlib
import json
import os
from pathlib import Path

import dagster as dg

from pipelines.calibration.assets import CALIBRATION_ASSETS, kernel_benchmarks, warehouse
from pipelines.predictors.assets import PREDICTOR_ASSETS, kernel_predictor, published_predictors
from pipelines.resources import GPU_PARTITIONS

calibration_job = dg.define_asset_job("calibration", selection=CALIBRATION_ASSETS + PREDICTOR_ASSETS,
                                      description="the whole chain for one GPU partition")
trace_shapes_job = dg.define_asset_job(
    "calibrate_trace_shapes", selection=[kernel_benchmarks, warehouse, kernel_predictor, published_predictors],
    description="benchmark the signatures of new traces, retrain, publish")


def scheduled_gpus() -> list[str]:
    keys = GPU_PARTITIONS.get_partition_keys()
    wanted = [g.strip() for g in os.environ.get("MAYA_CALIBRATE_GPUS", "cpu").split(",") if g.strip()]
    return [g for g in wanted if g in keys]


@dg.schedule(job=calibration_job, cron_schedule="0 3 * * 0", default_status=dg.DefaultScheduleStatus.STOPPED)
def recalibration_schedule(context: dg.ScheduleEvaluationContext):
    """Weekly recalibration: clocks, drivers and libraries change under a fleet; measurements should follow."""
    stamp = context.scheduled_execution_time.strftime("%Y%m%d")
    for gpu in scheduled_gpus():
        yield dg.RunRequest(run_key=f"recalibrate-{gpu}-{stamp}", partition_key=gpu, tags={"maya/gpu": gpu})


def traces_root() -> Path:
    from emulator.core.settings import warehouse_root

    return Path(os.environ.get("MAYA_TRACES") or warehouse_root() / "traces")


def uncovered_signatures(folder: Path, gpu: str, root: Path | None = None) -> list[str]:
    """Keys of the timed signatures in `folder`'s traces with no ok measurement on `gpu`: one DuckDB query
    over the GPU's partition of the warehouse (a tick must not read every file in Python)."""
    import duckdb

    from emulator.core.settings import warehouse_root
    from pipelines.runners.harvest import harvest

    wanted = {s.key for s in harvest([folder])}
    part = Path(root or warehouse_root()) / "measurements" / f"gpu={gpu}"
    if not wanted or not any(part.glob("source=*/*.parquet")):
        return sorted(wanted)
    glob = str(part / "source=*" / "*.parquet").replace("'", "''")
    con = duckdb.connect()
    try:
        query = (f"SELECT DISTINCT signature FROM read_parquet('{glob}', union_by_name = true) "
                 "WHERE status = 'ok'")
        have = {r[0] for r in con.execute(query).fetchall()}
    finally:
        con.close()
    return sorted(wanted - have)


def _emulation_folders(base: Path) -> list[Path]:
    if not base.is_dir():
        return []
    return sorted(p.parent for p in base.glob("*/emulation.json"))


@dg.sensor(job=trace_shapes_job, minimum_interval_seconds=300, default_status=dg.DefaultSensorStatus.STOPPED)
def trace_shapes_sensor(context: dg.SensorEvaluationContext):
    """New emulation outputs whose kernels are not measured on their GPU → benchmark those signatures."""
    seen = json.loads(context.cursor) if context.cursor else {}
    keys = set(GPU_PARTITIONS.get_partition_keys())
    for folder in _emulation_folders(traces_root()):
        stamp = str((folder / "emulation.json").stat().st_mtime_ns)
        if seen.get(str(folder)) == stamp:
            continue
        seen[str(folder)] = stamp
        try:
            gpu = json.loads((folder / "emulation.json").read_text()).get("gpu")
        except ValueError:
            context.log.warning(f"{folder}: unreadable emulation.json, skipped")
            continue
        if gpu not in keys:
            continue
        try:
            missing = uncovered_signatures(folder, gpu)
        except (OSError, ValueError) as e:  # no trace files (an OOM run), an unreadable Parquet...
            context.log.warning(f"{folder}: {e}; skipped")
            continue
        if not missing:
            continue
        digest = hashlib.sha1("".join(missing).encode()).hexdigest()[:12]
        yield dg.RunRequest(
            run_key=f"{folder.name}-{gpu}-{digest}", partition_key=gpu, tags={"maya/gpu": gpu},
            run_config={"ops": {"kernel_benchmarks": {"config": {"traces": [str(folder)], "sweep": False}}}})
    context.update_cursor(json.dumps(seen))
