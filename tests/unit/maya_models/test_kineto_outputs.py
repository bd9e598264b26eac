"""A profiler trace records an op's inputs only; the curation infers its outputs, or the bytes are wrong."""

from __future__ import annotations

from emulator.core.hardware import get_gpu
from maya_models.features import featurize
from maya_models.reference import load_reference
from maya_models.reference.kineto import infer_outputs, signature_of


def _event(name, types, dims, concrete=None, strides=None):
    args = {"Input type": types, "Input Dims": dims}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    if strides is not None:
        args["Input Strides"] = strides
    return {"name": name, "cat": "cpu_op", "args": args}


def _outputs(e):
    sig, why = signature_of(e)
    assert sig is not None, why
    return infer_outputs(e, sig[1], sig[2], sig[3])


def test_outputs_follow_broadcasting_dtype_arguments_and_unrecorded_string_defaults():
    add = _event("aten::add", ["c10::BFloat16", "c10::BFloat16", "Scalar"], [[1, 4, 8], [4, 1]], ["", "", "1"])
    assert _outputs(add) == ([[1, 4, 8]], ["bfloat16"])
    cast = _event("aten::_to_copy", ["c10::BFloat16", "Scalar", "", "", "", "Scalar", ""],
                  [[3, 5], [], [], [], [], [], []], ["", "6", "", "", "", "False", ""])  # dtype code 6: float32
    assert _outputs(cast) == ([[3, 5]], ["float32"])
    # the profiler records gelu's `approximate` string as an empty, untyped input: its default applies
    gelu = _event("aten::gelu", ["c10::BFloat16", ""], [[2, 7], []], ["", ""])
    assert _outputs(gelu) == ([[2, 7]], ["bfloat16"])
    norm = _event("aten::native_layer_norm", ["float", "ScalarList", "float", "float", "Scalar"],
                  [[2, 3, 8], [], [8], [8], []], ["", "[8]", "", "", "1e-05"])
    assert _outputs(norm)[0] == [[2, 3, 8], [2, 3, 1], [2, 3, 1]]


def test_an_op_meta_tensors_cannot_run_has_no_outputs():
    bad = _event("aten::add", ["float", "float", "Scalar"], [[3, 4], [5, 6]], ["", "", "1"])  # not broadcastable
    assert _outputs(bad) is None


def test_committed_trace_rows_count_their_outputs_bytes():
    rows = load_reference(["kineto_in_situ"]).reset_index(drop=True)
    assert rows["out_shapes"].map(lambda s: s is not None and len(s) > 0).all()
    add = rows[(rows["op"] == "aten::add") & (rows["shapes"].map(len) == 2)].iloc[[0]]
    n = 1
    for d in add["out_shapes"].iloc[0][0]:
        n *= int(d)
    two_inputs_and_output = featurize(add, get_gpu("h100"))["bytes"].iloc[0]
    assert two_inputs_and_output >= 3 * n * 2 * 0.99  # bf16: two inputs and the output, not the inputs alone
