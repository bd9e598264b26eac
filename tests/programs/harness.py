"""Run `python -m emulator.launch.worker` on a test program and read back what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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
    return [sys.executable, "-m", "emulator.launch.worker", "--gpu", gpu, "--rank", str(rank),
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


def run_worker(program: str, out: Path, *args: str, rank: int = 0, world: int = 1, gpu: str = "h100",
               extra: list[str] | None = None, timeout: float = 240) -> WorkerRun:
    proc = subprocess.run(_cmd(program, out, rank, world, gpu, list(extra or []), list(args)), cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=timeout)
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
