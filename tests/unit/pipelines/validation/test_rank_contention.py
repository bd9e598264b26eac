"""The 1-rank vs 2-rank kernel comparison: ratios per family over the signatures both runs share."""

import pandas as pd

from pipelines.validation.rank_contention import family_ratios


def _rows(times: dict[str, list[float]], iterations=(1, 2)) -> pd.DataFrame:
    rows = []
    for it in iterations:
        for op, ts in times.items():
            for t in ts:
                rows.append({"iteration": it, "kind": "kernel", "op": op, "sig": op, "duration_s": t})
    rows.append({"iteration": 1, "kind": "collective", "op": "c10d::allreduce_", "sig": "ar", "duration_s": 1.0})
    return pd.DataFrame(rows)


def test_ratios_per_family_over_shared_signatures():
    one = _rows({"aten::mm": [0.010, 0.010], "aten::add": [0.001], "aten::gelu": [0.002]})
    two = _rows({"aten::mm": [0.011, 0.011], "aten::add": [0.002], "aten::softmax": [0.004]})
    out = family_ratios(one, two).set_index("family")
    assert abs(out.loc["gemm", "median_ratio"] - 1.1) < 1e-9 and out.loc["gemm", "signatures"] == 1
    assert out.loc["elementwise", "signatures"] == 1  # gelu and softmax ran in one run only: not compared
    assert abs(out.loc["elementwise", "median_ratio"] - 2.0) < 1e-9
    assert abs(out.loc["gemm", "ms_per_iteration"] - 20.0) < 1e-9  # two 10 ms GEMMs an iteration
    assert "collective" not in out.index  # kernels only
    assert out.index[0] == "gemm"  # the family with the most time first
