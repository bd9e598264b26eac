"""The fake device on a CUDA build of torch with no usable GPU (e.g. the default PyPI wheel).

A CUDA build brings libtorch_cuda's own device guard, hooks, SDPA chooser and DDP timer, which
would call the CUDA driver; the emulator must replace them and still answer as the target.
Skipped on CPU builds of torch (run with a CUDA-build venv: `python -m pytest tests/emulator/test_cuda_build.py`).
"""

import pytest
import torch

from tests.programs.harness import run_worker

pytestmark = pytest.mark.skipif(torch.version.cuda is None, reason="needs a CUDA build of torch (no GPU needed)")

PINNED_DDP = """
import torch, torch.distributed as dist
dist.init_process_group("nccl")
a = torch.empty(100).pin_memory()
print(f"pinned={a.is_pinned()} view={a[50:].is_pinned()} plain={torch.empty(4).is_pinned()}")
m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16).cuda(), find_unused_parameters=True)
m(torch.randn(2, 16, device="cuda")).sum().backward()
print("ddp=ok")
"""


@pytest.fixture(scope="module")
def amp(tmp_path_factory):
    return run_worker("tiny_train.py", tmp_path_factory.mktemp("amp"), "--autocast", "--steps", "2")


def test_training_runs_as_the_target_gpu(amp):
    assert amp.rc == 0, amp.summary["error"]
    assert "device cuda NVIDIA H100 80GB HBM3" in amp.stdout
    assert amp.summary["iterations"] == 2


def test_flash_attention_and_foreach_adamw(amp):
    t = amp.trace
    assert {"aten::_scaled_dot_product_flash_attention",
            "aten::_scaled_dot_product_flash_attention_backward"} <= set(t.op)
    opt = t[(t.phase == "optimizer") & (t.iteration == 0)]
    assert len(opt) > 0 and opt.op.str.startswith("aten::_foreach_").all()


def test_pinned_memory_and_ddp_with_unused_parameter_search(tmp_path):
    prog = tmp_path / "pinned_ddp.py"
    prog.write_text(PINNED_DDP)
    run = run_worker(str(prog), tmp_path / "out", world=2, rank=0)
    assert run.rc == 0, run.summary["error"]
    seen = run.printed()
    assert (seen["pinned"], seen["ddp"]) == ("True view=True plain=False", "ok")
    assert (run.trace.kind == "collective").any()


def test_cuda_graphs_fail_naming_the_api(tmp_path):
    prog = tmp_path / "graphs.py"
    prog.write_text("import torch\nprint(f'capturing={torch.cuda.is_current_stream_capturing()}')\n"
                    "g = torch.cuda.CUDAGraph()\n")
    run = run_worker(str(prog), tmp_path / "out")
    assert run.rc == 1 and run.printed()["capturing"] == "False"
    assert "torch.cuda.CUDAGraph: CUDA graph capture is not emulated" in run.summary["error"]
    assert "driver" not in run.summary["error"]
