"""Asset checks on a warehouse partition: they fail loudly and name what is wrong."""

import dagster as dg
import pandas as pd
import pyarrow as pa

from maya_models.warehouse import write_measurements
from pipelines.calibration import checks
from pipelines.calibration.assets import warehouse
from pipelines.calibration.checks import WAREHOUSE_CHECKS
from pipelines.resources import WarehouseResource


def _rows(n, run_id="r1", duration=1e-3, spread=0.05):
    return [{"kind": "kernel", "op": "aten::mm", "family": "gemm", "signature": f"sig{i}", "duration_s": duration,
             "spread": spread, "repeats": 5, "status": "ok", "gpu": "cpu", "source": "maya-bench",
             "run_id": run_id, "schema_version": 1} for i in range(n)]


def test_corrupt_parquet_is_named_by_the_check(wh):
    write_measurements(pa.Table.from_pylist(_rows(3)), root=wh, gpu="cpu", source="maya-bench", run_id="r1")
    good = write_measurements(pa.Table.from_pylist(_rows(3, "r2")), root=wh, gpu="cpu", source="maya-bench",
                              run_id="r2")
    bad = good.with_name("r3-00000.parquet")
    bad.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])  # a truncated copy
    result = dg.materialize([warehouse, *WAREHOUSE_CHECKS], partition_key="cpu", raise_on_error=False,
                            resources={"warehouse_store": WarehouseResource(root=str(wh))})
    evals = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not evals["parquet_integrity"].passed
    assert str(bad) in evals["parquet_integrity"].description
    assert evals["positive_times"].passed  # the readable files are still checked
    assert evals["no_duplicate_signatures"].passed


def test_duplicates_non_positive_times_and_missing_families_fail():
    df = pd.DataFrame(_rows(3) + _rows(1) + _rows(1, duration=0.0))
    assert not checks.no_duplicate_signatures(df).passed
    bad = checks.positive_times(df)
    assert not bad.passed and bad.metadata["rows_bad"] == 1
    cov = checks.family_coverage(df, "cpu")
    assert not cov.passed and "attention_bwd" in cov.metadata["missing"]
    assert not checks.noise(pd.DataFrame(_rows(4, spread=0.5)), "h100").passed
    assert checks.noise(pd.DataFrame(_rows(4, spread=0.05)), "h100").passed
