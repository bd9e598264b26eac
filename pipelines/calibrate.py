"""`python -m pipelines.calibrate --gpu G [--budget-s S]` (`make calibrate GPU=G`, `maya calibrate --gpu G`).

Materialises the calibration chain for one GPU partition in this process (Dagster `materialize`,
instance under `<warehouse>/dagster_home`): hardware inventory, kernel and collective
benchmarks, reference import, warehouse views and checks, predictor training and publishing.

The part asked for must be the local device (or `cpu`). If it is not, this says so, exits with
status 2 and writes nothing. A run killed half-way resumes where it stopped when started again.
One calibration of a partition at a time: a second one started while the first runs says who is
running and exits with EXIT_BUSY, changing nothing (two would interleave their run ids).
"""

import argparse
import contextlib
import fcntl
import os
import sys
from pathlib import Path

EXIT_WRONG_DEVICE = 2
EXIT_BUSY = 75  # another calibration of the partition is running (sysexits' EX_TEMPFAIL: retry later)
EXIT_INTERRUPTED = 130


class PartitionBusy(RuntimeError):
    """Another process is calibrating this partition."""


@contextlib.contextmanager
def partition_lock(root: Path, gpu: str):
    """Hold `<root>/runs/gpu=<gpu>/calibrate.lock` (flock: released when the process ends, however it ends)."""
    import datetime as dt

    path = Path(root) / "runs" / f"gpu={gpu}" / "calibrate.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise PartitionBusy(f"a calibration of {gpu!r} is already running ({holder}); wait for it to finish "
                                "or stop it, then run this again (it resumes the unfinished run). "
                                "Nothing was changed.") from None
        f.seek(0)
        f.truncate()
        f.write(f"PID {os.getpid()} since {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC")
        f.flush()
        yield


def _local_check(gpu: str) -> str | None:
    """None when `gpu` can be calibrated here, else the reason (checked before anything is written)."""
    from pipelines.runners.timing import DeviceMismatch, local_device

    try:
        local_device(gpu)
    except DeviceMismatch as e:
        return str(e)
    return None


def _nvml_names() -> list[str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
                    for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - pynvml.NVMLError (no driver) or no pynvml: no GPUs seen
        return []


def run_config(gpu: str, budget_s: float | None, traces: list[str], collective_budget_s: float | None,
               in_training_budget_s: float | None = None) -> dict:
    kcfg: dict = {}
    if budget_s:
        kcfg["budget_s"] = float(budget_s)
    if traces:
        kcfg["traces"] = [str(Path(t).resolve()) for t in traces]
    ccfg: dict = {}
    if collective_budget_s:
        ccfg["budget_s"] = float(collective_budget_s)
    icfg = {"budget_s": float(in_training_budget_s)} if in_training_budget_s else {}
    return {"ops": {"kernel_benchmarks": {"config": kcfg}, "collective_benchmarks": {"config": ccfg},
                    "in_training_benchmarks": {"config": icfg}},
            "loggers": {"console": {"config": {"log_level": os.environ.get("MAYA_LOG_LEVEL", "INFO")}}}}


def calibrate(gpu: str, *, budget_s: float | None = None, traces: list[str] = (), collective_budget_s=None,
              skip_predictors: bool = False, root: Path | None = None, in_training_budget_s: float | None = None):
    """Materialise the chain for `gpu`; returns the Dagster result (raises nothing on failed steps)."""
    import dagster as dg

    from emulator.core.settings import warehouse_root
    from pipelines.calibration.assets import CALIBRATION_ASSETS
    from pipelines.calibration.checks import WAREHOUSE_CHECKS
    from pipelines.predictors.assets import PREDICTOR_ASSETS
    from pipelines.resources import WarehouseResource, ensure_instance

    root = Path(root) if root else warehouse_root()
    home = ensure_instance(Path(os.environ.get("DAGSTER_HOME") or root / "dagster_home"))
    os.environ["DAGSTER_HOME"] = str(home)
    instance = dg.DagsterInstance.get()
    assets = CALIBRATION_ASSETS if skip_predictors else CALIBRATION_ASSETS + PREDICTOR_ASSETS
    return dg.materialize([*assets, *WAREHOUSE_CHECKS], partition_key=gpu, instance=instance, raise_on_error=False,
                          resources={"warehouse_store": WarehouseResource(root=str(root))},
                          run_config=run_config(gpu, budget_s, list(traces), collective_budget_s, in_training_budget_s),
                          tags={"maya/gpu": gpu})


def _report(result, gpu: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"calibration of {gpu}")
    t.add_column("step")
    t.add_column("result")
    t.add_column("details")
    keys = ("rows_ok", "rows_failed", "chunks_written", "chunks_skipped", "budget_exhausted", "rows", "run_id")
    for ev in result.all_events:
        if ev.event_type_value == "ASSET_MATERIALIZATION":
            mat = ev.event_specific_data.materialization
            md = {k: getattr(v, "value", v) for k, v in mat.metadata.items() if k in keys}
            details = ", ".join(f"{k}={v}" for k, v in md.items())
            t.add_row(mat.asset_key.to_user_string(), "[green]done[/green]", details)
        elif ev.event_type_value == "STEP_FAILURE":
            err = ev.event_specific_data.error
            msg = (err.cause.message if err.cause else err.message).strip().splitlines()
            t.add_row(ev.step_key or "?", "[red]failed[/red]", (msg[-1] if msg else "")[:200])
        elif ev.event_type_value == "ASSET_CHECK_EVALUATION":
            c = ev.event_specific_data
            t.add_row(f"check {c.check_name}", "[green]passed[/green]" if c.passed else
                      f"[{'red' if c.severity.value == 'ERROR' else 'yellow'}]failed[/]", (c.description or "")[:200])
    Console(width=160).print(t)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipelines.calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--gpu", required=True, help="maya GPU key of the local part, or 'cpu'")
    p.add_argument("--budget-s", type=float, default=None, help="time budget of the kernel sweep (seconds)")
    p.add_argument("--collective-budget-s", type=float, default=None)
    p.add_argument("--in-training-budget-s", type=float, default=None,
                   help="CPU: seconds of in-training profiles (real training steps, every op timed; default 600)")
    p.add_argument("--traces", nargs="*", default=[], help="emulation output folders to benchmark first")
    p.add_argument("--skip-predictors", action="store_true", help="measure only; do not train/publish")
    a = p.parse_args(argv)

    from emulator.core.hardware import UnknownGPUError, get_gpu

    try:
        gpu = get_gpu(a.gpu).key
    except UnknownGPUError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_WRONG_DEVICE
    reason = _local_check(gpu)
    if reason:
        names = _nvml_names()
        print(f"error: cannot calibrate {gpu!r} on this machine: {reason}. "
              f"NVML sees: {', '.join(names) if names else 'no NVIDIA GPU'}. Run it on a node with that GPU "
              "(or `--gpu cpu` to calibrate this processor). Nothing was written.", file=sys.stderr)
        return EXIT_WRONG_DEVICE
    from emulator.core.settings import warehouse_root

    try:
        with partition_lock(warehouse_root(), gpu):
            result = calibrate(gpu, budget_s=a.budget_s, traces=a.traces, collective_budget_s=a.collective_budget_s,
                               skip_predictors=a.skip_predictors, in_training_budget_s=a.in_training_budget_s)
    except PartitionBusy as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BUSY
    except KeyboardInterrupt:
        return _interrupted(gpu)
    _report(result, gpu)
    if _was_interrupted(result):  # Dagster turns Ctrl-C inside a step into that step's failure
        return _interrupted(gpu)
    return 0 if result.success else 1


def _was_interrupted(result) -> bool:
    return any(ev.event_type_value == "STEP_FAILURE"
               and "DagsterExecutionInterruptedError" in (ev.event_specific_data.error.cls_name or "")
               for ev in result.all_events)


def _interrupted(gpu: str) -> int:
    print(f"interrupted: the chunks measured so far are in the warehouse; calibrating {gpu!r} again resumes "
          "this run", file=sys.stderr)
    return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
