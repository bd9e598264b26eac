"""In-training rows: what one signature's calls in a profiled step become."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.runners.in_training import rows_from_profile


def _profile(folder, calls_ms: list[list[float]]):
    """A one-rank profile whose iterations -1..len(calls_ms) each run one `mul` per listed duration."""
    rows = []
    for it, durations in enumerate([[9.0], *calls_ms, [9.0]], start=-1):
        for d in durations:
            rows.append({"iteration": it, "kind": "kernel", "op": "aten::mul", "shapes": [[64, 64], [64, 64]],
                         "dtypes": ["float32", "float32"], "strides": [[64, 1], [64, 1]], "args": "{}",
                         "out_shapes": [[64, 64]], "out_dtypes": ["float32"], "duration_s": d / 1e3})
    out = folder / "trace" / "rank=0"
    out.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), out / "part-0.parquet")
    return folder


def test_a_signatures_row_is_the_mean_of_its_steady_calls_so_a_step_sums_to_its_profile(tmp_path):
    # iteration 0 (warm-up) and the last (cut short) are left out; in the steady ones one call in five lands on
    # fresh pages and takes five times the others: a step spends the mean per call, not the common case
    folder = _profile(tmp_path, [[50.0, 50.0], [1.0, 1.0, 1.0], [1.0, 5.0]])
    (row,) = rows_from_profile(folder, {}, "test")
    assert row["duration_s"] == pytest.approx(9e-3 / 5)
    assert row["duration_min_s"] == pytest.approx(1e-3) and row["repeats"] == 5
    assert row["timing"] == "in_training" and row["out_shapes"] == [[64, 64]]
