"""The Dagster code location loads, and its schedule and sensor ask for the right runs."""

import datetime

import dagster as dg

from pipelines.definitions import defs
from pipelines.runners import kernels


def test_definitions_load_with_the_whole_chain():
    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert {"hardware", "kernel_benchmarks", "collective_benchmarks", "in_training_benchmarks",
            "reference_measurements", "warehouse", "kernel_predictor", "collective_predictor",
            "published_predictors"} <= keys
    checks = {c.name for c in repo.asset_graph.asset_check_keys}
    assert {"positive_times", "no_duplicate_signatures", "noise", "clock_stability", "family_coverage",
            "parquet_integrity"} <= checks
    parts = defs.resolve_job_def("calibration").partitions_def.get_partition_keys()
    assert "cpu" in parts and "h100" in parts
    assert repo.get_schedule_def("recalibration_schedule") and repo.get_sensor_def("trace_shapes_sensor")


def test_schedule_requests_each_configured_gpu(monkeypatch):
    monkeypatch.setenv("MAYA_CALIBRATE_GPUS", "cpu,h100,not-a-gpu")
    sched = defs.get_schedule_def("recalibration_schedule")
    ctx = dg.build_schedule_context(scheduled_execution_time=datetime.datetime(2026, 11, 29, 3),
                                    repository_def=defs.get_repository_def())
    reqs = list(sched.evaluate_tick(ctx).run_requests)
    assert [r.partition_key for r in reqs] == ["cpu", "h100"]
    assert reqs[1].tags["maya/gpu"] == "h100"


def test_sensor_requests_uncovered_trace_shapes_then_stays_quiet(trace_dir, wh, monkeypatch):
    monkeypatch.setenv("MAYA_TRACES", str(trace_dir.parent))
    sensor = defs.get_sensor_def("trace_shapes_sensor")
    with dg.instance_for_test() as instance:
        res = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))
        (req,) = res.run_requests
        assert req.partition_key == "cpu"
        cfg = req.run_config["ops"]["kernel_benchmarks"]["config"]
        assert cfg == {"traces": [str(trace_dir)], "sweep": False}
        # the same folder again (cursor) → nothing new
        again = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=res.cursor,
                                                                  repository_def=defs.get_repository_def()))
        assert not again.run_requests
    # once those shapes are measured, a fresh look at the folder finds nothing to do (the flash op
    # cannot run on a CPU: its failed row does not count as covered, so measure only the others)
    kernels.run("cpu", run_id="sensor-test", root=wh, budget_s=60, traces=[trace_dir], sweep=False)
    from pipelines.calibration.automation import uncovered_signatures

    left = uncovered_signatures(trace_dir, "cpu")
    assert len(left) == 1  # the CUDA-only flash attention signature
