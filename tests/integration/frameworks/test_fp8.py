"""FP8 training with torchao (`convert_to_float8_training`, tensorwise and rowwise recipes) on an emulated H100:
the Float8Linear GEMMs are `aten::_scaled_mm` rows on float8 operands, with the amax/scale/cast ops around
them, eagerly and under torch.compile (where Inductor calls `_scaled_mm` with `out=`)."""

import json

import pytest

from tests.integration.frameworks.run import emulate, ok, simulate

pytest.importorskip("torchao.float8")


@pytest.fixture(scope="module")
def tensorwise(tmp_path_factory):
    return emulate("fp8_train.py", tmp_path_factory.mktemp("tensorwise"), "--recipe", "tensorwise")


@pytest.fixture(scope="module")
def rowwise(tmp_path_factory):
    return emulate("fp8_train.py", tmp_path_factory.mktemp("rowwise"), "--recipe", "rowwise")


def _kernels(run):
    t = run.steady()
    return t[t.kind == "kernel"]


def _scaled_mm(run):
    k = _kernels(run)
    return k[k.op == "aten::_scaled_mm"]


# 4 blocks x 4 converted linears (qkv, proj, up, down; the output head stays bf16) x 3 GEMMs (forward,
# grad input, grad weight)
FP8_GEMMS = 4 * 4 * 3


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_each_recipe_emulates_with_fp8_gemms_and_their_scaling(request, recipe):
    run = request.getfixturevalue(recipe)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert run.summary["unsupported_ops"] == {}
    mm = _scaled_mm(run)
    assert len(mm) == FP8_GEMMS
    for dtypes, out_dtypes in zip(mm["dtypes"], mm["out_dtypes"], strict=True):
        assert all(d.startswith("float8_") for d in list(dtypes)[:2])
        assert list(dtypes)[2:4] == ["float32", "float32"]  # the scales
        assert list(out_dtypes) == ["bfloat16"]
    assert "float8_e4m3fn" in {list(d)[0] for d in mm["dtypes"]}
    assert (mm.flops > 0).all() and (mm.bytes > 0).all()
    ops = set(_kernels(run).op)
    assert {"aten::abs", "aten::reciprocal", "aten::clamp", "aten::_to_copy"} <= ops  # amax, scale, cast
    assert "aten::amax" in ops if recipe == "rowwise" else "aten::max" in ops
    # the unconverted output head is the only bf16 GEMM: one forward and two backward
    assert (_kernels(run).op == "aten::mm").sum() == 3


def test_rowwise_scales_are_one_per_row_and_column(rowwise):
    mm = _scaled_mm(rowwise)
    for phase, shapes in zip(mm["phase"], mm["shapes"], strict=True):
        a, b, sa, sb = (list(s) for s in shapes[:4])
        if phase == "forward":  # the rowwise (CUTLASS) kernel with fast accumulation
            assert list(sa) == [a[0], 1] and list(sb) == [1, b[1]]
        else:
            # torchao's own choice without fast accumulation (the backward): the tensorwise kernel with unit
            # scales, and the outer product of the row scales multiplied into the output afterwards
            assert list(sa) == [] and list(sb) == []


def test_compiled_fp8_is_predicted_faster_than_the_compiled_bf16_program(tmp_path):
    fp8 = emulate("fp8_train.py", tmp_path / "fp8", "--compile")
    assert fp8.rc == 0 and fp8.summary["ok"], ok(fp8)
    assert fp8.summary["eager_fallbacks"] == {} and fp8.summary["unsupported_ops"] == {}
    assert len(_scaled_mm(fp8)) == FP8_GEMMS  # Inductor's extern `_scaled_mm(..., out=buf)` calls
    generated = _kernels(fp8)[_kernels(fp8).op.str.startswith("triton::")]
    assert len(generated) > 0 and all("kernel" in json.loads(a) for a in generated.args)  # fused casts
    bf16 = emulate("fp8_train.py", tmp_path / "bf16", "--compile", "--no-fp8")
    assert bf16.rc == 0 and bf16.summary["ok"], ok(bf16)
    assert len(_scaled_mm(bf16)) == 0
    p8, p16 = simulate(fp8.out), simulate(bf16.out)
    assert 0 < p8["iteration_time_s"] < p16["iteration_time_s"]
    assert p8["mfu_peak_dtype"].startswith("float8")
