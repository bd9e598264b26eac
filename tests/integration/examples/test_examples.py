"""The example training scripts under `maya emulate` (fake H100s) at world sizes 1, 2 and 8.

Each run uses the tiny preset and one or two steps; world size 8 goes through rank
deduplication, and its traces must collate (every collective matched across all 8 ranks,
deduplicated ranks expanded). Multi-process, so marked slow; still part of `make test`.

Every emulated rank is a process of its own (forked from a fork server that imported torch once
per job, emulator.launch.forkserver), still seconds of CPU each, so the default run is
a subset that covers every example and every world size within the suite's time budget;
`MAYA_TEST_ALL_EXAMPLES=1` runs the full example x {1, 2, 8} matrix.
"""

import os
import subprocess
import sys

import pytest

from emulator.launch.emulate import run_emulation
from tests.paths import REPO

ROOT = REPO
EXAMPLES = ROOT / "examples"


ARGS = {"gpt_single.py": ["--steps", "2"], "ddp.py": ["--steps", "1"], "fsdp2.py": ["--steps", "1"],
        "tp_fsdp2.py": ["--steps", "1", "--tp", "2"], "pipeline.py": ["--steps", "1"]}
WIDE = {"pipeline.py": ["--pp", "2"]}  # at world 8: dp 4 x pp 2 (tp_fsdp2: dp 4 x tp 2)
DEFAULT = [("gpt_single.py", 1), ("fsdp2.py", 1), ("ddp.py", 2), ("tp_fsdp2.py", 2), ("pipeline.py", 2),
           ("fsdp2.py", 8), ("tp_fsdp2.py", 8), ("pipeline.py", 8)]
if os.environ.get("MAYA_TEST_ALL_EXAMPLES"):
    DEFAULT = [(s, w) for s in ARGS for w in (1, 2, 8)]
CASES = [(s, w, ARGS[s] + (WIDE.get(s, []) if w == 8 else [])) for s, w in DEFAULT]


def emulate(script, world, argv, out, **kw):
    return run_emulation(script=str(EXAMPLES / script), module=None, argv=argv, gpu="h100",
                         nproc_per_node=world, out=out, jobs=2, **kw)


@pytest.mark.parametrize("script,world,argv", CASES, ids=[f"{c[0][:-3]}-w{c[1]}" for c in CASES])
def test_example_emulates(tmp_path, script, world, argv):
    out = tmp_path / "out"
    s = emulate(script, world, argv, out)
    assert s.ok and s.complete, s.error
    assert s.world_size == world and s.iterations_found == int(argv[1])
    assert set(s.rank_map) == {str(r) for r in range(world)}
    assert all(0 < s.peak_allocated_bytes[str(r)] <= s.peak_reserved_bytes[str(r)] for r in range(world))
    if world == 8:
        assert len(s.ranks_emulated) < 8, "rank deduplication should have saved work"
        from emulator.collate.job import collate

        job = collate(out)  # raises if any collective or p2p is unmatched after expansion
        assert len(job.ranks) == 8


def test_failing_script_reports_rank_and_traceback(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nimport torch\n\n"
                   "def build():\n    raise ValueError(f'no config for rank {os.environ[\"RANK\"]}')\n\n"
                   "x = torch.ones(2, device='cuda')\nbuild()\n")
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "emulate", "--gpu", "h100", "--nproc-per-node", "2",
                           "--out", str(tmp_path / "out"), str(bad)], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "failed on rank" in proc.stderr
    assert "ValueError: no config for rank" in proc.stderr and 'bad.py", line 5' in proc.stderr


def test_oversized_batch_is_reported_as_oom(tmp_path):
    # one GPT-2 layer, 512 x 1024 tokens: the logits alone need > 80 GB
    s = emulate("gpt_single.py", 1, ["--model", "gpt2-small", "--layers", "1", "--batch-size", "512", "--steps", "1"],
                tmp_path / "out")
    assert s.oom and not s.ok and s.oom_ranks == [0]
    assert "CUDA out of memory" in (s.oom_message or s.error)


def test_peak_memory_matches_an_analytic_count(tmp_path):
    """fp32 AdamW with negligible activations: the peak is in the optimizer step, where params, grads,
    both Adam moments and foreach-Adam's sqrt(v) temporary are live: 5 x 4 bytes per parameter."""
    d, ffn, vocab, layers = 512, 1536, 1024, 2
    per_layer = 4 * d * d + 3 * d * ffn + 2 * d
    n_params = 2 * vocab * d + layers * per_layer + d  # untied embeddings, final norm
    s = emulate("gpt_single.py", 1, ["--dtype", "float32", "--d-model", str(d), "--heads", "8", "--kv-heads", "8",
                                     "--layers", str(layers), "--vocab", str(vocab), "--seq-len", "8",
                                     "--batch-size", "1", "--steps", "2"], tmp_path / "out")
    assert s.ok, s.error
    peak, reserved = s.peak_allocated_bytes["0"], s.peak_reserved_bytes["0"]
    expected = 20 * n_params
    assert abs(peak - expected) / expected < 0.05, (peak, expected)
    assert reserved >= peak
