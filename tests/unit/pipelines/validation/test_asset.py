"""The Dagster asset `validation_report` materializes the report's headline numbers as metadata."""

from __future__ import annotations

import dagster as dg
import pytest

from pipelines.validation import assets, report


def test_asset_metadata_carries_errors_targets_and_the_report(tmp_path, monkeypatch):
    rows = [report.add_errors({"name": "a", "source": "neusight", "gpu": "h100", "world_size": 1, "nnodes": 1,
                               "note": "", "measured_s": 1.0, "predicted_s": 1.08, "roofline_s": 0.5,
                               "llm_analysis_s": None, "oom": False, "coverage": {}, "error": None})]
    rep = {"generated_at": "now", "machine": "m",
           "gpu": {"rows": rows, "summary": report.table_summary(rows, report.GPU_TARGET)},
           "cpu": {"skipped": "CPU table not requested", "rows": []}}
    seen = {}

    def fake_run_validation(**kw):
        seen.update(kw)
        rep["files"] = {k: str(v) for k, v in report.write_report(rep, tmp_path).items()}
        return rep

    monkeypatch.setattr(assets, "run_validation", fake_run_validation)
    result = assets.validation_report(dg.build_asset_context(), assets.ValidationConfig(cpu=False, quick=True))
    meta = result.metadata
    assert seen["cpu"] is False and seen["quick"] is True
    assert meta["gpu_maya_mape"].value == pytest.approx(0.08)
    assert meta["gpu_roofline_mape"].value == pytest.approx(0.5)
    assert meta["gpu_target_met"].value == "yes"
    assert meta["cpu_skipped"].value == "CPU table not requested"
    assert "+8.0%" in meta["report"].value and meta["gpu_plot"].value.endswith("gpu.png")
