"""CUDA calls ordinary scripts make work in emulation, and what cannot work says so with the script's line."""

import json
import subprocess
import sys

import pytest

from tests.programs.harness import PROGRAMS, ROOT

PROGRAM = PROGRAMS / "cuda_calls.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cuda-calls")
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "predict", "--roofline-only", "--out", str(out),
                           str(PROGRAM)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    printed = dict(line.split("=", 1) for line in (out / "logs" / "rank=0.log").read_text().splitlines()
                   if "=" in line and " " not in line.split("=", 1)[0])
    return proc, printed, out


def test_values_made_from_host_constants_read_back_as_themselves(run):
    proc, printed, _ = run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert printed["initial_scale"] == "65536.0"
    # GradScaler's scale is torch.full((), 65536.0) on the device; with finite gradients (the documented
    # assumption) it doubles every growth_interval=2 steps, as on a GPU
    assert printed["scales"] == "[65536.0, 131072.0, 131072.0]"
    assert printed["full"] == "7.5"
    assert printed["filled"] == "12.0 ones_like=4096.0"


def test_cuda_timing_events_read_a_counted_placeholder_and_predict_reports_the_simulated_time(run):
    proc, printed, out = run
    assert printed["elapsed_ms"] == "[1.0, 1.0, 1.0]"  # emulator.device.cuda_shim.ELAPSED_TIME_PLACEHOLDER_MS
    assert printed["untimed"] == "Both events must be created with argument 'enable_timing=True'."  # as torch says
    summary = json.loads((out / "emulation.json").read_text())
    assert summary["placeholders"]["elapsed_time"] == 3
    pred = json.loads((out / "prediction.json").read_text())
    (timed,) = pred["cuda_event_timings"]
    assert timed["reads"] == 3
    # the events bracket one training step: the simulated step, not the placeholder
    assert timed["median_ms"] == pytest.approx(pred["iteration_time_s"] * 1e3, rel=0.3)
    assert "torch.cuda.Event timing the program read" in proc.stdout


def test_sparse_nested_and_quantized_tensors_are_named_with_the_line(run):
    _, printed, out = run
    line = next(i for i, text in enumerate(PROGRAM.read_text().splitlines(), 1) if "# first kind" in text)
    for k, (kind, at) in enumerate((("sparse", "sparse COO"), ("nested", "nested"), ("quantized", "quantized"))):
        assert printed[kind].startswith(f"maya: a {at} tensor on the emulated GPU at {PROGRAM}:{line + k}:")
    assert "memcpy::h2d" not in json.loads((out / "emulation.json").read_text())["unsupported_ops"]
