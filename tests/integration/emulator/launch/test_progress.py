"""While emulating, the launcher prints one live line per optimizer step rank 0 reaches:
`rank 0: iteration 2/3 (12.4 s)`. On by default on a terminal; MAYA_PROGRESS=1 forces it (a pipe), 0 turns it off."""

import os
import re
import subprocess
import sys

import pytest

from tests.programs.harness import PROGRAMS, ROOT


def _emulate(tmp_path, progress: str | None):
    env = {k: v for k, v in os.environ.items() if k != "MAYA_PROGRESS"}
    if progress is not None:
        env["MAYA_PROGRESS"] = progress
    return subprocess.run([sys.executable, "-m", "emulator.cli", "emulate", "--gpu", "h100", "--nproc-per-node", "2",
                           "--iterations", "3", "--out", str(tmp_path / "out"), str(PROGRAMS / "tiny_train.py"),
                           "--steps", "5"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_each_optimizer_step_of_rank_0_is_a_live_line(tmp_path):
    proc = _emulate(tmp_path, "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = re.findall(r"^rank (\d+): iteration (\d+)/3 \((\d+\.\d) s\)$", proc.stderr, re.M)
    assert [(r, i) for r, i, _ in lines] == [("0", "1"), ("0", "2"), ("0", "3")], proc.stderr
    seconds = [float(s) for _, _, s in lines]
    assert seconds == sorted(seconds) and seconds[0] > 0
    assert proc.stderr.index("iteration 3/3") < proc.stderr.index("rank 0: ok")  # before the rank's summary line


@pytest.mark.parametrize("progress", [None, "0"])  # not a terminal: quiet unless asked
def test_quiet_when_not_asked_off_a_terminal(tmp_path, progress):
    proc = _emulate(tmp_path, progress)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "iteration 1/3" not in proc.stderr
