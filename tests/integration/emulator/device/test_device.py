"""The fake device: what the script sees of the target GPU, and the GPU-only decisions PyTorch makes."""

import json

import pytest

from tests.programs.harness import run_worker, shared_run


@pytest.fixture(scope="module")
def misc():
    return shared_run("misc_api.py", extra=("--allow-unsupported",))


@pytest.fixture(scope="module")
def amp(tmp_path_factory):
    return run_worker("tiny_train.py", tmp_path_factory.mktemp("amp"), "--autocast", "--steps", "2")


def test_script_sees_the_target_gpu(misc):
    seen = misc.printed()
    assert misc.rc == 0, misc.summary["error"]
    assert seen["name"] == "NVIDIA H100 80GB HBM3"
    assert int(seen["total_memory"]) == 85520809984  # GPUSpec.memory_bytes of h100
    assert seen["sms"] == "132"
    assert seen["capability"] == "(9, 0)"
    assert int(seen["mem_total"]) == 85520809984


def test_oom_is_raised_in_the_script_and_reported(misc):
    seen = misc.printed()
    assert seen["oom_caught"].startswith("True msg=CUDA out of memory. Tried to allocate 200.00 GiB")
    assert misc.summary["oom"] is False and misc.summary["ooms_caught"] == 1  # caught: counted, not an OOM
    assert misc.rc == 0  # the script caught it and finished


def test_memory_stats_come_from_the_allocator(misc):
    seen = misc.printed()
    # a 1000x1000 fp32 tensor, rounded to the allocator's 512 B granularity
    assert int(seen["allocated_after_x"]) == 4_000_256
    peak, reserved = (int(p.split("=")[1]) for p in ("peak=" + seen["peak"]).split()[:2])
    assert peak >= 4 * 4_000_256 and reserved >= peak
    assert misc.summary["peak_allocated"] >= peak
    assert misc.summary["peak_reserved"] >= misc.summary["peak_allocated"]


def test_streams_events_and_nvtx_become_rows(misc):
    t = misc.trace
    mm = t[t.op == "aten::mm"].iloc[0]
    assert mm.stream != 0  # issued inside `with torch.cuda.stream(s)`
    rec = t[t.kind == "event_record"].iloc[0]
    wait = t[t.kind == "event_wait"].iloc[0]
    assert rec.event_id == wait.event_id and rec.stream == mm.stream and wait.stream == 0
    assert list(t[t.kind == "marker"].op) == ["nvtx::range_push", "nvtx::range_pop"]
    assert (t.kind == "device_sync").sum() == 1


def test_flash_attention_is_chosen_for_bf16_on_h100(amp):
    assert amp.rc == 0, amp.summary["error"]
    ops = set(amp.trace.op)
    assert "aten::_scaled_dot_product_flash_attention" in ops
    assert "aten::_scaled_dot_product_flash_attention_backward" in ops
    assert not any("math" in o or "_safe_softmax" in o for o in ops)


def test_autocast_bf16_gives_bf16_gemms(amp):
    t = amp.trace
    gemms = t[t.op.isin(["aten::mm", "aten::addmm"]) & (t.phase == "forward")]
    assert len(gemms) >= 3
    assert all(set(d) == {"bfloat16"} for d in gemms["dtypes"])


def test_optimizer_takes_the_gpu_foreach_path(amp):
    t = amp.trace
    opt = t[(t.phase == "optimizer") & (t.iteration == 0)]  # steady state (step 1 also creates the state)
    assert len(opt) > 0
    assert opt.op.str.startswith("aten::_foreach_").all()
    assert "aten::_foreach_addcdiv_" in set(opt.op)


def test_fused_adamw_when_asked(tmp_path):
    prog = tmp_path / "fused.py"
    prog.write_text(
        "import torch\n"
        "m = torch.nn.Linear(32, 32).cuda()\n"
        "opt = torch.optim.AdamW(m.parameters(), fused=True)\n"
        "m(torch.randn(4, 32, device='cuda')).sum().backward()\n"
        "opt.step()\n")
    from tests.programs import harness

    run = harness.run_worker(str(prog), tmp_path / "out")
    assert run.rc == 0, run.summary["error"]
    fused = run.trace[run.trace.op == "aten::_fused_adamw_"]
    assert len(fused) == 1 and fused.iloc[0].phase == "optimizer"
    # params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs (empty: no amsgrad), state_steps
    assert '"list_lengths": [2, 2, 2, 2, 0, 2]' in fused.iloc[0].args


def test_unknown_cuda_api_fails_naming_it(tmp_path):
    run = run_worker("unknown_api.py", tmp_path)
    assert run.rc == 1
    assert "torch._C._cuda_getCurrentBlasHandle" in run.summary["error"]
    assert "handle=" not in run.stdout


def test_fp16_amp_generator_checkpoint_and_host_copies(tmp_path):
    run = run_worker("amp_fp16.py", tmp_path)
    assert run.rc == 0, run.summary["error"]
    seen = run.printed()
    assert seen["scaler"] == "ok" and run.summary["iterations"] == 2  # GradScaler.step -> optimizer.step
    assert seen["generator"] == "cpu"  # documented: the emulated CUDA generator is a CPU one (no numbers drawn)
    assert int(seen["saved_bytes"]) > 0
    assert seen["tensor_shape"] == "(3,)" and seen["host_shape"] == "(3,)"
    assert seen["tolist"] == "[1, 2, 3]"  # data made on the host keeps its values (emulator.capture.shadows)
    t = run.trace
    save = t[t.op == "io::save"].iloc[0]
    assert json.loads(save.args)["bytes"] == 4 * (16 * 16 + 16 + 4 * 16 + 4)
    assert {"memcpy::h2d", "memcpy::d2h"} <= set(t.op)
    fwd = t[(t.op == "aten::addmm") & (t.phase == "forward")]
    assert all(set(d) == {"float16"} for d in fwd["dtypes"])
