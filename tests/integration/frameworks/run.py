"""`maya emulate` / `maya simulate` on the framework programs, as a user runs them, and what they wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from emulator.trace.io import read_rank_trace
from emulator.trace.layout import rank_log_path
from tests.paths import REPO

PROGRAMS = Path(__file__).resolve().parent / "programs"


@dataclass
class Emulation:
    rc: int
    output: str
    out: Path
    summary: dict  # emulation.json

    def trace(self, rank: int = 0):
        """Rank `rank`'s trace (its representative's when it was deduplicated), a pandas DataFrame."""
        rep = int(self.summary.get("rank_map", {}).get(str(rank), rank))
        return read_rank_trace(self.out, rep).to_pandas()

    def log(self, rank: int = 0) -> str:
        """What the program printed on rank `rank` (OUT/logs/rank=R.log); a rank that was not emulated
        printed what its representative did. An emulated rank keeps its log even when it shares the
        representative's trace."""
        path = rank_log_path(self.out, rank)
        if not path.exists():
            path = rank_log_path(self.out, int(self.summary.get("rank_map", {}).get(str(rank), rank)))
        return path.read_text(errors="replace") if path.exists() else ""

    def steady(self, rank: int = 0, iteration: int = 1):
        t = self.trace(rank)
        return t[t.iteration == iteration]


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1")
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / "maya-test-inductor"))
    return env


def emulate(program: str, out: Path, *args: str, nproc: int = 1, flags: tuple[str, ...] = (),
            timeout: float = 600) -> Emulation:
    """`maya emulate --gpu h100 --nproc-per-node N FLAGS PROGRAM ARGS` from the programs' folder."""
    return _emulate([str(PROGRAMS / program), *args], out, PROGRAMS, nproc, flags, timeout)


def emulate_module(module: str, out: Path, *args: str, cwd: Path, nproc: int = 1, flags: tuple[str, ...] = (),
                   timeout: float = 600) -> Emulation:
    """`maya emulate --gpu h100 --nproc-per-node N FLAGS -m MODULE ARGS` from `cwd` (an installed trainer)."""
    return _emulate(["-m", module, *args], out, cwd, nproc, flags, timeout)


def _emulate(program: list[str], out: Path, cwd: Path, nproc: int, flags: tuple[str, ...],
             timeout: float) -> Emulation:
    cmd = [sys.executable, "-m", "emulator.cli", "emulate", "--gpu", "h100", "--nproc-per-node", str(nproc),
           "--out", str(out), *flags, *program]
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    summary = json.loads((out / "emulation.json").read_text()) if (out / "emulation.json").exists() else {}
    return Emulation(proc.returncode, proc.stdout + proc.stderr, out, summary)


def cached_runs(tmp_path_factory, program: str, *common: str, nproc: int = 2):
    """`get(*args)`: the emulation of `program ARGS COMMON` on `nproc` ranks, run once per distinct ARGS
    for a test module (several tests read the same run)."""
    cache: dict[tuple, Emulation] = {}

    def get(*args: str) -> Emulation:
        if args not in cache:
            out = tmp_path_factory.mktemp(Path(program).stem)
            cache[args] = emulate(program, out, *args, *common, nproc=nproc)
        return cache[args]

    return get


def simulate(out: Path, *flags: str) -> dict:
    """`maya simulate OUT --roofline-only` (no registered predictors needed): prediction.json."""
    cmd = [sys.executable, "-m", "emulator.cli", "simulate", str(out), "--roofline-only", "--no-timeline", *flags]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "prediction.json").read_text())


def ok(run: Emulation) -> str:
    """The assertion message of a failed emulation: its error, else the tail of its output."""
    return (run.summary.get("error") or "")[-3000:] or run.output[-3000:]
