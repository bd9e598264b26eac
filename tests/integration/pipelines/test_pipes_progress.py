"""A runner's progress reaches the Dagster run while it works (Dagster Pipes), not when it exits."""

import dagster as dg

from pipelines.calibration.assets import hardware, kernel_benchmarks
from pipelines.resources import WarehouseResource


def test_kernel_runner_progress_streams_into_the_run_log(wh):
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [hardware, kernel_benchmarks], partition_key="cpu", instance=instance,
        resources={"warehouse_store": WarehouseResource(root=str(wh))},
        run_config={"ops": {"kernel_benchmarks": {"config": {"budget_s": 6, "chunk_size": 2, "repeats": 3}}}})
    assert result.success
    logs = [r for r in instance.all_logs(result.run_id) if r.user_message.startswith("kernels cpu [")]
    assert len(logs) >= 3, [r.user_message for r in instance.all_logs(result.run_id)][-20:]
    # the lines arrived over the runner's life, not in one burst at its exit
    assert logs[-1].timestamp - logs[0].timestamp > 1.0
    done = next(e for e in result.get_asset_materialization_events()
                if e.asset_key.to_user_string() == "kernel_benchmarks")
    assert done.event_specific_data.materialization.metadata["chunks_written"].value == len(logs)
