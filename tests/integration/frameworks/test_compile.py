"""torch.compile of a 4-layer GPT (bf16 autocast, fused AdamW), the way nanoGPT compiles: Inductor plans the
kernels a GPU would run; each generated Triton kernel is one `triton::<kind>` row."""

import json
from collections import Counter
from pathlib import Path

import pytest

from pipelines.validation.generated_kernels import DRIVER, compiled_call
from tests.integration.frameworks.run import emulate, ok, simulate

pytest.importorskip("triton")


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    return emulate("compiled_gpt.py", tmp_path_factory.mktemp("eager"), "--eager")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return emulate("compiled_gpt.py", tmp_path_factory.mktemp("compiled"))


def _kernels(run):
    t = run.steady()
    return t[t.kind == "kernel"]


def test_compile_fuses_elementwise_and_norms_into_fewer_generated_kernels(eager, compiled):
    assert eager.rc == 0 and compiled.rc == 0, ok(compiled)
    e, c = _kernels(eager), _kernels(compiled)
    assert len(c) < 0.9 * len(e)
    assert not c.op.isin(["aten::native_layer_norm", "aten::gelu", "aten::native_layer_norm_backward"]).any()
    generated = c[c.op.str.startswith("triton::")]
    assert {"triton::pointwise", "triton::persistent_reduction"} <= set(generated.op)
    # GEMMs and attention stay extern kernels, as Inductor leaves them to cuBLAS and flash attention
    assert (c.op == "aten::mm").sum() == (e.op == "aten::mm").sum()
    assert (c.op == "aten::_scaled_dot_product_flash_attention").sum() == 4


def test_generated_kernel_rows_carry_inductors_bytes_and_body_features(compiled):
    g = _kernels(compiled)
    g = g[g.op.str.startswith("triton::")]
    assert (g.bytes > 0).all() and (g.flops > 0).all()
    args = [json.loads(a) for a in g.args]
    assert all({"kernel", "numel", "rnumel", "loads", "stores", "arith", "transcendental"} <= set(a) for a in args)
    norms = [a for a, op in zip(args, g.op, strict=True) if op == "triton::persistent_reduction"]
    assert all(a["rnumel"] > 1 and a["reductions"] > 0 for a in norms)
    assert compiled.summary["eager_fallbacks"] == {}
    pred = simulate(compiled.out)
    assert pred["iteration_time_s"] > 0


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graph_modes_replay_the_compiled_graphs_with_one_launch_each(tmp_path, compiled, mode):
    run = emulate("compiled_gpt.py", tmp_path / mode, "--mode", mode)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert run.summary["compiled"][f"mode={mode}"] == 1
    k, plain = _kernels(run), _kernels(compiled)
    replayed = k[k.graph_replay.notna()]
    # forward and backward are one captured graph each, replayed once per step, with Inductor's plan inside
    assert replayed.graph_replay.nunique() == 2
    outside = {"aten::randint", "aten::ones_like", "aten::_foreach_add_", "aten::_fused_adamw_"}  # eager code
    assert Counter(replayed.op) == Counter(plain[~plain.op.isin(outside)].op)
    # one host call per replay: no kernel after a replay's first carries a gap of its own
    first = replayed.groupby("graph_replay").head(1).index
    assert (replayed.drop(index=first).host_gap_s == 0).all()
    # the host launches a step's work in a handful of calls: the two replays and the eager code around them
    # (counted, not read from the host gaps, whose zero/non-zero split moves with this machine's speed)
    launches = replayed.graph_replay.nunique() + k.graph_replay.isna().sum()
    assert launches < 0.1 * len(plain)
    # only the batch and the loss's gradient are copied into the graphs' static inputs (a tree keeps the saved
    # activations in its pool and hands the gradients to autograd without a clone per parameter)
    copies = k[(k.op == "aten::copy_") & k.graph_replay.isna()]
    assert len(copies) == 3, copies[["shapes", "dtypes"]]
    pred = simulate(run.out)
    assert pred["iteration_time_s"] > 0


def test_a_ready_compile_worker_pool_leaves_every_compile_in_process(tmp_path, compiled):
    # Inductor sends kernels to its worker processes once their pool is ready (soon after start on a machine
    # with cores to spare); the emulated GPU exists only in the emulating process, and the backward graph
    # compiles at the first backward call, outside the forward's compile
    run = emulate("compiled_gpt.py", tmp_path / "pool", "--ready-compile-pool")
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert len(_kernels(run)) == len(_kernels(compiled))


def test_a_head_no_alignment_divides_compiles_unpadded_without_timing_on_a_device(tmp_path):
    """GPT-2's vocabulary (50257): Inductor's pad_mm pass would time the head's GEMMs padded and unpadded on real
    device tensors to choose (before: the run stopped in a CUDA-backend error); the unpadded plan stands."""
    run = emulate("compiled_gpt.py", tmp_path / "gpt2_vocab", "--vocab", "50257")
    assert run.rc == 0 and run.summary["ok"], ok(run)
    mm = _kernels(run)
    head = [s for s in mm[mm.op == "aten::mm"].shapes if any(50257 in list(d) for d in s)]
    assert len(head) == 3  # the head's forward and its two gradient GEMMs, at the vocabulary's own width


WIDE_SOFTMAX = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(4096, 65536)]


def get_init_inputs():
    return []
"""


def test_a_softmax_too_wide_for_one_block_moves_its_rows_once_per_pass(tmp_path):
    """Inductor loops over each 65,536-wide row twice (running max and sum, then normalise), loading it each
    time; the row's bytes say so, where Inductor's own count reads the input once."""
    problem = tmp_path / "wide_softmax.py"
    problem.write_text(WIDE_SOFTMAX)
    run = emulate(str(DRIVER), tmp_path / "out", str(problem))
    assert run.rc == 0 and run.summary["ok"], ok(run)
    k = compiled_call(Path(run.out))
    assert list(k.op) == ["triton::reduction"]
    args, rows = json.loads(k.args[0]), 4096 * 65536 * 4
    assert args["passes"] == 2 and args["reread_bytes"] == rows
    assert k.bytes[0] == pytest.approx(3 * rows, rel=0.01)  # read, read again, write
