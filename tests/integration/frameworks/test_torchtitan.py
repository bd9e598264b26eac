"""torchtitan (the pinned 0.2.2 wheel, unmodified) trains under `maya emulate -m torchtitan.train` on 2 ranks.

torchtitan 0.2.2 is the release that runs on the torch pin: 0.3.0 calls `torch.distributed.set_timeout`
(public from torch 2.14) and eagerly imports torchao's Triton kernels, one of which Triton 3.9 rejects;
`make test-torch-next` runs 0.3.0 beside torch 2.14.1 (`torch_next/test_torchtitan_030.py`).
Its defaults are the llama3 debug model (6 layers, SDPA, seq 2048, local batch 8), selective activation
checkpointing of every second block and FSDP over every rank (dp_shard -1); it reads its tokenizer and
the `c4_test` dataset from `./tests/assets`, which `examples/third_party/torchtitan_assets.py` writes
offline. The MoE debug models (Qwen3 `debugmodel_moe`: 8 MoE layers, 64 experts, top-8; DeepSeek-V3
`debugmodel`: 6 layers of which 5 MoE, 8 experts, top-3) run with expert parallelism over both ranks:
histc token counts, an all-to-all of the counts, `.tolist()` split sizes, a Triton index kernel, grouped
GEMMs, and all-to-all dispatch and combine.
"""

import json
import subprocess
import sys

import pytest

from tests.integration.frameworks.run import emulate_module, ok, simulate
from tests.paths import REPO

pytest.importorskip("torchtitan")

TOKENS = 8 * 2048  # per rank: torchtitan's default local batch and sequence length
LLAMA_LAYERS = 6
QWEN_MOE_LAYERS, QWEN_TOP_K = 8, 8
DEEPSEEK_MOE_LAYERS, DEEPSEEK_TOP_K = 5, 3
EP = ("--parallelism.expert_parallel_degree", "2")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("torchtitan")
    subprocess.run([sys.executable, str(REPO / "examples" / "third_party" / "torchtitan_assets.py"), str(root)],
                   check=True, capture_output=True)
    return root


@pytest.fixture(scope="module")
def runs(assets, tmp_path_factory):
    """`get(*args)`: `maya emulate --nproc-per-node 2 --iterations 2 -m torchtitan.train ARGS`, once per ARGS."""
    cache = {}

    def get(*args: str, flags: tuple[str, ...] = ()):
        key = (args, flags)
        if key not in cache:
            out = tmp_path_factory.mktemp("titan-out")
            cache[key] = emulate_module("torchtitan.train", out, *args, cwd=assets, nproc=2,
                                        flags=("--iterations", "2", *flags))
        return cache[key]

    return get


def _last_step(run, rank=0):
    t = run.trace(rank)
    return t[t.iteration == t.iteration.max()]


def _collectives(t, name):
    return t[(t.kind == "collective") & (t.op == name)]


def test_llama3_defaults_shard_over_both_ranks_and_complete(runs):
    run = runs()
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert run.summary["iterations_found"] == 2 and run.summary["unsupported_ops"] == {}
    log = run.log(0)
    assert "dp_shard=2" in log and "Applied FSDP to the model" in log
    step = _last_step(run)
    # FSDP2 units: the embedding, each block, and norm + output. Forward gathers every unit; backward
    # gathers all but the last (not resharded after forward) and reduce-scatters every unit's gradients,
    # the gathers on one side stream, the reduce-scatters on another
    units = LLAMA_LAYERS + 2
    gathers, scatters = _collectives(step, "c10d::_allgather_base_"), _collectives(step, "c10d::_reduce_scatter_base_")
    assert (gathers.phase == "forward").sum() == units and (gathers.phase == "backward").sum() == units - 1
    assert len(scatters) == units and set(scatters.phase) == {"backward"}
    assert len(set(gathers.stream)) == 1 and len(set(scatters.stream)) == 1
    assert 0 not in set(gathers.stream) | set(scatters.stream) and set(gathers.stream) != set(scatters.stream)
    assert all(list(g) == [0, 1] for g in [*gathers.group_ranks, *scatters.group_ranks])


FUSED_SDPA = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_cudnn_attention")


def test_llama3_kernel_mix_is_fused_attention_with_every_second_block_recomputed(runs):
    run = runs()
    step = _last_step(run)
    kernels = step[step.kind == "kernel"]
    # torchtitan allows SDPA cuDNN, flash or math (in that order): on an H100 a fused kernel, one per block
    # (the emulator's chooser takes flash today); selective AC ("2") recomputes every second block in backward
    fused = kernels[kernels.op.isin(FUSED_SDPA)]
    assert (fused.phase == "forward").sum() == LLAMA_LAYERS
    assert (fused.phase == "backward").sum() == LLAMA_LAYERS // 2
    assert kernels.op.isin([f"{op}_backward" for op in FUSED_SDPA]).sum() == LLAMA_LAYERS
    assert not kernels.op.isin(["aten::_safe_softmax", "aten::bmm"]).any()  # no math-path attention
    assert (kernels.op == "aten::_fused_adamw_").sum() == 1  # torchtitan's AdamW default: fused
    # both ranks did the same work (the same kernels, in order)
    other = _last_step(run, 1)
    assert list(other[other.kind == "kernel"].op) == list(kernels.op)


def test_llama3_prediction_is_a_step_time(runs):
    pred = simulate(runs().out)
    assert pred["hang"] is None and pred["iteration_time_s"] > 0 and pred["mfu"] > 0


@pytest.mark.parametrize(("ac", "recomputed"), [
    ((), LLAMA_LAYERS // 2),  # the default: every second block checkpointed whole
    (("--activation_checkpoint.selective_ac_option", "op"), 0),  # per-op SAC: the region does not run again
], ids=["every_second_block", "per_op_sac"])
def test_compiled_flex_attention_runs_inductors_kernels_and_recomputes_as_checkpointing_says(runs, ac, recomputed):
    # torchtitan compiles flex_attention with `wrap_inductor_compiled_regions` (one inductor_compiled_code op,
    # in its SAC save list): the region's Triton template kernels are the rows, not an eager flex op
    run = runs("--model.flavor", "debugmodel_flex_attn", *ac)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert run.summary["compiled"].get("torch.compile", 0) >= 1 and run.summary["eager_fallbacks"] == {}
    step = _last_step(run)
    kernels = step[step.kind == "kernel"]
    assert not kernels.op.str.startswith("aten::flex_attention").any()
    templates = kernels[kernels.op == "triton::template"]
    names = templates.args.map(lambda a: json.loads(a)["kernel"])
    forward = templates[names.str.contains("flex_attention") & ~names.str.contains("backward")]
    assert (forward.phase == "forward").sum() == LLAMA_LAYERS
    assert (forward.phase == "backward").sum() == recomputed
    assert names.str.contains("flex_attention_backward").sum() == LLAMA_LAYERS


def _token_all_to_alls(t):
    """(phase, input splits, output splits) of each all-to-all that moves tokens, and how many all-to-alls
    in forward exchanged the int64 token counts per expert instead."""
    a = _collectives(t, "_c10d_functional::all_to_all_single")
    is_count = a["dtypes"].map(lambda d: list(d) == ["int64"])
    counts, tokens = a[is_count], a[~is_count]
    return ([(p, json.loads(s)["input_split_sizes"], json.loads(s)["output_split_sizes"])
             for p, s in zip(tokens.phase, tokens.args, strict=True)], int((counts.phase == "forward").sum()))


@pytest.mark.parametrize(("model", "layers", "top_k"), [
    (("--model.name", "qwen3", "--model.flavor", "debugmodel_moe"), QWEN_MOE_LAYERS, QWEN_TOP_K),
    (("--model.name", "deepseek_v3", "--model.flavor", "debugmodel"), DEEPSEEK_MOE_LAYERS, DEEPSEEK_TOP_K),
], ids=["qwen3_moe", "deepseek_v3"])
def test_moe_debug_models_dispatch_tokens_with_all_to_alls(runs, model, layers, top_k):
    run = runs(*model, *EP)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert run.summary["routing"] == "balanced" and run.summary["unsupported_ops"] == {}
    log = run.log(0)
    assert "ep=2" in log
    step = _last_step(run)
    tokens, counts = _token_all_to_alls(step)
    forward = [r for r in tokens if r[0] == "forward"]
    # per MoE layer in forward: the token counts, then the tokens out (dispatch) and back (combine)
    assert counts == layers and len(forward) == 2 * layers
    half = TOKENS * top_k // 2  # balanced routing: each rank's experts get half of the T*k choices
    assert all(r[1] == [half, half] and r[2] == [half, half] for r in tokens)
    assert any(r[0] == "backward" for r in tokens)
    assert _token_all_to_alls(_last_step(run, 1)) == (tokens, counts)
    kernels = step[step.kind == "kernel"]
    assert (kernels[kernels.phase == "forward"].op == "aten::_grouped_mm").sum() == 3 * layers  # w1, w3, w2
    # torchtitan's Triton kernel that lays tokens out by expert: one row per MoE layer's dispatch
    index = kernels[kernels.op == "triton::user"]
    assert (index.phase == "forward").sum() == layers
    assert {json.loads(a)["kernel"] for a in index.args} == {"_fill_indices_kernel"}


def test_skewed_routing_sends_uneven_amounts_that_the_ranks_agree_on(runs):
    run = runs("--model.name", "deepseek_v3", "--model.flavor", "debugmodel", *EP, flags=("--routing", "zipf:1.2"))
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert run.summary["routing"] == "zipf:1.2"
    r0, _ = _token_all_to_alls(_last_step(run, 0))
    r1, _ = _token_all_to_alls(_last_step(run, 1))
    assert any(r[1][0] != r[1][1] for r in r0)  # hot experts: one rank's experts get more tokens
    for (_, in0, out0), (_, in1, out1) in zip(r0, r1, strict=True):
        assert out0[1] == in1[0] and out1[0] == in0[1]  # what one rank receives is what the other sends
    pred = simulate(run.out)
    assert pred["hang"] is None and pred["routing"] == "zipf:1.2" and pred["iteration_time_s"] > 0
