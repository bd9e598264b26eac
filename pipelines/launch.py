"""Run ids and runner subprocesses: the glue between Dagster assets and the benchmark runners.

Why subprocesses: a kernel that segfaults or a NCCL hang must not take the orchestrator down, and
the same runner must work on a bare GPU node without Dagster. Why a pending run id: a calibration
killed half-way (node pre-empted, Ctrl-C) should resume, not start over. The id of an unfinished
calibration is kept in `<warehouse>/runs/gpu=<gpu>/pending.json` until the chain's `warehouse`
step finishes; until then every benchmark asset reuses it, and the runners skip chunks already
in the warehouse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from pipelines.runners import common

MAX_CRASH_RETRIES = 3


class RunnerError(RuntimeError):
    """A runner subprocess failed; the message carries its output tail."""


def pending_path(root: Path, gpu: str) -> Path:
    return Path(root) / "runs" / f"gpu={gpu}" / "pending.json"


def pending_run_id(root: Path, gpu: str) -> str | None:
    """The id of this GPU's unfinished calibration, if there is one."""
    try:
        return json.loads(pending_path(root, gpu).read_text())["run_id"]
    except (OSError, ValueError, KeyError):
        return None  # none, or a damaged marker: a new run starts rather than a guess


def current_run_id(root: Path, gpu: str, requested: str = "") -> tuple[str, bool]:
    """(run id, resumed): the requested id, else the unfinished calibration's, else a new one."""
    if requested:
        return requested, False
    pending = pending_run_id(root, gpu)
    if pending:
        return pending, True
    p = pending_path(root, gpu)
    run_id = f"{gpu}-{common.now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    common.write_json_atomic(p, {"run_id": run_id, "started_at": common.now().isoformat()})
    return run_id, False


def finish_run(root: Path, gpu: str, run_id: str) -> None:
    """The chain completed for `run_id`: the next calibration starts a new run."""
    p = pending_path(root, gpu)
    try:
        if json.loads(p.read_text()).get("run_id") == run_id:
            p.unlink()
    except (OSError, ValueError):
        pass


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


def run_runner(module: str, args: list[str], *, timeout_s: float, log=print, context=None) -> dict:
    """Run `python -m pipelines.runners.<module> ...` and return its summary JSON.

    The kernel runner writes `inflight.json` before each signature; when the process dies from a
    signal (a crashing kernel) that signature is passed back as `--poison` (recorded as failed)
    and the runner restarts, at most MAX_CRASH_RETRIES times. With a Dagster `context` the runner
    runs inside a Dagster Pipes session: its progress lines reach the run's log while it works
    (`pipelines.runners.pipes`), its numeric progress the asset's custom messages.
    """
    poison: list[str] = []
    for _attempt in range(MAX_CRASH_RETRIES + 1):
        summary_file = Path(os.environ.get("TMPDIR", "/tmp")) / f"maya-{module}-{uuid.uuid4().hex[:8]}.json"
        cmd = [sys.executable, "-m", f"pipelines.runners.{module}", *args, "--summary", str(summary_file)]
        if poison:
            cmd += ["--poison", *poison]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_repo_root()),
                                                                          os.environ.get("PYTHONPATH")]))}
        try:
            proc = _run(cmd, env, timeout_s, context)
        except subprocess.TimeoutExpired as e:
            raise RunnerError(f"{module} runner exceeded {timeout_s:.0f}s; finished chunks are kept, "
                              "rerun to resume") from e
        for line in (proc.stderr or "").splitlines()[-5:]:
            log(line)
        if proc.returncode == 0 and summary_file.exists():
            out = json.loads(summary_file.read_text())
            summary_file.unlink(missing_ok=True)
            if poison:
                out["crashed_signatures"] = poison
            return out
        summary_file.unlink(missing_ok=True)
        tail = ((proc.stdout or "") + (proc.stderr or ""))[-3000:]
        inflight = _inflight(args)
        if proc.returncode < 0 and inflight and inflight.get("signature") not in poison:
            log(f"{module} runner died (signal {-proc.returncode}) on {inflight.get('op')}; "
                "recording it as failed and resuming")
            poison.append(inflight["signature"])
            continue
        raise RunnerError(f"{module} runner failed (exit {proc.returncode}):\n{tail}")
    raise RunnerError(f"{module} runner kept crashing; gave up after {MAX_CRASH_RETRIES} retries")


def _run(cmd: list[str], env: dict, timeout_s: float, context) -> subprocess.CompletedProcess:
    """The runner process, inside a Pipes session when there is a Dagster context (temp-file channels: the
    message reader streams what the runner writes while it runs)."""
    if context is None:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    import dagster as dg

    with dg.open_pipes_session(context=context, context_injector=dg.PipesTempFileContextInjector(),
                               message_reader=dg.PipesTempFileMessageReader()) as session:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env={**env, **session.get_bootstrap_env_vars()})
    return proc


def _inflight(args: list[str]) -> dict | None:
    try:
        gpu = args[args.index("--gpu") + 1]
        run_id = args[args.index("--run-id") + 1]
        root = args[args.index("--root") + 1]
    except (ValueError, IndexError):
        return None
    p = common.run_dir(Path(root), gpu, run_id) / "inflight.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None
