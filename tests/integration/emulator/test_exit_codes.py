"""One exit-code table for every subcommand that runs a job (emulator.core.exitcodes), as a CI gate sees it.

The subcommands' bad-input codes (nothing runs) and `maya simulate`'s codes for saved folders are in
tests/unit/emulator/test_cli.py; these need worker processes."""

import json
import subprocess
import sys

import pytest

from emulator.core.exitcodes import Exit
from tests.programs.harness import PROGRAMS, ROOT


def maya(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("command", ["emulate", "predict", "profile"])
def test_a_program_that_fails_is_program_failed(tmp_path, command):
    extra = ["--roofline-only"] if command == "predict" else []
    proc = maya(command, *extra, "--out", tmp_path / "out", PROGRAMS / "fails.py")
    assert proc.returncode == Exit.PROGRAM_FAILED, proc.stderr[-2000:]
    assert "failed on rank 0" in proc.stderr
    assert not (tmp_path / "out" / "prediction.json").exists()


def test_an_oom_that_ends_a_rank_is_oom_for_predict_and_for_simulate_of_its_folder(tmp_path):
    out = tmp_path / "out"
    proc = maya("predict", "--roofline-only", "--out", out, PROGRAMS / "ooms.py")
    assert proc.returncode == Exit.OOM, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "OUT OF MEMORY" in proc.stdout and "Tried to allocate 200.00 GiB" in proc.stderr
    assert json.loads((out / "prediction.json").read_text())["oom"] is True
    again = maya("simulate", "--roofline-only", out)
    assert again.returncode == Exit.OOM and "OUT OF MEMORY" in again.stdout


@pytest.mark.parametrize("command", ["emulate", "profile"])
def test_a_program_that_runs_to_its_end_is_ok(tmp_path, command):
    proc = maya(command, "--out", tmp_path / "out", PROGRAMS / "tiny_train.py", "--steps", "1")
    assert proc.returncode == Exit.OK, proc.stderr[-2000:]
