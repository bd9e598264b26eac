"""`python -m pipelines.validation`: the GPU table is skipped with a clear message when the data is absent."""

from __future__ import annotations

import pytest

from pipelines.validation import __main__ as cli
from pipelines.validation.validate import run_validation


def test_gpu_table_skipped_without_shared_data(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_SHARED", str(tmp_path / "absent"))
    rep = run_validation(cpu=False, gpu=True, out_dir=tmp_path / "report")
    assert "MAYA_SHARED" in rep["gpu"]["skipped"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Skipped: no holdout measurements" in md
    assert (tmp_path / "report" / "report.json").exists()


def test_conflicting_flags_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--cpu-only", "--gpu-only"])
    assert e.value.code == 2 and "exclude each other" in capsys.readouterr().err
