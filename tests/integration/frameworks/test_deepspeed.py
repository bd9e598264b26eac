"""DeepSpeed ZeRO on a 4-layer GPT, bf16, AdamW and gradient clipping from the JSON config, world 2, the way
DeepSpeed's tutorials write it (`deepspeed.initialize`, `engine.backward`, `engine.step`). DeepSpeed's
fused CUDA ops cannot be built here: the emulator hands out torch stand-ins (torch._fused_adamw_).
"""

import re

import pytest

from tests.integration.frameworks.run import cached_runs, ok, simulate

pytest.importorskip("deepspeed")
LAYERS = 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return cached_runs(tmp_path_factory, "deepspeed_zero.py", "--steps", "3")


def _gathered_layers(t, phase):
    ag = t[(t.kind == "collective") & (t.op == "c10d::_allgather_base_") & (t.phase == phase)]
    return {int(m.group(1)) for m in (re.search(r"\.blocks\.(\d+)", x) for x in ag.module) if m}


def test_zero3_gathers_parameters_per_layer_in_forward_and_backward(runs):
    run = runs("--stage", "3", "--no-prefetch")
    assert run.rc == 0 and run.summary["ok"], ok(run)
    t = run.steady()
    assert _gathered_layers(t, "forward") == set(range(LAYERS))
    assert _gathered_layers(t, "backward") == set(range(LAYERS))  # released after forward, fetched again
    rs = t[(t.kind == "collective") & (t.op == "c10d::_reduce_scatter_base_")]
    assert (rs.phase == "backward").sum() >= LAYERS  # gradient buckets
    assert (t[t.phase == "optimizer"].op == "aten::_fused_adamw_").any()  # the FusedAdam stand-in
    assert run.summary["unsupported_ops"] == {}


def test_zero3_with_prefetch_gathers_in_buckets_and_predicts(runs):
    run = runs("--stage", "3")
    assert run.rc == 0 and run.summary["ok"], ok(run)
    t = run.steady()
    ag = t[(t.kind == "collective") & (t.op == "c10d::_allgather_base_")]
    assert 0 < (ag.phase == "forward").sum() < 19  # buckets of several modules' parameters
    assert (t.kind == "marker").sum() < 1000  # NVTX ranges around host code only are dropped
    pred = simulate(run.out)
    assert pred["iteration_time_s"] > 0 and pred["breakdown_s"]["communication"] > 0


def test_zero3_parameter_offload_copies_partitions_in_from_the_host(runs):
    """`offload_param` with `offload_optimizer` (ZeRO-Infinity's CPU pairing): each rank's parameter partition
    lives in host memory, so every fetch copies it to the device before its all-gather, and the update runs on
    the host; the copies are device time in the prediction."""
    run = runs("--stage", "3", "--offload", "--offload-param")
    assert run.rc == 0 and run.summary["ok"], ok(run)
    t = run.steady()
    on_device = runs("--stage", "3").steady()
    fetched = t[(t.kind == "memcpy") & (t.op == "memcpy::h2d") & (t.phase == "forward")]
    assert not ((on_device.kind == "memcpy") & (on_device.phase == "forward")).any()
    assert fetched.bytes.sum() > 0 and fetched.module.str.contains(r"\.blocks\.").any()
    assert (t[(t.kind == "collective") & (t.phase == "forward")].op == "c10d::_allgather_base_").any()
    assert not ((t.kind == "kernel") & (t.phase == "optimizer")).any()  # the step ran on the host
    assert t[(t.op == "memcpy::d2h") & (t.phase == "backward")].bytes.sum() > 0  # gradients out to the host
    pred = simulate(run.out)
    assert pred["device_time_by_family"]["memcpy"]["device_s"] > 0


@pytest.mark.parametrize("stage", ["1", "2"])
def test_zero12_reduce_gradients_and_gather_updated_parameters(runs, stage):
    run = runs("--stage", stage)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    t = run.steady()
    c = t[t.kind == "collective"]
    assert not ((c.phase == "forward") & (c.op == "c10d::_allgather_base_")).any()  # parameters are replicated
    grads = c[c.op.isin(["c10d::allreduce_", "c10d::_reduce_scatter_base_", "c10d::reduce_"])]
    assert len(grads) >= 2
    assert (c.op == "c10d::_allgather_base_").any()  # each rank's updated partition, after the step


def test_zero2_optimizer_offload_with_overlap(runs):
    run = runs("--stage", "2", "--offload", "--overlap")
    assert run.rc == 0 and run.summary["ok"], ok(run)
    t = run.steady()
    c = t[t.kind == "collective"]
    assert (c.stream != 0).any()  # overlap_comm: gradient reduction on DeepSpeed's side stream
    memcpy = set(t[t.kind == "memcpy"].op)
    assert {"memcpy::d2h", "memcpy::h2d"} <= memcpy  # gradients to the host, parameters back
