"""Timing conditions: sustained-clock adjustment, conditions never merged, evaluation-only rows kept out,
and a family model never trusted far past what it was trained on."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from emulator.core.hardware import get_gpu
from emulator.core.ops import flops_and_bytes
from emulator.core.roofline import kernel_time
from maya_models.features import featurize
from maya_models.kernels import FamilyModel, KernelPredictor
from maya_models.train import training_rows

H100 = get_gpu("h100")


def _mm(m, n, k, dtype="bfloat16", **extra):
    row = {"kind": "kernel", "op": "aten::mm", "shapes": [[m, k], [k, n]], "dtypes": [dtype, dtype],
           "strides": [[k, 1], [1, k]], "args": "{}", "out_shapes": [[m, n]], "out_dtypes": [dtype]}
    row.update(extra)
    return row


def _predictor(bias=0.0, max_flops=math.inf, max_bytes=math.inf):
    """A GEMM family that is the roofline x e^bias (a calibrated roofline: no trees to train)."""
    features = list(featurize(pd.DataFrame([_mm(64, 64, 64)]), H100).columns)
    p = KernelPredictor("h100", {"gemm": FamilyModel("gemm", None, features, "own", 10, bias, max_flops, max_bytes)})
    return p


def test_a_sustained_measurement_slows_compute_bound_trace_rows_by_its_ratio():
    p = _predictor()
    big = _mm(8192, 8192, 8192)
    f, b = flops_and_bytes("aten::mm", big["shapes"], big["dtypes"], big["out_shapes"], big["out_dtypes"])
    roof = kernel_time(f, b, "bfloat16", "gemm", H100)
    sustained = pd.DataFrame([{**big, "gpu": "h100", "duration_s": 1.25 * roof, "provenance": "test"}])
    table = p.calibrate_sustained(sustained)
    assert table["bfloat16"]["ratio"] == pytest.approx(1.25)
    small = _mm(16, 4096, 4096)  # memory bound: the SM clock sets only part of it
    out = p.predict(pd.DataFrame([big, small, _mm(8192, 8192, 8192, "float32")]))
    assert out.duration_s[0] == pytest.approx(1.25 * roof)
    assert out.adjustment_s[0] == pytest.approx(0.25 * roof)
    ref = p.predict(pd.DataFrame([{**small, "timing": "isolated_graph_locked"}])).duration_s[0]
    assert 1.0 < out.duration_s[1] / ref < 1.25
    assert out.adjustment_s[2] == 0.0  # fp32 runs on other units: no sustained measurement of them
    timed = p.predict(pd.DataFrame([{**big, "timing": "isolated_graph_locked"}]))  # a measurement's conditions
    assert timed.duration_s[0] == pytest.approx(roof) and timed.adjustment_s[0] == 0.0


def test_the_ratio_is_the_best_burst_throughput_over_the_sustained_best_when_bursts_are_measured():
    """MAMF's shape need not be where the bursts peak: best against best cancels shape efficiency."""
    p = _predictor()
    sustained_shape = _mm(2048, 2048, 13312)
    f, _ = flops_and_bytes("aten::mm", sustained_shape["shapes"], sustained_shape["dtypes"],
                           sustained_shape["out_shapes"], sustained_shape["out_dtypes"])
    sustained = pd.DataFrame([{**sustained_shape, "gpu": "h100", "duration_s": f / 800e12, "provenance": "test"}])
    bursts = []
    for i, tf in enumerate([400, 700, 930, 940, 950, 955, 960, 2000]):  # one absurd outlier among the best
        row = _mm(4096 + 128 * i, 4096, 8192, gpu="h100", family="gemm", timing="isolated_graph_locked")
        fl, _ = flops_and_bytes("aten::mm", row["shapes"], row["dtypes"], row["out_shapes"], row["out_dtypes"])
        bursts.append({**row, "duration_s": fl / (tf * 1e12)})
    table = p.calibrate_sustained(sustained, reference=pd.DataFrame(bursts))
    assert table["bfloat16"]["method"] == "best against best"
    assert table["bfloat16"]["best_burst_tflops"] == pytest.approx(955, rel=1e-3)  # median of the top five
    assert table["bfloat16"]["ratio"] == pytest.approx(955 / 800, rel=1e-3)
    assert table["bfloat16"]["same_shape_ratio"] is not None  # kept beside it, for comparison


def test_a_reference_already_at_sustained_speed_is_not_slowed():
    p = _predictor()
    big = _mm(8192, 8192, 8192)
    f, b = flops_and_bytes("aten::mm", big["shapes"], big["dtypes"], big["out_shapes"], big["out_dtypes"])
    p.calibrate_sustained(pd.DataFrame([{**big, "gpu": "h100", "provenance": "test",
                                         "duration_s": 0.9 * kernel_time(f, b, "bfloat16", "gemm", H100)}]))
    assert p.info["sustained"]["bfloat16"]["ratio"] == 1.0
    assert p.predict(pd.DataFrame([big])).adjustment_s[0] == 0.0


def test_a_family_model_is_not_trusted_far_past_its_training_rows():
    p = _predictor(bias=math.log(2.0), max_flops=1e9, max_bytes=1e8)
    out = p.predict(pd.DataFrame([_mm(256, 256, 256), _mm(16384, 16384, 16384)]))
    assert list(out.source) == ["learned", "fallback"]
    big = _mm(16384, 16384, 16384)
    f, b = flops_and_bytes("aten::mm", big["shapes"], big["dtypes"], big["out_shapes"], big["out_dtypes"])
    assert out.duration_s[1] == pytest.approx(kernel_time(f, b, "bfloat16", "gemm", H100))


def _measured(timing, duration, **extra):
    row = _mm(1024, 1024, 1024, status="ok", gpu="h100", source="test", signature="s1", duration_s=duration,
              timing=timing, family="gemm")
    row.update(extra)
    return row


def test_timing_conditions_never_merge_and_checks_stay_out_of_training():
    df = pd.DataFrame([_measured("isolated_graph_locked", 1e-3), _measured("isolated_graph_locked", 3e-3),
                       _measured("sustained", 2e-3), _measured("in_training", 5e-3, evaluation_only=True)])
    plain = training_rows(data=df)
    assert list(plain["timing"]) == ["isolated_graph_locked"] and plain["duration_s"][0] == pytest.approx(2e-3)
    with_sustained = training_rows(data=df, include_sustained=True)
    assert sorted(with_sustained["timing"]) == ["isolated_graph_locked", "sustained"]
    assert with_sustained.set_index("timing")["duration_s"]["sustained"] == pytest.approx(2e-3)


def test_trace_rows_are_in_situ_and_pytorchs_own_kernel():
    rows = pd.DataFrame([_mm(64, 64, 64), _mm(64, 64, 64, timing="isolated_graph_locked"),
                         _mm(64, 64, 64, timing="in_inference", implementation="trtllm_fmha")])
    X = featurize(rows, H100)
    assert list(X["in_situ"]) == [1.0, 0.0, 1.0] and list(X["impl_code"]) == [0.0, 0.0, 1.0]
    assert np.isfinite(X.to_numpy()).all()


def _ew(op, n, dtype="float32"):
    return {"kind": "kernel", "op": op, "shapes": [[n], [n]], "dtypes": [dtype, dtype], "strides": [[1], [1]],
            "args": "{}", "out_shapes": [[n]], "out_dtypes": [dtype]}


def _elementwise_model(ops, slowdown):
    """An elementwise family fitted, with its generic trees, to rows `slowdown` x the roofline (fixture rows:
    what the trees learn is not the point, only which rows they are trusted on)."""
    rows = pd.DataFrame([_ew(op, 1 << s) for op in ops for s in range(12, 28)] * 2)
    X = featurize(rows, H100)
    y = np.full(len(X), math.log(slowdown))
    model = KernelPredictor.fit_family("elementwise", X, y, "own", num_rounds=20)
    model.ops = {op: 32 for op in ops}
    model.elem_bytes = {"4": len(X)}
    model.generic = KernelPredictor.fit_generic(X, y, num_rounds=20)
    return KernelPredictor("h100", {"elementwise": model}), X


def test_an_op_the_family_never_measured_is_timed_by_the_generic_trees_and_a_new_element_size_by_the_roofline():
    p, _ = _elementwise_model(["aten::add", "aten::mul"], 2.0)
    rows = pd.DataFrame([_ew("aten::add", 1 << 24), _ew("aten::masked_fill", 1 << 24),
                         _ew("aten::add", 1 << 24, "float16")])
    out = p.predict(rows)
    assert list(out.source) == ["learned", "learned", "fallback"]
    roof = featurize(rows, H100)["roofline_s"].to_numpy()
    assert out.duration_s[1] / roof[1] == pytest.approx(2.0, rel=0.05)  # the generic trees' ratio
    assert out.duration_s[2] == pytest.approx(roof[2])  # fp16 never measured: the labelled roofline


def test_without_generic_trees_an_unseen_op_is_the_rooflines():
    p, _ = _elementwise_model(["aten::add", "aten::mul"], 2.0)
    p.families["elementwise"].generic = None
    out = p.predict(pd.DataFrame([_ew("aten::add", 1 << 20), _ew("aten::masked_fill", 1 << 20)]))
    assert list(out.source) == ["learned", "fallback"]


def test_generic_trees_and_what_the_model_saw_survive_save_and_load(tmp_path):
    p, _ = _elementwise_model(["aten::add", "aten::mul"], 2.0)
    rows = pd.DataFrame([_ew("aten::masked_fill", 1 << 22), _ew("aten::add", 1 << 22, "float16")])
    before = p.predict(rows)
    p.save(tmp_path / "kp")
    after = KernelPredictor.load(tmp_path / "kp").predict(rows)
    assert list(after.source) == list(before.source) == ["learned", "fallback"]
    assert after.duration_s.tolist() == pytest.approx(before.duration_s.tolist())


def _timed_gemms(dtype, timing, slowdown, smallest=1024):
    """Fixture measurements of square GEMMs under one timing condition: further from the roofline the larger
    they are (so that trees, not one constant ratio, fit them), times `slowdown`."""
    rows = []
    for i, n in enumerate(range(smallest, smallest + 64 * 48, 64)):
        row = _mm(n, n, n, dtype, status="ok", gpu="h100", source="test", family="gemm", timing=timing,
                  signature=f"{dtype}-{timing}-{i}")
        f, b = flops_and_bytes("aten::mm", row["shapes"], row["dtypes"], row["out_shapes"], row["out_dtypes"])
        rows.append({**row, "duration_s": slowdown * (1 + n / 8192) * kernel_time(f, b, dtype, "gemm", H100)})
    return rows


def test_the_in_situ_effect_is_not_carried_to_a_dtype_never_profiled_in_situ(tmp_path):
    """bf16 GEMMs measured alone and in a profiled program (1.5x slower there); fp32 ones alone only. A trace
    row of fp32 is predicted as its own rows were timed, not with the slowdown learned from bf16."""
    from maya_models.train import train_kernel_predictor

    data = pd.DataFrame(_timed_gemms("bfloat16", "isolated_graph_locked", 1.0)
                        + _timed_gemms("bfloat16", "in_inference", 1.5)
                        + _timed_gemms("float32", "isolated_events", 1.0))
    p = train_kernel_predictor("h100", data=data, num_rounds=60, register=False, return_predictor=True)["predictor"]
    assert p.families["gemm"].booster is not None
    assert p.families["gemm"].in_situ_elem_bytes.get("4", 0) == 0
    shape = _mm(2048, 2048, 2048, "bfloat16"), _mm(2048, 2048, 2048, "float32")
    trace = p.predict(pd.DataFrame(shape)).duration_s.to_numpy()
    alone = p.predict(pd.DataFrame([{**shape[0], "timing": "isolated_graph_locked"},
                                    {**shape[1], "timing": "isolated_events"}])).duration_s.to_numpy()
    assert trace[0] / alone[0] == pytest.approx(1.5, rel=0.1)  # what bf16 runs at in a program
    assert trace[1] / alone[1] == pytest.approx(1.0, rel=0.02)  # fp32: as measured, no evidence of a slowdown
    p.save(tmp_path / "kp")
    assert KernelPredictor.load(tmp_path / "kp").predict(pd.DataFrame(shape)).duration_s.tolist() == \
        pytest.approx(trace.tolist())


@pytest.mark.parametrize("in_situ_from, adjusted", [(8192, False), (256, True)])
def test_the_sustained_clock_is_not_applied_on_top_of_compute_bound_in_situ_timings(in_situ_from, adjusted):
    """Kernels profiled inside programs ran at the clock a program runs at; where a family learned from enough
    compute-bound ones (large GEMMs here), their reading is not slowed again by the sustained-clock factor.
    Small in-situ GEMMs (the other case) say nothing about the clock under tensor-core load: the factor stays."""
    from maya_models.train import train_kernel_predictor

    data = pd.DataFrame(_timed_gemms("bfloat16", "isolated_graph_locked", 1.0, smallest=in_situ_from)
                        + _timed_gemms("bfloat16", "in_inference", 1.3, smallest=in_situ_from))
    p = train_kernel_predictor("h100", data=data, num_rounds=60, register=False, return_predictor=True)["predictor"]
    p.info["sustained"] = {"bfloat16": {"ratio": 1.25}}  # as `calibrate_sustained` stores it
    shape = _mm(in_situ_from + 1024, in_situ_from + 1024, in_situ_from + 1024)
    out = p.predict(pd.DataFrame([shape]))
    assert out.source[0] == "learned"
    assert (out.adjustment_s[0] > 0) == adjusted


def _norm(op, tokens, hidden, dtype="float16", **extra):
    row = {"kind": "kernel", "op": op, "shapes": [[tokens, hidden], [hidden]], "dtypes": [dtype, dtype],
           "strides": [[hidden, 1], [1]], "args": json.dumps({"normalized_shape": [hidden], "eps": 1e-5}),
           "out_shapes": [[tokens, hidden]], "out_dtypes": [dtype]}
    row.update(extra)
    return row


def _launch_bound(tokens):
    """A norm's time over its roofline at small sizes: 1.5x at 256 tokens, 2x at 4096 (fixture numbers)."""
    return 1.5 + 0.5 * (math.log2(tokens) - 8) / 4


def test_a_memory_bound_op_past_its_measured_sizes_keeps_its_own_ratio_not_another_ops(tmp_path):
    """LayerNorm measured up to 4096 x 2560, nearing 2x its roofline as it grows; RMSNorm (another kernel) alike
    at those sizes and up to 32768 x 8192, at 3x past them. A LayerNorm of 16384 x 3072 is read at LayerNorm's
    own ratio at the edge of its sizes, not at the ratio the trees learned from RMSNorm's larger rows (what the
    A100's vidur rows did to a hidden size of 3072)."""
    from maya_models.train import train_kernel_predictor

    a100 = get_gpu("a100-80gb")
    rows = []
    for op, ratio, tokens, hiddens in (("aten::native_layer_norm", None, (256, 512, 1024, 2048, 4096), (2048, 2560)),
                                       ("aten::_fused_rms_norm", 3.0, (256, 1024, 4096, 16384, 32768),
                                        (2048, 4096, 8192))):
        for t in tokens:
            for h in hiddens:
                for rep in range(30):
                    row = _norm(op, t + rep, h, status="ok", gpu="a100-80gb", source="test", family="norm",
                                timing="in_situ_forward", signature=f"{op}-{t + rep}-{h}")
                    roof = featurize(pd.DataFrame([row]), a100)["roofline_s"].iloc[0]
                    slower = ratio if t * h > 4096 * 2560 else _launch_bound(t)
                    rows.append({**row, "duration_s": slower * roof})
    p = train_kernel_predictor("a100-80gb", data=pd.DataFrame(rows), num_rounds=40, register=False,
                               return_predictor=True)["predictor"]
    assert p.families["norm"].trained_on == "own"
    trace = pd.DataFrame([_norm("aten::native_layer_norm", 2048, 2048), _norm("aten::native_layer_norm", 16384, 3072),
                          _norm("aten::_fused_rms_norm", 16384, 3072)])
    ratio = p.predict(trace).duration_s.to_numpy() / featurize(trace, a100)["roofline_s"].to_numpy()
    assert ratio[0] == pytest.approx(_launch_bound(2048), rel=0.05)  # inside its sizes
    assert ratio[1] == pytest.approx(_launch_bound(4096), rel=0.15)  # past them: LayerNorm's own at their edge
    assert ratio[1] < 0.8 * ratio[2]
    assert ratio[2] == pytest.approx(3.0, rel=0.05)  # RMSNorm inside its own sizes, untouched
    p.save(tmp_path / "kp")
    again = KernelPredictor.load(tmp_path / "kp").predict(trace).duration_s.tolist()
    assert again == pytest.approx(p.predict(trace).duration_s.tolist())
