"""Replaying recorded op signatures on the local device (trace-driven calibration)."""

import json

import torch

from emulator.core.ops import op_family
from maya_models.schema import signature_key
from maya_models.warehouse import read_measurements
from pipelines.runners import kernels
from pipelines.runners.harvest import harvest
from pipelines.runners.replay import Signature, bind, run_once, with_outputs

CPU = torch.device("cpu")


def test_overload_is_chosen_from_the_recorded_inputs():
    two_tensors = bind(Signature.make("aten::add", [[4, 4], [4, 4]], ["float32"] * 2), CPU)
    scalar = bind(Signature.make("aten::add", [[4, 4]], ["float32"], None, {"other": 2.0}), CPU)
    assert str(two_tensors.overload) == "aten.add.Tensor"
    assert str(scalar.overload) == "aten.add.Scalar"
    foreach = bind(Signature.make("aten::_foreach_mul_", [[3], [3]], ["float32"] * 2, None,
                                  {"list_lengths": [2], "scalar": 0.5}), CPU)
    assert str(foreach.overload) == "aten._foreach_mul_.Scalar" and len(foreach.args[0]) == 2


def test_inputs_have_recorded_layout_and_valid_indices():
    b = bind(Signature.make("aten::mm", [[8, 16], [16, 32]], ["bfloat16"] * 2, [[16, 1], [1, 16]]), CPU)
    x, w = b.args
    assert w.shape == (16, 32) and w.stride() == (1, 16) and w.dtype == torch.bfloat16
    emb = bind(Signature.make("aten::embedding", [[50, 8], [1000]], ["float32", "int64"]), CPU)
    idx = emb.args[1]
    assert int(idx.max()) < 50 and int(idx.min()) >= 0
    assert run_once(emb).shape == (1000, 8)


def test_harvest_keeps_timed_kernels_once(trace_dir):
    sigs = harvest([trace_dir])
    ops = [s.op for s in sigs]
    assert ops.count("aten::mm") == 1
    assert "aten::view" not in ops and "c10d::allreduce_" not in ops
    assert len(sigs) == 5 and all(s.origin == f"trace:{trace_dir.name}" for s in sigs)


def test_trace_signatures_are_measured_with_the_trace_signature_key(trace_dir, wh):
    summary = kernels.run("cpu", run_id="replay-test", root=wh, budget_s=60, traces=[trace_dir], sweep=False)
    assert summary["complete"] and summary["rows_ok"] == 4 and summary["rows_failed"] == 1
    df = read_measurements(gpu="cpu", status=None, root=wh).set_index("op")
    mm = df.loc["aten::mm"]
    # the same key a trace row of this signature gets (canonical args JSON)
    assert mm["signature"] == signature_key("aten::mm", [[64, 96], [96, 128]], ["float32"] * 2,
                                            [[96, 1], [1, 96]], json.dumps({}, separators=(",", ":")))
    assert mm["status"] == "ok" and mm["duration_s"] > 0 and mm["family"] == op_family("aten::mm")
    assert mm["threads"] == torch.get_num_threads() and mm["source"] == "maya-bench"
    flash = df.loc["aten::_scaled_dot_product_flash_attention"]
    assert flash["status"] == "failed" and "NotImplementedError" in flash["error"]
    assert df.loc["aten::_fused_adamw_"]["status"] == "ok"
    assert df.loc["aten::nll_loss_forward"]["status"] == "ok"


def test_a_designed_signature_is_measured_with_its_outputs_so_its_bytes_are_a_trace_rows():
    from emulator.core.ops import flops_and_bytes

    args = {"dim": -1, "half_to_float": False}
    designed = Signature.make("aten::_softmax", [[64, 512]], ["float32"], None, args)
    filled = with_outputs(designed)
    assert filled.out_shapes == ((64, 512),) and filled.out_dtypes == ("float32",) and filled.key == designed.key
    as_traced = flops_and_bytes("aten::_softmax", [[64, 512]], ["float32"], [[64, 512]], ["float32"], args)[1]
    as_measured = flops_and_bytes("aten::_softmax", [[64, 512]], ["float32"], [list(s) for s in filled.out_shapes],
                                  list(filled.out_dtypes), args)[1]
    assert as_measured == as_traced == 2 * 64 * 512 * 4
    # a factory's output is the size it is asked for, not its input's
    zeros = with_outputs(Signature.make("aten::new_zeros", [[256]], ["float32"], None, {"size": [128, 4]}))
    assert zeros.out_shapes == ((128, 4),)
    # an output whose size depends on the data has no meta answer: the signature stays as it was
    nonzero = Signature.make("aten::nonzero", [[16]], ["float32"])
    assert with_outputs(nonzero) is nonzero


def test_the_kernel_runner_stores_each_measured_rows_outputs(wh, monkeypatch):
    designed = [Signature.make("aten::_softmax", [[32, 256]], ["float32"], None, {"dim": -1, "half_to_float": False})]
    monkeypatch.setattr(kernels, "designed_sweep", lambda device: designed)
    summary = kernels.run("cpu", run_id="outputs-test", root=wh, budget_s=60, sweep=True)
    assert summary["complete"] and summary["rows_ok"] == 1
    row = read_measurements(gpu="cpu", root=wh).iloc[0]
    assert [list(s) for s in row["out_shapes"]] == [[32, 256]] and list(row["out_dtypes"]) == ["float32"]
