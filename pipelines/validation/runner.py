"""Run validation cases through maya's own command line and collect what it predicts.

Every case runs as child processes of the `maya` CLI (`python -m emulator.cli ...`), exactly as a
user would run it, so a crash, hang or OOM in one case is recorded in its row and the rest of the
validation goes on. Each case has its own folder under `<warehouse>/validation/runs/<name>/`
holding `case.json`, the emulation/profile output and the CLI log; a finished case whose
`case.json` matches is reused unless `fresh=True` (validation runs are long; a rerun of the report
should not redo them).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from emulator.trace.io import read_json, read_summary, read_traces, write_json
from emulator.trace.summaries import EmulationSummary
from pipelines.runners.in_training import profiled_steady_iterations
from pipelines.validation.baselines import BaselineUnavailable, serial_roofline_s, steady_iterations
from pipelines.validation.budget import measured_by_family, measured_by_phase

REPO_ROOT = Path(__file__).resolve().parents[2]
MAYA = [sys.executable, "-m", "emulator.cli"]
# Optimizer steps a GPU case emulates; the first is warm-up, the rest the steady state. Why 4: with 2 there
# is one steady iteration, so its host gaps are one sample of this machine's moment-to-moment speed (the
# same-position median over repeated iterations needs two or more, `emulator.hosttime.clip`); with 3 steady
# iterations the median applies, at no extra wall time (the emulation's start-up dominates).
GPU_ITERATIONS = 4
# Optimizer steps a CPU case's plain timing run measures. Why 10 and not the emulation's 4: on a shared machine
# the steady steps of one run spread by tens of percent with no trend after the first, so the median of 3
# steady iterations was itself a noisy sample; 9 narrow it by about sqrt(3).
CPU_MEASURED_ITERATIONS = 10


@dataclass
class RunResult:
    """What one case produced: maya's prediction (or why there is none) and the roofline baseline."""

    predicted_s: float | None = None
    roofline_s: float | None = None
    roofline_method: str = ""
    roofline_sim_s: float | None = None  # maya's simulator with analytical durations (host gaps included)
    breakdown: dict = field(default_factory=dict)  # prediction.json breakdown_s (compute, host, ...)
    bound_by: str | None = None  # prediction.json bound_by: what sets the step
    band_s: list | None = None  # prediction.json iteration_time_band_s: a host-bound step's host-speed range
    load_avg: float | None = None  # CPU cases: 1-minute load average right after the measurement
    measured_s: float | None = None  # CPU cases: measured here with `maya profile` (median of every timing run)
    # CPU cases: each timing run's steady iterations, the run before the emulation and calibration, then the
    # one after the prediction; their medians' difference is this machine's drift over the case
    timing_runs_s: list = field(default_factory=list)
    oom: bool = False
    coverage: dict = field(default_factory=dict)  # estimator coverage {learned, fallback}
    estimator: dict = field(default_factory=dict)
    device_time_by_family: dict = field(default_factory=dict)  # prediction.json: predicted time by op family
    measured_by_family: dict = field(default_factory=dict)  # CPU cases: measured time by op family (full profile)
    device_time_by_phase: dict = field(default_factory=dict)  # prediction.json: predicted time by phase of the step
    measured_by_phase: dict = field(default_factory=dict)  # measured time by phase, where the case splits its step
    emulation_wall_s: float | None = None
    wall_s: float = 0.0
    error: str | None = None
    out: str = ""

    @property
    def measured_runs_s(self) -> list[float]:
        """Each timing run's median (CPU cases)."""
        return [statistics.median(run) for run in self.timing_runs_s]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _run(cmd: list[str], log: Path, timeout_s: float) -> int:
    """Run a CLI command with its output appended to `log`; returns the exit code (124 on timeout)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the CLI and the rank workers it started, nothing else
            proc.wait()
            f.write(f"\n[validation] timed out after {timeout_s:.0f}s\n")
            return 124


def _tail(log: Path, n: int = 15) -> str:
    try:
        return "".join(log.read_text(errors="replace").splitlines(keepends=True)[-n:]).strip()
    except OSError:
        return ""


def _prediction(out: Path) -> dict:
    path = out / "prediction.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} was not written")
    return read_json(path)


def _fill_from_prediction(res: RunResult, out: Path) -> None:
    pred = _prediction(out)
    res.predicted_s = pred.get("iteration_time_s")
    res.oom = bool(pred.get("oom", False))
    res.estimator = pred.get("estimator") or {}
    res.coverage = res.estimator.get("coverage") or {}
    res.emulation_wall_s = pred.get("emulation_wall_s")
    res.breakdown = pred.get("breakdown_s") or {}
    res.bound_by = pred.get("bound_by")
    res.band_s = pred.get("iteration_time_band_s")
    res.device_time_by_family = pred.get("device_time_by_family") or {}
    res.device_time_by_phase = pred.get("device_time_by_phase") or {}
    if pred.get("hang"):
        res.error = f"maya simulate reports that the job would hang: {json.dumps(pred['hang'])[:600]}"
    elif res.predicted_s is None and not res.oom:
        res.error = "maya simulate wrote no iteration time"


def _cached(folder: Path, spec: dict, name: str = "result.json") -> RunResult | None:
    """The stored result `name` of a run of exactly `spec` that finished without error, else None."""
    try:
        if read_json(folder / "case.json") == spec:
            res = RunResult(**read_json(folder / name))
            return res if res.error is None else None
    except (OSError, ValueError, TypeError):
        return None
    return None


def _prepare(folder: Path, spec: dict, fresh: bool, keep: bool = False) -> RunResult | None:
    """The cached result of a finished, error-free run of `spec`; else a clean folder (kept if `keep`)."""
    cached = None if fresh else _cached(folder, spec)
    if cached is not None and cached.error is None:
        return cached
    if keep:
        return None
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    write_json(folder / "case.json", spec)
    return None


def _roofline(res: RunResult, out: Path, gpu: str | None, nproc_per_node: int) -> None:
    """Roofline baselines of the same trace: the serial sum (the table's column) and, for the JSON, maya's
    simulator run on analytical durations only (it includes the trace's host gaps, so it shares the
    simulator's host model and is not an independent baseline)."""
    try:
        res.roofline_s = serial_roofline_s(out, gpu, nproc_per_node)
        res.roofline_method = "serial"
    except (BaselineUnavailable, FileNotFoundError, KeyError, ValueError) as e:
        res.error = res.error or f"roofline baseline: {e}"
    try:
        from emulator.pipeline import predict_from_trace

        pred = predict_from_trace(out, gpu=gpu, roofline_only=True, timeline=False, write=False)
        res.roofline_sim_s = pred.iteration_time_s
    except Exception:  # noqa: BLE001 - optional extra figure; the serial roofline is the baseline
        res.roofline_sim_s = None


def _emulation_done(folder: Path, spec: dict, out: Path) -> bool:
    """True when `out` holds a finished emulation (ok or OOM) of exactly this case."""
    try:
        same = read_json(folder / "case.json") == spec
    except (OSError, ValueError):
        return False
    summary = _summary_or_none(out)
    return same and summary is not None and bool(summary.ok or summary.oom)


def run_gpu_case(case, runs_dir: Path, iterations: int = GPU_ITERATIONS, timeout_s: float = 900, fresh: bool = False,
                 resimulate: bool = False) -> RunResult:
    """`maya emulate` the validation program for the case's cluster, then `maya simulate` it.

    A finished emulation of the same case is reused (its result too, unless `resimulate`: new
    predictors only need the cheap simulate step); `fresh` redoes everything.
    """
    folder = runs_dir / case.name
    spec = {"kind": "gpu", "case": case.to_dict(), "iterations": iterations}
    out, log = folder / "out", folder / "maya.log"
    reuse = not fresh and _emulation_done(folder, spec, out)
    if not (reuse and resimulate):
        cached = _prepare(folder, spec, fresh, keep=reuse)
        if cached is not None:
            return cached
    res, t0 = RunResult(out=str(out)), time.perf_counter()
    program = [str(REPO_ROOT / case.program), *case.args, "--steps", str(iterations + 1)]
    rc = 0
    if not reuse:
        rc = _run([*MAYA, "emulate", "--gpu", case.gpu, "--nproc-per-node", str(case.nproc_per_node),
                   "--nnodes", str(case.nnodes), "--iterations", str(iterations), "--out", str(out),
                   *program], log, timeout_s)
    summary = _summary_or_none(out)
    if rc != 0 and not (summary is not None and summary.oom):
        res.error = f"maya emulate exited {rc}: {_tail(log)}"
    else:
        rc = _run([*MAYA, "simulate", str(out), "--no-timeline"], log, timeout_s)
        try:
            _fill_from_prediction(res, out)
        except (FileNotFoundError, ValueError) as e:
            res.error = f"maya simulate exited {rc}: {e}: {_tail(log)}"
        if summary is not None:
            _roofline(res, out, case.gpu, case.nproc_per_node)
    res.wall_s = time.perf_counter() - t0
    write_json(folder / "result.json", res.to_dict())
    return res




def _summary_or_none(out: Path) -> EmulationSummary | None:
    try:
        return read_summary(out)
    except (FileNotFoundError, ValueError):
        return None


# ----------------------------------------------------------------------------- CPU: measured here
def measured_iteration_s(out: Path) -> float:
    """Iteration time of a `maya profile` run: the median of its steady iterations (`measured_iterations`)."""
    return statistics.median(measured_iterations(out))


def measured_iterations(out: Path) -> list[float]:
    """The steady iterations of a `maya profile` run, each the slowest rank's (it sets the pace): from the
    summary's measured iterations when present (per rank, wall time between optimizer steps), else from
    the trace (host gaps + measured op durations, which on the synchronous CPU device add up to the wall
    time). The first iteration (warm-up, set-up) is left out."""
    summary = read_summary(out)
    per_rank = summary.measured_iterations_s  # {rank: [seconds per iteration]}, `--timing-only`
    if per_rank:
        slowest = [max(v) for v in zip(*per_rank.values(), strict=False)]
        if slowest:
            return steady_iterations_values(slowest)
    per_iteration: dict[int, float] = {}
    for table in read_traces(out).values():
        df = table.select(["iteration", "host_gap_s", "duration_s"]).to_pandas().fillna(0.0)
        for it, t in (df["host_gap_s"] + df["duration_s"]).groupby(df["iteration"]).sum().items():
            per_iteration[int(it)] = max(per_iteration.get(int(it), 0.0), float(t))
    if not per_iteration:
        raise ValueError(f"{out}: the profile recorded no iterations")
    return [per_iteration[i] for i in steady_iterations(list(per_iteration), summary.iterations_found)]


def steady_iterations_values(values: list[float]) -> list[float]:
    return values[1:] if len(values) > 1 else values


def _time_cpu_case(case, folder: Path, name: str, log: Path, timeout_s: float) -> tuple[int, Path]:
    """One plain timing run of a CPU case (`maya profile --timing-only`, CPU_MEASURED_ITERATIONS steps)."""
    program = [str(REPO_ROOT / case.program), *case.args, "--steps", str(CPU_MEASURED_ITERATIONS + 1)]
    rc = _run([*MAYA, "profile", "--timing-only", "--nproc-per-node", str(case.world_size), "--iterations",
               str(CPU_MEASURED_ITERATIONS), "--out", str(folder / name), *program], log, timeout_s)
    return rc, folder / name


def _add_timing_run(res: RunResult, out: Path) -> None:
    """Pool a timing run's steady iterations into the case's measurement (raises when it has none)."""
    res.timing_runs_s = [*res.timing_runs_s, measured_iterations(out)]
    res.measured_s = statistics.median(it for run in res.timing_runs_s for it in run)


def cpu_trace_dir(case, runs_dir: Path) -> Path:
    """Where a CPU case's emulation goes (also what trace-driven CPU calibration benchmarks)."""
    return runs_dir / case.name / "emulate"


def measure_cpu_case(case, runs_dir: Path, iterations: int = 4, timeout_s: float = 900,
                     fresh: bool = False) -> RunResult:
    """Step 1 of a CPU case: run it for real (`maya profile --timing-only`) and emulate it on the `cpu` target.

    The measurement records nothing but iteration boundaries: a full `maya profile` records and
    times every op, which costs more than a small model's own host time and would inflate the
    "measured" side. It is the first of two timing runs; `predict_cpu_case` makes the second.

    Between this and `predict_cpu_case` the validation calibrates the CPU predictors on the shapes
    the emulated traces contain (trace-driven calibration, `pipelines.calibrate --traces`).
    """
    folder = runs_dir / case.name
    spec = {"kind": "cpu", "case": case.to_dict(), "iterations": iterations,
            "measured_iterations": CPU_MEASURED_ITERATIONS}
    if not fresh and _cached(folder, spec, "measured.json") is not None:
        return _cached(folder, spec, "measured.json")
    _prepare(folder, spec, fresh=True)
    log, out = folder / "maya.log", cpu_trace_dir(case, runs_dir)
    res, t0 = RunResult(out=str(out)), time.perf_counter()
    program = [str(REPO_ROOT / case.program), *case.args, "--steps", str(iterations + 1)]
    nproc = ["--nproc-per-node", str(case.world_size)]
    rc, timed = _time_cpu_case(case, folder, "profile", log, timeout_s)
    try:
        _add_timing_run(res, timed)
    except (FileNotFoundError, ValueError, KeyError) as e:
        res.error = f"maya profile exited {rc}: {e}: {_tail(log)}"
    res.load_avg = load_average()
    # per-op ground truth for the error budget: a full profile times every op (too slow for the step time)
    ops = folder / "profile-ops"
    _run([*MAYA, "profile", *nproc, "--iterations", str(iterations), "--out", str(ops), *program], log, timeout_s)
    try:
        traces = read_traces(ops)
        steady = profiled_steady_iterations({i for t in traces.values() for i in t.column("iteration").to_pylist()})
        res.measured_by_family = measured_by_family(traces, steady)
        res.measured_by_phase = measured_by_phase(traces, steady)
    except (FileNotFoundError, ValueError, KeyError) as e:
        res.error = res.error or f"maya profile (per-op) exited: {e}: {_tail(log)}"
    rc = _run([*MAYA, "emulate", "--gpu", "cpu", *nproc, "--iterations", str(iterations), "--out", str(out),
               *program], log, timeout_s)
    if _summary_or_none(out) is None:
        res.error = res.error or f"maya emulate --gpu cpu exited {rc}: {_tail(log)}"
    res.wall_s = time.perf_counter() - t0
    write_json(folder / "measured.json", res.to_dict())
    return res


def stored_result(case, runs_dir: Path) -> RunResult | None:
    """The stored result of a case's last run (with or without error), None if it never finished."""
    try:
        return RunResult(**read_json(runs_dir / case.name / "result.json"))
    except (OSError, ValueError, TypeError):
        return None


def cpu_result_done(case, runs_dir: Path) -> bool:
    """True when the CPU case has a finished, error-free prediction stored."""
    try:
        return RunResult(**read_json(runs_dir / case.name / "result.json")).error is None
    except (OSError, ValueError, TypeError):
        return False


def predict_cpu_case(case, runs_dir: Path, timeout_s: float = 900, resimulate: bool = False) -> RunResult:
    """Step 2 of a CPU case: a second timing run, then `maya simulate` its emulated trace with the CPU predictors.

    Why two timing runs: this machine's speed drifts by 10-20% over minutes, and the calibration the
    prediction rests on runs between the first timing run and this step. The measured time is the median of
    both runs' steady iterations (the first run alone was before the calibration, minutes earlier for the
    first cases); each run's median is kept (`measured_runs_s`) so the report shows the drift beside the
    error."""
    folder = runs_dir / case.name
    if not resimulate and (folder / "result.json").exists():
        cached = RunResult(**read_json(folder / "result.json"))
        if cached.error is None:
            return cached
    res = RunResult(**read_json(folder / "measured.json"))
    out, log, t0 = cpu_trace_dir(case, runs_dir), folder / "maya.log", time.perf_counter()
    if res.error is None and len(res.timing_runs_s) == 1:
        # the second timing run, after the calibration the prediction uses: the measurement brackets it
        rc, timed = _time_cpu_case(case, folder, "profile-after", log, timeout_s)
        try:
            _add_timing_run(res, timed)
        except (FileNotFoundError, ValueError, KeyError) as e:
            res.error = f"maya profile (second timing run) exited {rc}: {e}: {_tail(log)}"
        write_json(folder / "measured.json", res.to_dict())
    if _summary_or_none(out) is not None:
        rc = _run([*MAYA, "simulate", str(out), "--no-timeline"], log, timeout_s)
        try:
            _fill_from_prediction(res, out)
        except (FileNotFoundError, ValueError) as e:
            res.error = res.error or f"maya simulate exited {rc}: {e}: {_tail(log)}"
        _roofline(res, out, "cpu", case.world_size)
    res.wall_s += time.perf_counter() - t0
    write_json(folder / "result.json", res.to_dict())
    return res


def calibrate_cpu(trace_dirs: list[Path], runs_dir: Path, timeout_s: float = 3600) -> str | None:
    """Calibrate the CPU predictors on this machine, benchmarking the traces' shapes first.

    Runs `python -m pipelines.calibrate --gpu cpu --traces ...` (resumable: measured chunks are
    kept); returns a problem note or None.
    """
    traces = [str(t) for t in trace_dirs if _summary_or_none(Path(t)) is not None]
    cmd = [sys.executable, "-m", "pipelines.calibrate", "--gpu", "cpu", *(["--traces", *traces] if traces else [])]
    log = runs_dir / "calibrate-cpu.log"
    rc = _run(cmd, log, timeout_s)
    if rc != 0:
        return f"CPU calibration (`{' '.join(cmd[1:5])} ...`) exited {rc}: {_tail(log, 5)}"
    return None


def load_average() -> float | None:
    """1-minute load average, stated beside CPU measurements (other work on the box adds noise)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


# ----------------------------------------------------------------------------- predictors
def ensure_predictors(gpu: str, runs_dir: Path, timeout_s: float = 3600) -> str | None:
    """Make sure the registry has champion predictors for `gpu`; returns a problem note or None.

    GPU parts get the default predictors trained from the reference measurements
    (`python -m maya_models.bootstrap`); the local CPU gets the calibration chain
    (`python -m pipelines.calibrate --gpu cpu`), which measures this machine. Both are no-ops when
    champions exist, and run as child processes so their logs land next to the runs.
    """
    try:
        from maya_models.registry import champion_version

        if all(champion_version(kind, gpu) is not None for kind in ("kernels", "collectives")):
            return None
    except Exception as e:  # noqa: BLE001 - a broken registry is reported, the commands below say more
        note = f"registry check for {gpu} failed: {type(e).__name__}: {e}"
    else:
        note = None
    cmd = ([sys.executable, "-m", "pipelines.calibrate", "--gpu", "cpu"] if gpu == "cpu"
           else [sys.executable, "-m", "maya_models.bootstrap", "--gpu", gpu])
    log = runs_dir / f"predictors-{gpu}.log"
    rc = _run(cmd, log, timeout_s)
    if rc != 0:
        return f"could not get predictors for {gpu} (`{' '.join(cmd[1:])}` exited {rc}): {_tail(log, 5)}"
    return note
