"""megatron-core (local PyTorch layer specs, no Transformer Engine) the way its quickstart trains a GPT: TP,
PP with the 1F1B and interleaved schedules, sequence parallelism, and the distributed optimizer, world 2,
bf16 (Float16Module). Sequence parallelism needs Apex's fused layer norm, a CUDA build: the emulator
gives megatron-core a torch stand-in (`emulator.capture.apex_standin`)."""

import pytest

from tests.integration.frameworks.run import emulate, ok, simulate

pytest.importorskip("megatron.core")
LAYERS, MICRO_BATCHES = 4, 4


def _run(tmp_path, *args):
    run = emulate("megatron_gpt.py", tmp_path / "out", *args, nproc=2)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    pred = simulate(run.out)
    assert pred["hang"] is None and pred["iteration_time_s"] > 0
    return run


def _count(t, op):
    return int((t.op == op).sum())


def test_tensor_parallel_all_reduces_twice_per_layer_and_pass(tmp_path):
    t = _run(tmp_path, "--tp", "2").steady()
    # row-parallel attention output and MLP output in forward, their column-parallel inputs in backward
    assert _count(t[t.phase == "forward"], "c10d::allreduce_") >= 2 * LAYERS * MICRO_BATCHES
    assert _count(t[t.phase == "backward"], "c10d::allreduce_") >= 2 * LAYERS * MICRO_BATCHES


def test_sequence_parallel_gathers_and_reduce_scatters_activations_and_runs_apex_layer_norm(tmp_path):
    run = _run(tmp_path, "--tp", "2", "--sequence-parallel")
    assert "megatron-core's FusedLayerNorm runs as torch's layer_norm" in run.log(0)
    t = run.steady()
    fwd, bwd = t[t.phase == "forward"], t[t.phase == "backward"]
    # each layer's attention and MLP: all-gather the sequence shards in, reduce-scatter the output back
    assert _count(fwd, "c10d::_allgather_base_") >= 2 * LAYERS * MICRO_BATCHES
    assert _count(fwd, "c10d::_reduce_scatter_base_") >= 2 * LAYERS * MICRO_BATCHES
    assert _count(bwd, "c10d::_reduce_scatter_base_") >= LAYERS * MICRO_BATCHES
    # Apex's FusedLayerNorm: one kernel each way for the two norms of every layer and the final one
    norms = (2 * LAYERS + 1) * MICRO_BATCHES
    assert _count(fwd, "aten::native_layer_norm") == _count(bwd, "aten::native_layer_norm_backward") == norms


@pytest.mark.parametrize("vpp, messages", [(None, MICRO_BATCHES), ("2", 3 * MICRO_BATCHES)])
def test_pipeline_schedules_send_activations_and_receive_gradients(tmp_path, vpp, messages):
    run = _run(tmp_path, "--pp", "2", *(("--vpp", vpp) if vpp else ()))
    first, last = run.steady(0), run.steady(1)
    # 1F1B: stage 0 sends one activation and receives one gradient per micro-batch; interleaved with two
    # chunks per stage: three stage boundaries for each micro-batch to cross, both ways
    assert _count(first, "c10d::send") == _count(first, "c10d::recv_") == messages
    assert _count(last, "c10d::recv_") == _count(last, "c10d::send") == messages


def test_distributed_optimizer_reduce_scatters_gradients_and_gathers_parameters(tmp_path):
    t = _run(tmp_path, "--distributed-optimizer").steady()
    assert _count(t, "c10d::reduce_scatter_tensor_coalesced_") == 1  # one gradient bucket
    assert _count(t, "c10d::allgather_into_tensor_coalesced_") == 1  # the updated parameter shards
    # without Apex megatron-core steps a torch AdamW (foreach) over each rank's fp32 main-parameter shard
    assert _count(t[t.phase == "optimizer"], "aten::_foreach_addcdiv_") > 0


def test_validation_program_runs_megatrons_fused_softmax_once_each_way_on_a_vtrain_command_line(tmp_path):
    """`examples/validation/megatron_core_gpt.py`, with the command line `make validate` gives a vTrain row
    (fp16 model with fp32 main weights, full recomputation, 1F1B over 2 stages): Megatron's default
    masked-softmax fusion is one kernel forward (again when the layer is recomputed) and one backward; the
    optimizer is one fused Adam kernel a step (Megatron with Apex's FusedAdam), not torch's foreach passes,
    and gradient clipping takes Apex's multi-tensor norm (`emulator.capture.apex_standin`)."""
    from pipelines.validation.holdout import REPO_ROOT, VTRAIN_ADAM, _program_args

    model = dict(layers=4, hidden=256, heads=8, seq=128, vocab=1000)
    par = dict(tp=1, pp=2, micro_batch=2, global_batch=8)
    args = _program_args(model, par, "fp16", True, "eager", 128, half_params=True) + VTRAIN_ADAM
    run = emulate(str(REPO_ROOT / "examples/validation/megatron_core_gpt.py"), tmp_path / "out", *args, "--steps", "3",
                  nproc=2)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert "Megatron's fused softmax extensions are not built here" in run.log(0)
    per_stage = model["layers"] // par["pp"] * (par["global_batch"] // par["micro_batch"])
    for rank in (0, 1):
        t = run.steady(rank)
        fwd, bwd = t[t.phase == "forward"], t[t.phase == "backward"]
        assert _count(fwd, "aten::_masked_softmax") == _count(bwd, "aten::_masked_softmax") == per_stage
        assert _count(bwd, "aten::_softmax_backward_data") == per_stage
        assert _count(t, "aten::masked_fill") == _count(t, "aten::_softmax") == 0  # not torch's 4-kernel fallback
        # one per parameter group (Megatron's with and without weight decay), as Apex's FusedAdam launches
        assert _count(t, "aten::_fused_adamw_") == 2 and _count(t, "aten::_foreach_lerp_") == 0
        # gradient clipping's norm as Apex's amp_C computes it (one multi-tensor launch, then the norm of the
        # norms), not a norm per parameter
        assert _count(t, "aten::_foreach_norm") == 1 and _count(t, "aten::linalg_vector_norm") == 1
    assert simulate(run.out)["hang"] is None
