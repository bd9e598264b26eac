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
