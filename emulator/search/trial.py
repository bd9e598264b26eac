"""One trial: `maya predict` of one configuration, and the keys its result is cached under.

A trial runs what `maya predict` runs (`emulator.launch.emulate.run_emulation`, then
`emulator.pipeline.predict_from_trace`), in the calling process, on the cores it is given (host
gaps are CPU time: two trials on one core would inflate each other's). Two keys:

- the **emulation key**: program hash (the script and the Python files beside it), module,
  arguments, environment, GPU part, layout, emulated iterations. The trace is kept under
  `<warehouse>/search/emulations/<key>/`, so new predictors or another price only re-simulate it;
- the **trial key**: the emulation key plus the cluster settings, tokens per iteration and the
  predictor versions (or "roofline"). A trial with a known key is read back, never re-run.

Every outcome is a result, never an exception: `ok`, `oom` (the reason from the allocator),
`hang` (the first mismatched collective), `crash` (the program failed, or maya did: the
traceback is kept under `<warehouse>/search/tracebacks/` and its path recorded).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from emulator.launch.job import BadJob
from emulator.search.space import Plan
from emulator.trace.schema import TRACE_SCHEMA_VERSION

STATUSES = ("ok", "oom", "hang", "crash")
# bump when a change of maya invalidates stored emulations. 2: compiled calls' mode swaps left the host gaps
# (emulator.capture.compile.only_these_modes), so traces of torch.compile'd programs (megatron-core) changed;
# 3: every gap is charged the module calls made in it (Recorder.module_call_cost)
EMULATION_CACHE_VERSION = 3


@dataclass(frozen=True)
class Program:
    """The user's program as `maya search` was given it; `hash` covers its source (see program_hash)."""

    script: str | None
    module: str | None
    argv: tuple[str, ...]
    hash: str

    @classmethod
    def of(cls, script: str | None, module: str | None, argv) -> Program:
        script = str(Path(script).resolve()) if script else None
        return cls(script=script, module=module, argv=tuple(argv or ()), hash=program_hash(script, module))

    def to_json(self) -> dict:
        return dict(script=self.script, module=self.module, argv=list(self.argv), hash=self.hash)


def program_hash(script: str | None, module: str | None) -> str:
    """sha256 over the script and every .py file in its folder (what it imports from beside it: the
    examples' model.py and common.py); for `-m`, over the module's package folder. A change to any
    of them is a different program."""
    h = hashlib.sha256()
    if script:
        root = Path(script).resolve()
        files = [root, *sorted(p for p in root.parent.glob("*.py") if p != root)]
    else:
        import importlib.util

        spec = importlib.util.find_spec(module.split(".")[0]) if module else None
        origin = Path(spec.origin) if spec and spec.origin else None
        files = sorted(origin.parent.rglob("*.py")) if origin and origin.name == "__init__.py" else \
            ([origin] if origin else [])
        h.update((module or "").encode())
    for f in files:
        try:
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        except OSError:
            continue
    return h.hexdigest()[:20]


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:24]


@dataclass
class TrialSpec:
    program: Program
    plan: Plan
    roofline_only: bool = False

    @property
    def argv(self) -> list[str]:
        return [*self.program.argv, *self.plan.argv]

    def emulation_key(self) -> str:
        p = self.plan
        return _digest(dict(v=EMULATION_CACHE_VERSION, schema=TRACE_SCHEMA_VERSION, program=self.program.hash,
                            script=Path(self.program.script).name if self.program.script else None,
                            module=self.program.module, argv=self.argv, env=p.env, gpu=p.gpu, nnodes=p.nnodes,
                            nproc_per_node=p.nproc_per_node, iterations=p.iterations))

    def trial_key(self, predictors: dict) -> str:
        p = self.plan
        return _digest(dict(emulation=self.emulation_key(), cluster=p.cluster, tokens=p.tokens_per_iteration,
                            predictors=predictors, roofline_only=self.roofline_only))

    def command(self, cluster_file: str | None = None) -> str:
        """The `maya predict` command line that gives this trial's answer."""
        p = self.plan
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(p.env.items()))
        cmd = ["maya", "predict", "--gpu", p.gpu, "--nproc-per-node", str(p.nproc_per_node), "--nnodes",
               str(p.nnodes), "--iterations", str(p.iterations)]
        if cluster_file:
            cmd += ["--cluster", cluster_file]
        if p.tokens_per_iteration is not None:
            cmd += ["--tokens-per-iteration", f"{p.tokens_per_iteration:g}"]
        if self.roofline_only:
            cmd.append("--roofline-only")
        cmd += [self.program.script] if self.program.script else ["-m", self.program.module]
        cmd += self.argv
        return (env + " " if env else "") + shlex.join(cmd)

    def to_json(self) -> dict:
        return dict(program=self.program.to_json(), plan=self.plan.to_json(), roofline_only=self.roofline_only)

    @classmethod
    def from_json(cls, d: dict) -> TrialSpec:
        pr = d["program"]
        program = Program(script=pr["script"], module=pr["module"], argv=tuple(pr["argv"]), hash=pr["hash"])
        return cls(program=program, plan=Plan(**d["plan"]), roofline_only=bool(d.get("roofline_only")))


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    """The trial's environment variables for the ranks it launches (they inherit the launcher's)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _emulation_reusable(out: Path) -> bool:
    from emulator.trace.io import read_summary

    try:
        s = read_summary(out)
    except (FileNotFoundError, ValueError):
        return False
    return not s.interrupted and (s.ok or s.oom)


@contextlib.contextmanager
def _pinned(cores: list[int] | None):
    """This process on `cores` for the block, and back on the CPUs it had after it: a Ray worker that
    runs the next trial must see the node's cores again (`cores.usable_cores`), not the last slot's."""
    before = None
    if cores:
        with contextlib.suppress(AttributeError, OSError):
            before = os.sched_getaffinity(0)
            os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        if before is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, before)


def run_trial(spec: TrialSpec, predictors: dict, root: Path, cores: list[int] | None = None) -> dict:
    """Run one trial (reusing a stored emulation of the same key) and return its result row.

    `root` is `<warehouse>/search`; `cores` the CPUs this trial may use (it pins itself to them for the
    trial and emulates that many ranks at once)."""
    with _pinned(cores):
        return _run_trial(spec, predictors, root, cores)


def _run_trial(spec: TrialSpec, predictors: dict, root: Path, cores: list[int] | None) -> dict:
    from emulator.launch.emulate import run_emulation

    t0 = time.perf_counter()
    key = spec.trial_key(predictors)
    emu_key = spec.emulation_key()
    out = root / "emulations" / emu_key
    row = base_row(spec, key, predictors)
    row["command"] = spec.command(cluster_file(root, spec.plan.cluster))
    log = root / "logs" / f"{key}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    p = spec.plan
    try:
        with open(log, "a") as f:
            console = Console(file=f, width=140, force_terminal=False)
            reused = _emulation_reusable(out)
            row["emulation_reused"] = reused
            if not reused:
                with _environment(p.env):
                    summary = run_emulation(script=spec.program.script, module=spec.program.module, argv=spec.argv,
                                            gpu=p.gpu, nproc_per_node=p.nproc_per_node, nnodes=p.nnodes,
                                            iterations=p.iterations, out=out, jobs=len(cores) if cores else None,
                                            console=console)
                if summary.interrupted:
                    raise KeyboardInterrupt
                if not summary.ok and not summary.oom:
                    return _crash(row, root, key, summary.error or "the program failed", out, summary.failed_rank,
                                  t0)
            _simulate(row, spec, out, root, console)
    except KeyboardInterrupt:
        raise
    except BadJob as e:  # the configuration cannot start (a missing script): its reason, not a traceback
        return _crash(row, root, key, str(e), out, None, t0)
    except Exception:  # noqa: BLE001 - a crashing trial is a result; the search goes on
        return _crash(row, root, key, traceback.format_exc(), out, None, t0)
    row["trial_wall_s"] = time.perf_counter() - t0
    return row


_LOADED: dict[tuple[str, str], tuple] = {}


def _predictors(spec, source: str):
    """`load_predictors`, once per process for each part (with its link overrides) and source: loading an
    MLflow model takes seconds, and a search predicts the same part hundreds of times."""
    from emulator.estimate import load_predictors

    key = (repr(spec), source)
    if key not in _LOADED:
        _LOADED[key] = load_predictors(spec, source)
    return _LOADED[key]


def _simulate(row: dict, spec: TrialSpec, out: Path, root: Path, console: Console) -> None:
    from emulator.pipeline import predict_from_trace

    p = spec.plan
    cfile = cluster_file(root, p.cluster)
    pred = predict_from_trace(out, gpu=p.gpu, nnodes=p.nnodes, nproc_per_node=p.nproc_per_node,
                              cluster=Path(cfile) if cfile else None, tokens_per_iteration=p.tokens_per_iteration,
                              timeline=False, roofline_only=spec.roofline_only, predictors=_predictors)
    per_rank = [int(x) for x in pred.peak_memory_bytes_per_rank if x is not None]
    row.update(iteration_time_s=pred.iteration_time_s, tokens_per_iteration=pred.tokens_per_iteration,
               tokens_per_s=pred.tokens_per_s, mfu=pred.mfu, peak_memory_bytes=pred.peak_memory_bytes,
               peak_memory_bytes_per_rank=json.dumps(per_rank), memory_capacity_bytes=pred.memory_capacity_bytes,
               cost_per_iteration_usd=pred.cost_per_iteration_usd,
               cost_per_million_tokens_usd=pred.cost_per_million_tokens_usd,
               price_per_gpu_hour=pred.price_per_gpu_hour, emulation_wall_s=pred.emulation_wall_s,
               simulation_wall_s=pred.simulation_wall_s, estimator=json.dumps(pred.estimator.get("coverage") or {}),
               bound_by=pred.bound_by)
    row["iteration_time_low_s"], row["iteration_time_high_s"] = pred.iteration_time_band_s or (None, None)
    if pred.oom:
        row.update(status="oom", reason=pred.oom_reason or "out of memory")
    elif pred.hang:
        issues = pred.hang.get("issues") or [{}]
        row.update(status="hang", reason=str(issues[0].get("message") or pred.hang)[:500])
    elif pred.iteration_time_s is None:
        row.update(status="crash", reason="the simulation gave no iteration time")
    else:
        row.update(status="ok", reason=None)
    console.print(f"trial {row['key']}: {row['status']} {pred.iteration_time_s}")


def _crash(row: dict, root: Path, key: str, text: str, out: Path, failed_rank: int | None, t0: float) -> dict:
    from emulator.core.files import atomic_write_bytes

    path = root / "tracebacks" / f"{key}.txt"
    extra = ""
    if failed_rank is not None:  # the program's own traceback (or argparse's usage) is in its rank's log
        rank_log = out / "logs" / f"rank={failed_rank}.log"
        try:
            tail = "".join(rank_log.read_text(errors="replace").splitlines(keepends=True)[-60:])
        except OSError:
            tail = ""
        extra = f"\n--- the last lines of {rank_log} ---\n{tail}"
    atomic_write_bytes(path, (text + extra).encode())
    last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or ["crash"]
    row.update(status="crash", reason=last[0][:500], traceback_path=str(path), trial_wall_s=time.perf_counter() - t0)
    return row


def base_row(spec: TrialSpec, key: str, predictors: dict) -> dict:
    p = spec.plan
    return dict(key=key, emulation_key=spec.emulation_key(), program=spec.program.script or f"-m {spec.program.module}",
                program_hash=spec.program.hash, argv=json.dumps(spec.argv), env=json.dumps(p.env), gpu=p.gpu,
                nnodes=p.nnodes, nproc_per_node=p.nproc_per_node, world_size=p.world_size,
                cluster=json.dumps(p.cluster, sort_keys=True), predictors=json.dumps(predictors, sort_keys=True),
                roofline_only=spec.roofline_only, status=None, reason=None, traceback_path=None,
                iteration_time_s=None, tokens_per_iteration=None, tokens_per_s=None, mfu=None, peak_memory_bytes=None,
                peak_memory_bytes_per_rank=None, memory_capacity_bytes=None, cost_per_iteration_usd=None,
                cost_per_million_tokens_usd=None, price_per_gpu_hour=None, command=None, emulation_reused=False,
                emulation_wall_s=None, simulation_wall_s=None, trial_wall_s=None, estimator=None, bound_by=None,
                iteration_time_low_s=None, iteration_time_high_s=None)


def cluster_file(root: Path, settings: dict) -> str | None:
    """A cluster file holding the trial's cluster settings (content-addressed, so commands can cite it)."""
    if not settings:
        return None
    from emulator.core.files import atomic_write_bytes

    text = json.dumps(settings, sort_keys=True, indent=1)
    path = root / "clusters" / f"{_digest(settings)}.json"
    if not path.exists():
        atomic_write_bytes(path, text.encode())
    return str(path)
