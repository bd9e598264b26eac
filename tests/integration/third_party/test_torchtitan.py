"""torchtitan's llama3 debug config runs unmodified under `maya emulate` (skipped when torchtitan is absent).

torchtitan 0.3.0 needs torch >= 2.14 and triton; its llama3 models use FlexAttention (a
higher-order op). See examples/third_party/README.md for the 8B configuration.
"""

import json
import os
import subprocess
import sys

import pytest

from emulator.trace.io import read_rank_trace
from tests.paths import REPO

pytest.importorskip("torchtitan")
ROOT = REPO


def test_torchtitan_llama3_debug_model_two_iterations(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "examples" / "third_party" / "torchtitan_assets.py"), str(tmp_path)],
                   check=True, capture_output=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONPATH=str(ROOT))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "emulate", "--gpu", "h100", "--iterations", "2", "--out", str(out),
         "-m", "torchtitan.train", "--module", "llama3", "--config", "llama3_debugmodel",
         "--training.seq_len", "256", "--training.local_batch_size", "2", "--training.disable_cuda_graphs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    summary = json.loads((out / "emulation.json").read_text())
    assert proc.returncode == 0 and summary["ok"], proc.stdout[-2000:] + proc.stderr[-2000:]
    assert summary["iterations_found"] == 2
    trace = read_rank_trace(out, 0).to_pandas()
    assert {"aten::flex_attention", "aten::flex_attention_backward"} <= set(trace.op)
