"""`python -m pipelines.calibrate`: the whole chain for one partition, and refusal on the wrong machine."""

import os
import subprocess
import sys

import pytest
import torch

from maya_models.warehouse import connect, read_measurements
from pipelines.calibrate import calibrate
from tests.paths import REPO


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_calibrating_an_absent_gpu_says_so_and_writes_nothing(tmp_path):
    wh = tmp_path / "wh"
    env = {**os.environ, "MAYA_WAREHOUSE": str(wh), "DAGSTER_HOME": str(tmp_path / "dh")}
    out = subprocess.run([sys.executable, "-m", "pipelines.calibrate", "--gpu", "h100"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "cannot calibrate 'h100' on this machine" in out.stderr and "Nothing was written" in out.stderr
    assert not wh.exists() and not (tmp_path / "dh").exists()


def test_cpu_partition_end_to_end(wh, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME")  # calibrate() puts the Dagster instance under the warehouse
    result = calibrate("cpu", budget_s=4, collective_budget_s=3, skip_predictors=True, in_training_budget_s=1)
    assert result.success
    mats = {e.asset_key.to_user_string(): e.metadata for e in result.get_asset_materialization_events()
            for e in [e.event_specific_data.materialization]}
    assert set(mats) == {"hardware", "kernel_benchmarks", "collective_benchmarks", "in_training_benchmarks",
                         "reference_measurements", "warehouse"}
    assert mats["hardware"]["nvml_available"].value is False  # recorded as unavailable, no crash
    assert mats["reference_measurements"]["rows"].value > 100_000
    evals = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert len(evals) == 6
    for name in ("positive_times", "no_duplicate_signatures", "parquet_integrity", "family_coverage"):
        assert evals[name].passed, (name, evals[name].description)

    mine = read_measurements(gpu="cpu", source="maya-bench", status=None, root=wh)
    assert {"kernel", "collective", "memcpy"} <= set(mine["kind"])
    assert (mine.loc[mine["status"] == "ok", "duration_s"] > 0).all()
    assert mine["run_id"].str.endswith(("-kernels", "-collectives")).all()
    con = connect(wh, read_only=True)
    try:
        sources = dict(con.execute("SELECT source, count(*) FROM measurements GROUP BY source").fetchall())
        assert con.execute("SELECT version FROM schema_version").fetchone()[0] >= 1
    finally:
        con.close()
    assert sources["maya-bench"] == len(mine) and sources["aiconfigurator"] > 0
    # the first calibration program's real training steps, every op timed where it ran (one, within 1 s)
    steps = read_measurements(gpu="cpu", source="maya-in-training", root=wh)
    assert mats["in_training_benchmarks"]["chunks_written"].value == 1 and len(steps) == sources["maya-in-training"]
    assert (steps["timing"] == "in_training").all() and (steps["duration_s"] > 0).all()
    assert {"gemm", "elementwise", "softmax_loss"} <= set(steps["family"])
    assert steps["provenance"].str.startswith("maya profile ").all()
    assert (wh / "hardware" / "gpu=cpu").is_dir() and (wh / "dagster_home").is_dir()
    assert not (wh / "runs" / "gpu=cpu" / "pending.json").exists()  # the run is closed


