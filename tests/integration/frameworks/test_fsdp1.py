"""FSDP1 (`FullyShardedDataParallel`, the wrapper HF Accelerate, Lightning and Composer use by default) on a
4-layer GPT auto-wrapped per block, bf16 MixedPrecision, world 2, as the PyTorch FSDP tutorial writes it.

What a user expects to see: one all-gather per FSDP unit in forward (4 blocks + the root) and one per
block again in backward (FULL_SHARD re-gathers what forward freed; the root stays unsharded), one
reduce-scatter per unit, the gathers on FSDP's unshard stream and the reduce-scatters on its
post-backward stream, both off the compute stream.
"""

import pytest

from tests.integration.frameworks.run import cached_runs, ok, simulate

LAYERS = 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return cached_runs(tmp_path_factory, "fsdp1.py", "--steps", "3")


def _collectives(t):
    c = t[t.kind == "collective"]
    return {op: (len(g), set(g.stream)) for op, g in c.groupby("op")}


def test_full_shard_gathers_per_layer_and_reduce_scatters_on_side_streams(runs):
    run = runs()
    assert run.rc == 0 and run.summary["ok"], ok(run)
    c = _collectives(run.steady())
    n_ag, ag_streams = c["c10d::_allgather_base_"]
    n_rs, rs_streams = c["c10d::_reduce_scatter_base_"]
    assert n_ag == 2 * LAYERS + 1 and n_rs == LAYERS + 1
    assert 0 not in ag_streams | rs_streams and not ag_streams & rs_streams
    pred = simulate(run.out)
    assert pred["iteration_time_s"] > 0 and pred["breakdown_s"]["communication"] > 0


@pytest.mark.parametrize("strategy, gathers, grads", [
    ("SHARD_GRAD_OP", LAYERS + 1, "c10d::_reduce_scatter_base_"),  # parameters stay gathered for backward
    ("NO_SHARD", 0, "c10d::allreduce_"),  # DDP-like: gradients all-reduced
    ("HYBRID_SHARD", 2 * LAYERS + 1, "c10d::_reduce_scatter_base_"),  # shards inside the (only) node
])
def test_sharding_strategies(runs, strategy, gathers, grads):
    run = runs("--strategy", strategy)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    c = _collectives(run.steady())
    assert c.get("c10d::_allgather_base_", (0, set()))[0] == gathers
    assert c[grads][0] >= LAYERS + 1


def test_flat_parameters_without_orig_params(runs):
    run = runs("--orig-params", "0")
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert _collectives(run.steady())["c10d::_allgather_base_"][0] == 2 * LAYERS + 1


def test_cpu_offload_runs_the_optimizer_on_the_host(runs):
    run = runs("--offload")
    assert run.rc == 0 and run.summary["ok"], ok(run)
    t = run.steady()
    host = t[t.kind == "host_op"]
    assert (host.phase == "optimizer").sum() > 0  # AdamW on the offloaded parameters, on the CPU
    assert not (t[t.kind == "kernel"].phase == "optimizer").any()
    assert {"memcpy::h2d", "memcpy::d2h"} <= set(t[t.kind == "memcpy"].op)  # parameters in, gradients out
    pred = simulate(run.out)
    assert pred["breakdown_s"]["host"] > pred["breakdown_s"]["compute"]


def test_activation_checkpointing_recomputes_blocks_in_backward(runs):
    plain, ac = runs(), runs("--ac")
    assert ac.rc == 0 and ac.summary["ok"], ok(ac)

    def recomputed(run):
        t = run.steady()
        k = t[(t.kind == "kernel") & (t.phase == "backward")]
        return (k.op == "aten::_scaled_dot_product_flash_attention").sum()

    assert recomputed(plain) == 0 and recomputed(ac) == LAYERS
