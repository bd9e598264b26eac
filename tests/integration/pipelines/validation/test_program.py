"""The validation training program really trains on CPU: single process, TP x DP, and PP (1F1B)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

from tests.paths import REPO

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


def test_tensor_and_data_parallel_four_ranks():
    losses = _run(4, "--tp", "2")  # TP=2 inside, DDP over the 2 data-parallel replicas
    assert _near_uniform(losses[0])  # the vocab-parallel loss has the full cross-entropy's scale


def test_pipeline_two_stages_with_checkpointing_and_bf16():
    losses = _run(2, "--pp", "2", "--global-batch", "8", "--checkpoint", "--dtype", "bf16")  # 4 micro-batches, 1F1B
    assert _near_uniform(losses[0])
    assert all(math.isfinite(x) for x in losses)


def test_half_params_trains_in_half_precision_on_cpu():
    losses = _run(1, "--dtype", "bf16", "--half-params")
    assert _near_uniform(losses[0]) and all(math.isfinite(x) for x in losses)


def test_half_params_moves_half_precision_bytes_like_megatron(tmp_path):
    """Megatron's --fp16: half-precision GEMMs and TP all-reduces, an fp32 optimizer step."""
    import json

    from emulator.launch.emulate import run_emulation
    from emulator.trace.io import read_rank_trace

    hidden, micro, seq = 64, 4, 32  # 4 x 2 rows of heads: a shape Megatron's fused softmax takes
    s = run_emulation(script=str(PROGRAM), module=None, gpu="a100-80gb", nproc_per_node=2, nnodes=1, iterations=2,
                      out=tmp_path, dedup=True,
                      argv=["--layers", "2", "--hidden", str(hidden), "--heads", "4", "--seq", str(seq), "--vocab",
                            "128", "--tp", "2", "--micro-batch", str(micro), "--dtype", "fp16", "--half-params",
                            "--attention", "eager", "--steps", "3"])
    assert s.ok, s.error
    t = read_rank_trace(tmp_path, 0).to_pandas()
    t = t[t.iteration == 0]
    gemms = t[t.op.isin(["aten::mm", "aten::addmm", "aten::bmm"]) & (t.phase == "forward")]
    assert len(gemms) > 0 and all(set(d) == {"float16"} for d in gemms["dtypes"])
    tp_ar = t[(t.kind == "collective") & (t.phase == "forward")]
    # every forward all-reduce (embedding, attention and MLP outputs) carries 2 bytes per element; under
    # autocast the embedding output stays fp32
    assert len(tp_ar) > 0 and (tp_ar.coll_bytes == micro * seq * hidden * 2).all()
    step = t[(t.phase == "optimizer") & t.op.str.startswith("aten::_foreach_")]
    assert len(step) > 0 and all(set(d) == {"float32"} for d in step["dtypes"] if d is not None and len(d))
    assert json.loads((tmp_path / "emulation.json").read_text())["ok"]
    # Megatron's fused causal softmax: one kernel each way per layer, no masked_fill of the scores (the
    # vocab-parallel embedding and loss still mask out-of-range tokens, as Megatron's do)
    attn = t[t.module.fillna("").str.contains(r"\.attn")]
    assert (attn.op == "aten::_masked_softmax").sum() == 2 and (attn.op == "aten::_softmax_backward_data").sum() == 2
    assert not attn.op.isin(["aten::masked_fill", "aten::masked_fill_"]).any()
    # Megatron's [s, b, h] attention: q, k and v are views of the QKV output, the scale is baddbmm's alpha,
    # and the context is copied once back to [s, b, h]
    fwd = attn[attn.phase == "forward"]
    assert (fwd.op == "aten::baddbmm").sum() == 2 and (fwd.op == "aten::clone").sum() == 2
    assert not fwd.op.isin(["aten::mul", "aten::_to_copy", "aten::copy_"]).any()


@pytest.mark.parametrize("adam", ["torch", "fused"])
def test_the_optimizer_step_is_torchs_foreach_passes_or_one_fused_kernel(tmp_path, adam):
    """`--adam fused` (Megatron's Apex FusedAdam) steps the fp32 main weights with one kernel; torch's
    AdamW on a GPU makes several foreach passes over them."""
    from emulator.launch.emulate import run_emulation
    from emulator.trace.io import read_rank_trace

    s = run_emulation(script=str(PROGRAM), module=None, gpu="a100-80gb", nproc_per_node=1, nnodes=1, iterations=2,
                      out=tmp_path, dedup=True,
                      argv=[*TINY[:-2], "--dtype", "fp16", "--half-params", "--attention", "eager", "--steps", "3",
                            "--adam", adam])
    assert s.ok, s.error
    t = read_rank_trace(tmp_path, 0).to_pandas()
    step = t[(t.iteration == 0) & (t.phase == "optimizer") & (t.kind == "kernel")]  # the steady step
    fused = step[step.op == "aten::_fused_adamw_"]
    # passes over the weights (not the per-parameter step counters, 0-d tensors)
    passes = step[step.op.str.startswith("aten::_foreach_") & step.shapes.map(lambda s: any(len(x) for x in s))]
    if adam == "fused":
        assert len(fused) == 1 and len(passes) == 0
        assert set(fused.iloc[0]["dtypes"]) == {"float32"}  # the fp32 main weights, not the fp16 model's
    else:
        assert len(fused) == 0 and len(passes) >= 4


@pytest.mark.parametrize(("precision", "clip"), [("half-params", "1.0"), ("half-params", "0"), ("fp32", "1.0")])
def test_the_step_agrees_on_overflow_and_clips_across_the_model_parallel_group(tmp_path, precision, clip):
    """Megatron's step: with half-precision parameters the inf/NaN flag is a max over the model-parallel group;
    with `--clip-grad` (default 1.0) the gradients' norm is one multi-tensor pass whose square is summed over
    that group, in either precision."""
    from emulator.launch.emulate import run_emulation
    from emulator.trace.io import read_rank_trace

    dtype = ["--dtype", "fp16", "--half-params"] if precision == "half-params" else ["--dtype", "fp32"]
    s = run_emulation(script=str(PROGRAM), module=None, gpu="a100-80gb", nproc_per_node=2, nnodes=1, iterations=2,
                      out=tmp_path, dedup=True,
                      argv=[*TINY[:-2], *dtype, "--attention", "eager", "--steps", "3", "--tp", "2",
                            "--clip-grad", clip])
    assert s.ok, s.error
    t = read_rank_trace(tmp_path, 0).to_pandas()
    steady = t[t.iteration == t.iteration.max()]
    one_float = steady[(steady.op == "c10d::allreduce_") & (steady.coll_bytes == 4)]
    assert all(list(r) == [0, 1] for r in one_float.group_ranks)
    norms = len(steady[steady.op == "aten::_foreach_norm"])
    flags = 1 if precision == "half-params" else 0  # the fp32 step has no loss scale, so no overflow check
    assert (len(one_float), norms) == ((flags, 0) if clip == "0" else (flags + 1, 1))


def test_clipping_scales_the_gradients_to_the_limit_only_when_their_norm_exceeds_it():
    import torch

    prog = _program_module()
    grads = [torch.full((3,), 2.0), torch.full((4,), 2.0)]  # norm 2 * sqrt(7)
    prog.clip_main_grads(grads, 1.0, None)
    assert math.isclose(float(torch.linalg.vector_norm(torch.cat(grads))), 1.0, rel_tol=1e-5)
    prog.clip_main_grads(grads, 10.0, None)  # below the limit: left as they are
    assert math.isclose(float(torch.linalg.vector_norm(torch.cat(grads))), 1.0, rel_tol=1e-5)


def _program_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("megatron_gpt", PROGRAM)
    prog = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(PROGRAM.parent))  # it imports tensor_parallel from its folder
    try:
        spec.loader.exec_module(prog)
    finally:
        sys.path.remove(str(PROGRAM.parent))
    return prog


def test_the_fused_causal_softmax_matches_masked_fill_and_softmax():
    import torch

    prog = _program_module()
    scores = torch.randn(2, 3, 16, 16, dtype=torch.float64, requires_grad=True)
    future = ~torch.ones(16, 16, dtype=torch.bool).tril()
    ref = scores.masked_fill(future, float("-inf")).softmax(-1)
    grad = torch.randn_like(ref)
    (g_ref,) = torch.autograd.grad(ref, scores, grad)
    out = prog.CausalSoftmax.apply(scores, future)
    (g_out,) = torch.autograd.grad(out, scores, grad)
    assert torch.allclose(out, ref) and torch.allclose(g_out, g_ref)


@pytest.mark.parametrize(("rows", "seq", "fits"), [
    (2, 1024, False),  # TP8 of 16 heads at micro-batch 1: Megatron's unfused fp32 softmax
    (4, 1024, True), (6, 2048, False), (12, 2048, True),
    (4, 128, False), (8, 128, True),  # rows of <= 128 keys go two to a warp: 8 rows a block
    (4, 16, False), (4, 4100, False), (4, 4096, True), (4, 1022, False),
])
def test_the_fused_softmax_takes_the_shapes_megatrons_kernel_takes(rows, seq, fits):
    assert _program_module().fused_softmax_fits(rows, seq, seq) is fits


@pytest.mark.parametrize("micro", [1, 2])
def test_attention_runs_megatrons_fp32_softmax_where_the_fused_kernel_cannot(tmp_path, micro):
    """At 2 rows of heads a rank (TP2 of 4 heads) micro-batch 1 is not a multiple of 4 rows and micro-batch 2
    is not one of the kernel's 8 rows a block at 32 keys: both run Megatron's `forward_torch_softmax` (to
    fp32, scale, masked_fill_, softmax, back to half), forward, recomputed and backward."""
    from emulator.launch.emulate import run_emulation
    from emulator.trace.io import read_rank_trace

    s = run_emulation(script=str(PROGRAM), module=None, gpu="a100-80gb", nproc_per_node=2, nnodes=1, iterations=2,
                      out=tmp_path, dedup=True,
                      argv=["--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
                            "--tp", "2", "--micro-batch", str(micro), "--dtype", "fp16", "--half-params",
                            "--attention", "eager", "--checkpoint", "--steps", "3"])
    assert s.ok, s.error
    t = read_rank_trace(tmp_path, 0).to_pandas()
    t = t[t.iteration == 0]  # the attention is the program's only softmax
    assert not (t.op == "aten::_masked_softmax").any()
    softmax = t[t.op == "aten::_softmax"]
    # two layers, each forward and recomputed, in fp32; the mask filled in place as Megatron's mask function does
    assert len(softmax) == 4 and all(set(d) == {"float32"} for d in softmax["dtypes"])
    assert (t[t.module.fillna("").str.contains(r"\.attn")].op == "aten::masked_fill_").sum() == 4
    backward = t[t.op == "aten::_softmax_backward_data"]
    assert len(backward) == 2 and all(set(d) == {"float32"} for d in backward["dtypes"])


@pytest.mark.parametrize("parallel", [("--tp", "2"), ("--pp", "2", "--global-batch", "8", "--checkpoint")])
def test_megatrons_sequence_first_layout_trains_across_tensor_and_pipeline_ranks(parallel):
    """With `--half-params` and eager attention the activations are [s, b, h] from the embedding to the loss,
    across pipeline stages too."""
    losses = _run(2, *parallel, "--dtype", "bf16", "--half-params", "--attention", "eager")
    assert _near_uniform(losses[0]) and all(math.isfinite(x) for x in losses)


@pytest.mark.parametrize("micro", [1, 2])  # 2 x 4 rows of heads: the fused softmax; 1 x 4: Megatron's fp32 one
def test_megatrons_core_attention_is_causal_attention_over_its_qkv_layout(micro):
    """`core_attention` on [s, b, h] is plain causal attention of the heads its QKV output holds ([heads,
    3 x head_dim] per token), whichever softmax the shape takes (the layer-number scaling cancels)."""
    import argparse

    import torch

    prog = _program_module()
    a = argparse.Namespace(heads=4, hidden=32, layers=2, dropout=0.0, attention="eager", dtype="bf16", seq=32,
                           seq_first=True)
    attn = prog.Attention(a, None, 1, layer_number=3).double()
    x = torch.randn(a.seq, micro, a.hidden, dtype=torch.float64)
    heads = attn.qkv(x).view(a.seq, micro, 4, 3, 8)
    q, k, v = (heads[:, :, :, i].permute(1, 2, 0, 3) for i in range(3))  # [b, heads, s, head_dim]
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = ref.permute(2, 0, 1, 3).reshape(a.seq, micro, -1)
    assert prog.fused_softmax_fits(4 * micro, a.seq, a.seq) is (micro == 2)
    assert torch.allclose(attn.core_attention(x, 0.0), ref)



def test_with_tp_a_pipeline_sends_each_ranks_share_and_the_receiver_gathers_it(tmp_path):
    """Megatron-DeepSpeed's pipeline (and DeepSpeed's engine) send 1/TP of an activation or gradient per TP rank
    and all-gather the pieces after the receive: the same training as whole sends (the same losses), a TP-th of
    the bytes between stages, and one all-gather inside the TP group per receive."""
    from emulator.launch.emulate import run_emulation
    from emulator.trace.io import read_rank_trace

    tp_pp = ["--tp", "2", "--pp", "2", "--global-batch", "8", "--checkpoint", "--dtype", "bf16", "--half-params",
             "--attention", "eager"]
    assert _run(4, *tp_pp) == _run(4, *tp_pp, "--no-scatter-gather")
    hidden, micro, seq = 64, 2, 32
    s = run_emulation(script=str(PROGRAM), module=None, gpu="a100-80gb", nproc_per_node=4, nnodes=1, iterations=2,
                      out=tmp_path, dedup=True,
                      argv=[*TINY[:-2], "--steps", "3", "--micro-batch", str(micro), *tp_pp])
    assert s.ok, s.error
    t = read_rank_trace(tmp_path, 3).to_pandas()  # a TP rank of the second stage
    t = t[t.iteration == t.iteration.max()]
    p2p = t[t.kind == "p2p"]
    assert len(p2p) > 0 and (p2p.coll_bytes == micro * seq * hidden * 2 // 2).all()
    gathers = t[(t.kind == "collective") & t.op.str.contains("allgather")]
    assert len(gathers) == (p2p.op.str.contains("recv")).sum()


def test_the_last_pipeline_stage_keeps_each_micro_batchs_loss_not_its_logits(tmp_path):
    """Megatron computes each micro-batch's loss on the last stage and lets its logits go; torch's schedule,
    asked for outputs, keeps every micro-batch's logits to the end of the step and concatenates them (a
    39.1B layout of the search evaluation ran out of memory on that copy). So the last stage's peak must not
    grow with the micro-batches by their logits."""
    from emulator.launch.emulate import run_emulation

    vocab, seq, micro = 16384, 32, 1
    logits_bytes = micro * seq * vocab * 2  # bf16 logits of one micro-batch
    peaks = []
    for global_batch in (4, 16):
        out = tmp_path / str(global_batch)
        s = run_emulation(script=str(PROGRAM), module=None, gpu="a100-80gb", nproc_per_node=2, nnodes=1,
                          iterations=2, out=out, dedup=True,
                          argv=["--layers", "2", "--hidden", "64", "--heads", "4", "--seq", str(seq), "--vocab",
                                str(vocab), "--pp", "2", "--micro-batch", str(micro), "--global-batch",
                                str(global_batch), "--dtype", "bf16", "--half-params", "--checkpoint", "--steps", "3"])
        assert s.ok, s.error
        peaks.append(s.peak_allocated_bytes["1"])  # the last stage
    # kept logits and their concatenation grew it by about 20 x logits_bytes (tried without return_outputs=False)
    assert peaks[1] - peaks[0] < 2 * logits_bytes, (peaks, logits_bytes)
