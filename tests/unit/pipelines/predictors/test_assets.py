"""The predictor end of the chain hands the partition and warehouse to maya_models and reports what it got.

Training itself is maya_models' (tested there, and run for real by `make calibrate`); here the
train/publish functions are replaced by recorders so the wiring is checked in a second.
"""

import dagster as dg

import maya_models.train as train
from pipelines.predictors.assets import PREDICTOR_ASSETS
from pipelines.resources import WarehouseResource


def test_predictor_assets_train_then_publish_both_kinds(wh, monkeypatch):
    calls = []

    def fake_train(kind):
        def fn(gpu, *, root=None, **_):
            calls.append((kind, gpu, str(root)))
            return {"gpu": gpu, "kind": kind, "version": "7", "score": 12.5, "run_id": "abc123",
                    "metrics": {"gemm": {"n": 3, "median_ape": 4.5, "p90_ape": 9.0}},
                    "predictor": object()}  # the fitted object must not reach the metadata
        return fn

    def fake_publish(gpu, *, kind, root=None):
        calls.append(("publish-" + kind, gpu, str(root)))
        return {"promoted": kind == "kernels", "champion": "7" if kind == "kernels" else "3"}

    monkeypatch.setattr(train, "train_kernel_predictor", fake_train("kernels"))
    monkeypatch.setattr(train, "train_collective_predictor", fake_train("collectives"))
    monkeypatch.setattr(train, "publish", fake_publish)
    result = dg.materialize(PREDICTOR_ASSETS, partition_key="h100",
                            resources={"warehouse_store": WarehouseResource(root=str(wh))})
    assert result.success
    assert sorted(c[0] for c in calls) == ["collectives", "kernels", "publish-collectives", "publish-kernels"]
    assert {c[1] for c in calls} == {"h100"} and {c[2] for c in calls} == {str(wh.resolve())}
    md = {e.event_specific_data.materialization.asset_key.to_user_string():
          e.event_specific_data.materialization.metadata for e in result.get_asset_materialization_events()}
    assert md["kernel_predictor"]["version"].value == "7" and "predictor" not in md["kernel_predictor"]
    # one float per family and figure, which Dagster plots across materializations, and the MLflow run
    assert isinstance(md["kernel_predictor"]["gemm.median_ape"], dg.FloatMetadataValue)
    assert md["kernel_predictor"]["gemm.median_ape"].value == 4.5 and md["kernel_predictor"]["gemm.n"].value == 3
    assert md["kernel_predictor"]["mlflow_run"].value.endswith("/runs/abc123")
    assert md["published_predictors"]["kernels_promoted"].value is True
    assert md["published_predictors"]["collectives_champion"].value == "3"


def test_a_failed_blocking_warehouse_check_stops_predictor_training(wh, monkeypatch):
    """A truncated measurement file fails parquet_integrity, and nothing trains on that partition."""
    import pyarrow as pa

    from maya_models.warehouse import write_measurements
    from pipelines.calibration.assets import warehouse
    from pipelines.calibration.checks import WAREHOUSE_CHECKS

    rows = [{"kind": "kernel", "op": "aten::mm", "family": "gemm", "signature": f"s{i}", "duration_s": 1e-3,
             "spread": 0.01, "repeats": 5, "status": "ok", "gpu": "cpu", "source": "maya-bench",
             "run_id": "r1", "schema_version": 1} for i in range(3)]
    good = write_measurements(pa.Table.from_pylist(rows), root=wh, gpu="cpu", source="maya-bench", run_id="r1")
    good.with_name("r2-00000.parquet").write_bytes(good.read_bytes()[:100])
    trained = []
    monkeypatch.setattr(train, "train_kernel_predictor", lambda gpu, *, root=None, **_: trained.append(gpu))
    monkeypatch.setattr(train, "train_collective_predictor", lambda gpu, *, root=None: trained.append(gpu))
    result = dg.materialize([warehouse, *WAREHOUSE_CHECKS, *PREDICTOR_ASSETS], partition_key="cpu",
                            raise_on_error=False, resources={"warehouse_store": WarehouseResource(root=str(wh))})
    evals = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert evals["parquet_integrity"] is False
    assert trained == []
    assert not result.success
