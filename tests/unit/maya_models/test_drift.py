"""How far a part moved between calibrations: the same signatures across consecutive calibrations."""

import pandas as pd
import pytest

from maya_models.drift import drift_table
from maya_models.train import training_rows


def _calibrated(gpu, family, signature, duration, run_id, at):
    return {"gpu": gpu, "family": family, "signature": signature, "status": "ok", "duration_s": duration,
            "run_id": run_id, "measured_at": pd.Timestamp(at, tz="UTC"), "source": "maya-bench", "timing": ""}


def test_drift_compares_the_same_signatures_across_consecutive_calibrations():
    """How far the machine moved between two calibrations: later / earlier time of the signatures both measured,
    each calibration's suites together; training pools them (their median per signature)."""
    rows = pd.DataFrame([
        _calibrated("cpu", "gemm", "mm1", 1.0e-3, "cpu-20261204T1000-aa-kernels", "2026-12-04 10:00"),
        _calibrated("cpu", "gemm", "mm2", 2.0e-3, "cpu-20261204T1000-aa-kernels", "2026-12-04 10:01"),
        _calibrated("cpu", "gemm", "mm2", 2.2e-3, "cpu-20261204T1000-aa-kernels", "2026-12-04 10:02"),
        _calibrated("cpu", "gemm", "mm1", 1.2e-3, "cpu-20261204T1300-bb-kernels", "2026-12-04 13:00"),
        _calibrated("cpu", "gemm", "mm2", 3.3e-3, "cpu-20261204T1300-bb-in-training", "2026-12-04 13:02"),
        _calibrated("cpu", "gemm", "mm3", 3.0e-3, "cpu-20261204T1600-cc-kernels", "2026-12-04 16:00"),
    ])
    table = drift_table(rows, min_shared=1)
    assert len(table) == 1  # 13:00 -> 16:00 shares no signature
    assert table.shared[0] == 2 and table.median_ratio[0] == pytest.approx((1.2 + 3.3 / 2.1) / 2)
    assert drift_table(rows, min_shared=3).empty
    kept = training_rows(data=rows).set_index("signature")
    assert kept.duration_s["mm1"] == pytest.approx(1.1e-3)  # both calibrations' median


def test_drift_says_how_far_single_rows_move_beyond_the_machines_common_shift():
    """Three signatures 10% slower in the later calibration and one 32% slower: the common shift is x1.10 and
    the row that moved on its own sits 20% beyond it, which is the measurement's own repeatability."""
    earlier, later = "cpu-20261204T1000-aa-kernels", "cpu-20261204T1300-bb-kernels"
    base = {"mm1": 1e-3, "mm2": 2e-3, "mm3": 3e-3, "mm4": 4e-3}
    slower = {"mm1": 1.1, "mm2": 1.1, "mm3": 1.1, "mm4": 1.32}
    rows = pd.DataFrame([_calibrated("cpu", "gemm", s, t, earlier, "2026-12-04 10:00") for s, t in base.items()]
                        + [_calibrated("cpu", "gemm", s, t * slower[s], later, "2026-12-04 13:00")
                           for s, t in base.items()])
    line = drift_table(rows, min_shared=4).iloc[0]
    assert line.median_ratio == pytest.approx(1.1)
    assert line.row_median_ape == pytest.approx(0.0, abs=1e-9)
    assert line.row_mape == pytest.approx(20.0 / 4)
