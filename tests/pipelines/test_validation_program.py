"""The validation training program really trains on CPU: single process, TP x DP, and PP (1F1B)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "examples" / "validation" / "megatron_gpt.py"
TINY = ["--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "1000", "--steps", "3"]


def _run(nproc: int, *args: str) -> list[float]:
    if nproc == 1:
        cmd = [sys.executable, str(PROGRAM)]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               str(PROGRAM)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([*cmd, *TINY, *args], capture_output=True, text=True, timeout=240, env=env,
                       cwd=PROGRAM.parent)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    losses = [float(m) for m in re.findall(r"step \d+ loss ([0-9.]+)", p.stdout)]
    assert len(losses) == 3, p.stdout
    return losses


def _near_uniform(loss: float, vocab: int = 1000) -> bool:
    """A freshly initialised LM predicts ~uniformly: the loss is close to ln(vocab)."""
    return abs(loss - math.log(vocab)) < 0.3


def test_single_process_trains():
    losses = _run(1)
    assert _near_uniform(losses[0])


@pytest.mark.slow
def test_tensor_and_data_parallel_four_ranks():
    losses = _run(4, "--tp", "2")  # TP=2 inside, DDP over the 2 data-parallel replicas
    assert _near_uniform(losses[0])  # the vocab-parallel loss has the full cross-entropy's scale


@pytest.mark.slow
def test_pipeline_two_stages_with_checkpointing_and_bf16():
    losses = _run(2, "--pp", "2", "--global-batch", "8", "--checkpoint", "--dtype", "bf16")  # 4 micro-batches, 1F1B
    assert _near_uniform(losses[0])
    assert all(math.isfinite(x) for x in losses)
