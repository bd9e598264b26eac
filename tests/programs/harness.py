"""Run `python -m emulator.launch.worker` on a test program and read back what it wrote.

A single rank is forked from a fork server kept for the session, one per GPU target (as `maya
emulate` forks its ranks); the cpu target and profiles start `python -m emulator.launch.worker`,
as the launcher does, and so does everything with MAYA_FORKSERVER=0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from emulator.launch.job import WORKER
from emulator.trace.io import read_rank_trace

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent


@dataclass
class WorkerRun:
    rc: int
    stdout: str
    stderr: str
    summary: dict
    trace: object  # pandas DataFrame

    def printed(self) -> dict[str, str]:
        """`key=value` lines the program printed."""
        out = {}
        for line in self.stdout.splitlines():
            if "=" in line and " " not in line.split("=", 1)[0]:
                k, v = line.split("=", 1)
                out[k] = v
        return out


def _cmd(program: str, out: Path, rank: int, world: int, gpu: str, extra: list[str], args: list[str]) -> list[str]:
    return [*WORKER, "--gpu", gpu, "--rank", str(rank),
            "--world-size", str(world), "--out", str(out), *extra, "--script", str(PROGRAMS / program), "--", *args]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env["MAYA_EXCHANGE_TIMEOUT_S"] = "60"
    return env


def read(out: Path, rank: int, proc) -> WorkerRun:
    summary = json.loads((out / "ranks" / f"rank={rank}.json").read_text())
    trace = read_rank_trace(out, rank).to_pandas()
    return WorkerRun(proc.returncode, proc.stdout, proc.stderr, summary, trace)


@dataclass
class _Finished:
    returncode: int
    stdout: str
    stderr: str


_servers: dict[str, object] = {}  # gpu -> its ForkServer, or False where that target runs plain processes


def _forked(cmd: list[str], gpu: str, extra: list[str], timeout: float) -> _Finished | None:
    """The worker forked from a session-wide fork server for `gpu` (emulator.launch.forkserver), as `maya
    emulate` runs its ranks; None where the launcher would start a plain process (cpu, profile, or no server)."""
    import atexit
    import tempfile

    from emulator.launch.forkserver import ForkServer, wanted

    if gpu == "cpu" or "--profile" in extra or not wanted():
        return None
    if gpu not in _servers:
        logs = Path(tempfile.mkdtemp(prefix="maya-forkserver-"))
        _servers[gpu] = ForkServer.start(sys.executable, gpu, None, 1, _env(), logs / "server.log") or False
        if _servers[gpu]:
            atexit.register(_servers[gpu].close)
    server = _servers[gpu]
    if not server:
        return None
    with tempfile.TemporaryDirectory(prefix="maya-worker-output-") as streams:
        stdout, stderr = Path(streams) / "stdout", Path(streams) / "stderr"
        proc = server.spawn(cmd[len(WORKER):], _env(), stdout, stderr=stderr, cwd=ROOT)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return _Finished(rc, stdout.read_text(errors="replace"), stderr.read_text(errors="replace"))


def run_worker(program: str, out: Path, *args: str, rank: int = 0, world: int = 1, gpu: str = "h100",
               extra: list[str] | None = None, timeout: float = 240) -> WorkerRun:
    cmd = _cmd(program, out, rank, world, gpu, list(extra or []), list(args))
    proc = _forked(cmd, gpu, list(extra or []), timeout)
    if proc is None:
        proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    return read(out, rank, proc)


def run_ranks(program: str, out: Path, *args: str, world: int = 2, gpu: str = "h100",
              timeout: float = 240) -> list[WorkerRun]:
    """All ranks at once (needed when ranks exchange Python objects, e.g. pipelining)."""
    procs = [subprocess.Popen(_cmd(program, out, r, world, gpu, [], list(args)), cwd=ROOT, env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    runs = []
    for r, p in enumerate(procs):
        p.stdout_text, p.stderr_text = p.communicate(timeout=timeout)
        runs.append(WorkerRun(p.returncode, p.stdout_text, p.stderr_text,
                              json.loads((out / "ranks" / f"rank={r}.json").read_text()),
                              read_rank_trace(out, r).to_pandas()))
    return runs


_shared: dict[tuple, WorkerRun] = {}


def shared_run(program: str, *args: str, **kwargs) -> WorkerRun:
    """`run_worker` memoised for the test session: test modules that read the same run share it."""
    import atexit
    import shutil
    import tempfile

    key = (program, args, tuple(sorted(kwargs.items())))
    if key not in _shared:
        out = Path(tempfile.mkdtemp(prefix="maya-emulator-test-"))
        atexit.register(shutil.rmtree, out, True)
        _shared[key] = run_worker(program, out, *args, **kwargs)
    return _shared[key]
