"""Third-party trainers run unmodified under the emulator (skipped when the package is absent).

Hugging Face `Trainer` on a Llama built from a config (examples/third_party/hf_trainer.py):
stock Trainer/accelerate code picks `cuda` (the emulated H100), autocasts to bf16, and at world
size 2 wraps the model in DDP over nccl (the recording process group).
"""


import pytest

from tests.paths import REPO
from tests.programs.harness import run_ranks, run_worker

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

HF_DRIVER = str(REPO / "examples" / "third_party" / "hf_trainer.py")
ARGS = ("--steps", "2", "--layers", "1", "--bf16", "--seq-len", "64", "--batch-size", "2")


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_TRAINER_OUT", str(tmp_path / "trainer"))


def test_hf_trainer_world_1(tmp_path):
    run = run_worker(HF_DRIVER, tmp_path / "out", *ARGS)
    assert run.rc == 0, run.summary["error"]
    assert "device=cuda:0" in run.stdout
    assert run.summary["iterations"] == 2
    t = run.trace
    assert {"forward", "backward", "optimizer"} <= set(t.phase)
    gemms = t[t.op.isin(["aten::mm", "aten::addmm"]) & (t.phase == "forward")]
    assert len(gemms) > 0 and all(set(d) == {"bfloat16"} for d in gemms["dtypes"])
    assert t[t.phase == "optimizer"].op.str.startswith("aten::_foreach_").any()
    # as on an H100: the mask checks read the host-made batch's real values, so the causal mask is
    # skipped and bf16 SDPA takes the flash kernel (a placeholder mask forced the memory-efficient one)
    attention = {op for op in t.op if "attention" in op}
    assert attention == {"aten::_scaled_dot_product_flash_attention",
                         "aten::_scaled_dot_product_flash_attention_backward"}


def test_hf_trainer_ddp_world_2(tmp_path):
    runs = run_ranks(HF_DRIVER, tmp_path / "out", *ARGS, world=2)
    for r in runs:
        assert r.rc == 0, r.summary["error"]
        assert r.summary["iterations"] == 2
    t = runs[0].trace
    ar = t[(t.kind == "collective") & (t.phase == "backward")]
    assert len(ar) > 0 and set(ar.op) == {"c10d::allreduce_"}  # DDP's gradient buckets

