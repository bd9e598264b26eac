"""The measured-neighbour reading: a kernel measured at other sizes is read between its own neighbours, not at
the ratio trees learned from another op's rows, and never across parts or memory layouts."""

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb

from emulator.core.hardware import get_gpu
from maya_models.features import featurize
from maya_models.kernels import FamilyModel, KernelPredictor, neighbour_table

CPU = get_gpu("cpu")


def _copy(n, transposed=False, timing="in_training"):
    rows, cols = n // 64, 64
    src = [1, rows] if transposed else [cols, 1]
    return {"kind": "kernel", "op": "aten::copy_", "shapes": [[rows, cols], [rows, cols]],
            "dtypes": ["float32", "float32"], "strides": [[cols, 1], src], "args": "{}",
            "out_shapes": [], "out_dtypes": [], "timing": timing}


def _copy_family(measured: dict[int, float]) -> KernelPredictor:
    """A copy family whose trees read every row at 30x the roofline (as trees misled by another op's tiny rows
    did), with the measured contiguous copies as its neighbour table."""
    rows = pd.DataFrame([_copy(n) for n in measured])
    X = featurize(rows, CPU)
    y = np.log(np.array(list(measured.values())) / X["roofline_s"].to_numpy())
    misled = xgb.train({"max_depth": 1, "base_score": float(np.log(30.0))},
                       xgb.DMatrix(X.values, label=np.full(len(X), np.log(30.0)), feature_names=list(X.columns)), 1)
    model = FamilyModel("copy", misled, list(X.columns), "own", len(X),
                        neighbours=neighbour_table(X, y, rows["op"].to_numpy()))
    return KernelPredictor("cpu", {"copy": model})


def test_a_copy_between_two_measured_sizes_takes_a_time_between_theirs():
    p = _copy_family({64 * 64: 4e-6, 64 * 4096: 120e-6})
    t = p.predict(pd.DataFrame([_copy(64 * 512)])).duration_s[0]
    assert 4e-6 < t < 120e-6
    at_measured = p.predict(pd.DataFrame([_copy(64 * 4096)])).duration_s[0]
    assert at_measured == pytest.approx(120e-6, rel=1e-6)


def test_past_the_measured_sizes_the_trees_answer_not_the_edge_of_the_table():
    """An op measured only at launch-floor sizes must not carry that floor's ratio to megabytes."""
    p = _copy_family({64 * 64: 4e-6, 64 * 4096: 120e-6})
    past = [_copy(64 * 32768), _copy(64 * 16)]
    X = featurize(pd.DataFrame(past), CPU)
    t = p.predict(pd.DataFrame(past)).duration_s
    assert t.tolist() == pytest.approx((30.0 * X["roofline_s"]).tolist(), rel=1e-3)


def test_a_strided_copy_or_another_part_is_not_read_from_contiguous_neighbours():
    p = _copy_family({64 * 64: 4e-6, 64 * 4096: 120e-6})
    X = featurize(pd.DataFrame([_copy(64 * 512, transposed=True)]), CPU)
    strided = p.predict(pd.DataFrame([_copy(64 * 512, transposed=True)])).duration_s[0]
    assert strided == pytest.approx(30.0 * X["roofline_s"][0], rel=1e-3)  # the trees answer it
    p.gpu = "h100"
    on_gpu = p.predict(pd.DataFrame([_copy(64 * 512)]))
    assert on_gpu.duration_s[0] == pytest.approx(30.0 * featurize(pd.DataFrame([_copy(64 * 512)]),
                                                                   get_gpu("h100"))["roofline_s"][0], rel=1e-3)


def test_the_neighbour_table_survives_save_and_load(tmp_path):
    p = _copy_family({64 * 64: 4e-6, 64 * 4096: 120e-6})
    before = p.predict(pd.DataFrame([_copy(64 * 512)])).duration_s[0]
    loaded = KernelPredictor.load(p.save(tmp_path / "pred"))
    assert loaded.families["copy"].neighbours == p.families["copy"].neighbours
    assert loaded.predict(pd.DataFrame([_copy(64 * 512)])).duration_s[0] == pytest.approx(before)


def test_strided_feature_marks_a_transposed_view_not_a_contiguous_tensor():
    X = featurize(pd.DataFrame([_copy(64 * 512), _copy(64 * 512, transposed=True)]), CPU)
    assert X["strided"].tolist() == [0.0, 1.0]


def _fill(n):
    return {"kind": "kernel", "op": "aten::fill_", "shapes": [[n // 256, 256]], "dtypes": ["float32"],
            "strides": [[256, 1]], "args": "{}", "out_shapes": [], "out_dtypes": [], "timing": "host_timer"}


def test_an_op_with_few_rows_is_read_between_its_own_sizes_and_past_them_falls_back():
    """An op measured at fewer than MIN_SEEN_ROWS sizes in a family without a generic model: its trees are not
    trusted (the roofline answers, labelled fallback), but between its own measured sizes the table is."""
    measured = {256 * 256: 4e-6, 256 * 4096: 90e-6}
    rows = pd.DataFrame([_fill(n) for n in measured])
    X = featurize(rows, CPU)
    y = np.log(np.array(list(measured.values())) / X["roofline_s"].to_numpy())
    trees = xgb.train({"max_depth": 1}, xgb.DMatrix(X.values, label=y, feature_names=list(X.columns)), 1)
    model = FamilyModel("memset", trees, list(X.columns), "own", len(X), ops={"aten::fill_": len(X)},
                        neighbours=neighbour_table(X, y, rows["op"].to_numpy()))
    p = KernelPredictor("cpu", {"memset": model})
    between = p.predict(pd.DataFrame([_fill(256 * 1024)]))
    assert between.source[0] == "learned"
    assert 4e-6 < between.duration_s[0] < 90e-6
    past = pd.DataFrame([_fill(256 * 65536)])
    out = p.predict(past)
    assert out.source[0] == "fallback"
    assert out.duration_s[0] == pytest.approx(featurize(past, CPU)["roofline_s"][0], rel=1e-6)


def _softmax_bwd(op, n, timing="host_timer"):
    x = [n // 512, 512]
    return {"kind": "kernel", "op": op, "shapes": [x, x], "dtypes": ["float32", "float32"],
            "strides": [[512, 1], [512, 1]], "args": "{}", "out_shapes": [], "out_dtypes": [], "timing": timing}


def test_the_table_is_kept_when_an_op_with_few_rows_would_be_read_by_op_blind_trees():
    """The family's choice mirrors prediction: an op with fewer than MIN_SEEN_ROWS rows is read by the op-blind
    trees, here at its sibling's 4x ratio, while its own neighbours say 1x; the table must win that choice."""
    from maya_models.train import _fit_family

    sizes = [512 * 2 ** k for k in range(4, 16)]
    rows = [(_softmax_bwd("aten::_log_softmax_backward_data", n), 4.0) for n in sizes for _ in range(3)]
    rows += [(_softmax_bwd("aten::_softmax_backward_data", n), 1.0) for n in sizes]
    df = pd.DataFrame([r for r, _ in rows])
    X = featurize(df, CPU)
    y = np.log(np.array([f for _, f in rows]))
    groups = [f"{r['op']}|{r['shapes'][0][0]}" for r, _ in rows]
    model = _fit_family("softmax_loss", X, y, groups, df["op"].to_numpy(), "own", 50, None)
    assert model.neighbours is not None


def test_an_op_with_few_rows_is_read_by_its_own_trees_where_the_folds_say_they_beat_the_op_blind_ones(tmp_path):
    """`_softmax_backward_data` and `_log_softmax_backward_data` have the same sizes and differ 4x in time: op-blind
    trees cannot tell them apart, so the family reads an op of 12 rows with its op-aware trees, also after a reload."""
    from maya_models.kernels import MIN_OWN_TREE_ROWS
    from maya_models.train import _fit_family

    sizes = [512 * 2 ** k for k in range(4, 16)]
    rows = [(_softmax_bwd("aten::_log_softmax_backward_data", n), 4.0 + k / 4) for k, n in enumerate(sizes)
            for _ in range(3)]
    rows += [(_softmax_bwd("aten::_softmax_backward_data", n), 1.0 + k / 16) for k, n in enumerate(sizes)]
    df = pd.DataFrame([r for r, _ in rows])
    X = featurize(df, CPU)
    y = np.log(np.array([f for _, f in rows]))
    ops = df["op"].to_numpy()
    model = _fit_family("softmax_loss", X, y, [f"{o}|{n}" for o, n in zip(ops, X["bytes"], strict=True)], ops,
                        "own", 50, None)
    assert model.min_op_rows == MIN_OWN_TREE_ROWS
    model.ops = {str(o): int(n) for o, n in zip(*np.unique(ops, return_counts=True), strict=True)}
    model.generic = KernelPredictor.fit_generic(X, y, 50)
    model.neighbours = None  # the trees' reading, not the table's
    p = KernelPredictor.load(KernelPredictor("cpu", {"softmax_loss": model}).save(tmp_path / "pred"))
    row = pd.DataFrame([_softmax_bwd("aten::_softmax_backward_data", 512 * 2 ** 9 * 3)])
    ratio = p.predict(row).duration_s[0] / featurize(row, CPU)["roofline_s"][0]
    assert 1.0 < ratio < 2.5, ratio  # its own ratio there is 1.56-1.63; its sibling's 6.25-6.5
