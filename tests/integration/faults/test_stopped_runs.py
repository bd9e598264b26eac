"""Fault injection on a running emulation: a worker killed mid-run, the launcher interrupted, and a
rerun into the same folder. Each asserts what the user sees and that nothing recorded is lost."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulator.core.exitcodes import Exit
from tests.integration.faults.interrupts import deliverable_ctrl_c
from tests.programs.harness import PROGRAMS, ROOT

WAITS = PROGRAMS / "waits.py"


def launch(out: Path, *program_args: str, nproc: int = 2) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "emulator.cli", "emulate", "--nproc-per-node", str(nproc),
                             "--no-dedup", "--out", str(out), str(WAITS), *program_args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=deliverable_ctrl_c)


def wait_ready(out: Path, ranks, proc: subprocess.Popen, timeout: float = 240) -> None:
    """Until every rank's log says `ready` (its work is recorded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = [out / "logs" / f"rank={r}.log" for r in ranks]
        if all(p.exists() and "ready" in p.read_text(errors="replace") for p in logs):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.kill()
    pytest.fail("the ranks never got ready")


def worker_pid(out: Path, rank: int) -> int:
    """The process emulating `rank`: the program says its process id in the rank's log."""
    m = re.search(r"ready pid=(\d+)", (out / "logs" / f"rank={rank}.log").read_text(errors="replace"))
    assert m, f"rank {rank} never said its process id"
    return int(m.group(1))


def summary(out: Path) -> dict:
    return json.loads((out / "emulation.json").read_text())


def test_a_worker_killed_mid_run_fails_its_rank_and_keeps_the_others(tmp_path):
    out = tmp_path / "out"
    proc = launch(out, "--sleep-rank0", "1")
    wait_ready(out, [0, 1], proc)
    os.kill(worker_pid(out, 1), signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == Exit.PROGRAM_FAILED, stderr[-3000:]
    assert "rank 1: failed (killed by SIGKILL)" in stderr
    assert "the program failed on rank 1" in stderr and "was killed by SIGKILL before it wrote its outputs" in stderr
    s = summary(out)
    assert s["failed_rank"] == 1 and not s["complete"] and not s["interrupted"]
    assert s["ranks_emulated"] == [0]  # rank 0 ran to its end: its trace and summary are kept
    assert json.loads((out / "ranks" / "rank=0.json").read_text())["ok"] is True
    assert (out / "trace" / "rank=0" / "part-0.parquet").exists()


def test_ctrl_c_stops_the_workers_marks_the_folder_and_a_rerun_replaces_it(tmp_path):
    out = tmp_path / "out"
    proc = launch(out)
    wait_ready(out, [0, 1], proc)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == Exit.INTERRUPTED, stderr[-3000:]
    assert time.monotonic() - t0 < 60  # the workers were stopped, not waited for
    assert "interrupted: stopped after" in stderr and "Traceback" not in stderr
    s = summary(out)
    assert s["interrupted"] is True and s["complete"] is False and s["ok"] is False
    for r in (0, 1):  # each stopped worker wrote what it had recorded, marked so
        rank = json.loads((out / "ranks" / f"rank={r}.json").read_text())
        assert rank["interrupted"] is True and rank["n_events"] >= 4
    again = subprocess.run([sys.executable, "-m", "emulator.cli", "simulate", "--roofline-only", str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == Exit.INTERRUPTED and "the emulation was interrupted" in again.stderr
    assert not (out / "prediction.json").exists()
    rerun = launch(out, "--sleep", "0", nproc=1)
    _, stderr = rerun.communicate(timeout=240)
    assert rerun.returncode == Exit.OK, stderr[-3000:]
    s = summary(out)
    assert s["ok"] and s["complete"] and not s["interrupted"] and s["world_size"] == 1
    assert not (out / "ranks" / "rank=1.json").exists() and not (out / "trace" / "rank=1").exists()
