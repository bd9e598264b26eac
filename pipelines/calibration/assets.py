"""Calibration assets, one partition per GPU type: measure the device, gather the public data, build the views.

    hardware ─┬─ kernel_benchmarks ─────┐
              ├─ collective_benchmarks ─┤
              └─ in_training_benchmarks ┼─ warehouse  (checks: pipelines.calibration.checks)
    reference_measurements ─────────────┘

Benchmarks run the bare-node runners in subprocesses (`pipelines.launch`) and return their
summaries as metadata.
"""

import dagster as dg

from pipelines import launch
from pipelines.metadata import to_metadata
from pipelines.resources import (
    DEFAULT_COLLECTIVE_BUDGET_S,
    DEFAULT_KERNEL_BUDGET_S,
    GPU_PARTITIONS,
    CollectiveBenchConfig,
    InTrainingBenchConfig,
    KernelBenchConfig,
    WarehouseResource,
    budget,
)

GROUP = "calibration"
# Concurrency pools (limits in the instance's dagster.yaml, see pipelines.resources.INSTANCE_YAML): one writer of the
# DuckDB file at a time (DuckDB has a single writer), and one timing step at a time on a node (two runs timing
# on one GPU would each measure the other's load). Runs of one GPU are also queued one at a time by their
# `maya/gpu` tag.
WAREHOUSE_POOL = "maya-warehouse"
TIMING_POOL = "maya-timing"


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, kinds={"python"})
def hardware(context: dg.AssetExecutionContext, warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """What this partition is measured on: NVML facts per GPU, or the CPU's description."""
    gpu = context.partition_key
    root = warehouse_store.path()
    run_id, resumed = launch.current_run_id(root, gpu)
    s = launch.run_runner("hardware", ["--gpu", gpu, "--run-id", run_id, "--root", str(root)], timeout_s=120,
                          log=context.log.info, context=context)
    nvml = s.get("nvml", {})
    return dg.MaterializeResult(metadata={
        "run_id": run_id, "resumed": resumed, "path": s["path"], "cpu_model": s["cpu"]["model"],
        "cpu_threads": s["cpu"]["torch_threads"], "nvml_available": bool(nvml.get("available")),
        "nvml": dg.MetadataValue.json(nvml)})


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[hardware], kinds={"pytorch"}, pool=TIMING_POOL)
def kernel_benchmarks(context: dg.AssetExecutionContext, config: KernelBenchConfig,
                      warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """Kernel microbenchmarks (trace-harvested signatures first, then the designed sweep) into the warehouse."""
    gpu = context.partition_key
    root = warehouse_store.path()
    base, resumed = launch.current_run_id(root, gpu, config.run_id)
    run_id = f"{base}-kernels"  # each suite numbers its own chunks
    b = budget(config.budget_s, DEFAULT_KERNEL_BUDGET_S, gpu)
    args = ["--gpu", gpu, "--run-id", run_id, "--root", str(root), "--budget-s", str(b),
            "--chunk-size", str(config.chunk_size), "--repeats", str(config.repeats),
            "--max-seconds-per-signature", str(config.max_seconds_per_signature)]
    if config.traces:
        args += ["--traces", *config.traces]
    if not config.sweep:
        args.append("--no-sweep")
    if config.threads:
        args += ["--threads", str(config.threads)]
    s = launch.run_runner("kernels", args, timeout_s=b * 2 + 300, log=context.log.info, context=context)
    return dg.MaterializeResult(metadata=to_metadata(s))


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[hardware], kinds={"pytorch"}, pool=TIMING_POOL)
def collective_benchmarks(context: dg.AssetExecutionContext, config: CollectiveBenchConfig,
                          warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send/recv via torchrun workers."""
    gpu = context.partition_key
    root = warehouse_store.path()
    base, _ = launch.current_run_id(root, gpu, config.run_id)
    run_id = f"{base}-collectives"
    b = budget(config.budget_s, DEFAULT_COLLECTIVE_BUDGET_S, gpu)
    args = ["--gpu", gpu, "--run-id", run_id, "--root", str(root), "--budget-s", str(b),
            "--repeats", str(config.repeats), "--size-step", str(config.size_step)]
    if config.ranks:
        args += ["--ranks", str(config.ranks)]
    if config.max_bytes:
        args += ["--max-bytes", str(config.max_bytes)]
    s = launch.run_runner("collectives", args, timeout_s=b * 3 + 300, log=context.log.info, context=context)
    return dg.MaterializeResult(metadata=to_metadata(s))


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[hardware], kinds={"pytorch"}, pool=TIMING_POOL)
def in_training_benchmarks(context: dg.AssetExecutionContext, config: InTrainingBenchConfig,
                           warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """Every op of real training steps, timed where it ran (`pipelines.runners.in_training`): the CPU's
    in-training rows beside its isolated ones. A GPU partition's come from public profiler traces
    (`maya_models.reference.kineto`), so there this step measures nothing."""
    from emulator.core.hardware import get_gpu

    gpu = context.partition_key
    if not get_gpu(gpu).is_cpu:
        return dg.MaterializeResult(metadata={"skipped": "GPU partitions take their in-training rows from "
                                                         "public profiler traces (reference_measurements)"})
    root = warehouse_store.path()
    base, _ = launch.current_run_id(root, gpu, config.run_id)
    args = ["--gpu", gpu, "--run-id", f"{base}-in-training", "--root", str(root),
            "--budget-s", str(config.budget_s)]
    if config.only:
        args += ["--only", config.only]
    s = launch.run_runner("in_training", args, timeout_s=config.budget_s * 3 + 900, log=context.log.info,
                          context=context)
    return dg.MaterializeResult(metadata=to_metadata(s))


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, kinds={"parquet"}, pool=WAREHOUSE_POOL)
def reference_measurements(context: dg.AssetExecutionContext,
                           warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """The committed public measurements (warehouse/reference/) written into the warehouse per gpu/source.

    Every partition imports all of them: cross-GPU predictors train on every part's data, and the
    import is an idempotent atomic swap per (gpu, source).
    """
    from maya_models.reference import import_reference

    res = import_reference(root=warehouse_store.path())
    mine = {k: v for k, v in res["partitions"].items() if k.split("/", 1)[0] == context.partition_key}
    return dg.MaterializeResult(metadata={"rows": res["rows"], "rows_this_gpu": sum(mine.values()),
                                          "partitions": dg.MetadataValue.json(res["partitions"])})


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, kinds={"duckdb"},
          deps=[kernel_benchmarks, collective_benchmarks, in_training_benchmarks, reference_measurements],
          pool=WAREHOUSE_POOL)
def warehouse(context: dg.AssetExecutionContext, warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """DuckDB views over the Parquet measurements (the quality checks are `pipelines.calibration.checks`).

    Finishing this step also closes the calibration run: the next one gets a new run id.
    """
    from maya_models.warehouse import connect, scan_corrupt

    gpu = context.partition_key
    root = warehouse_store.path()
    corrupt = scan_corrupt(root)
    counts, views = [], "refreshed"
    if corrupt:  # DuckDB's views read every file; leave them as they were and let the check name the files
        views = f"not refreshed: {len(corrupt)} corrupt file(s)"
    else:
        con = connect(root)
        try:
            counts = con.execute("SELECT source, kind, status, count(*) FROM measurements WHERE gpu = ? "
                                 "GROUP BY ALL ORDER BY ALL", [gpu]).fetchall()
        finally:
            con.close()
    run_id = launch.pending_run_id(root, gpu)
    if run_id:
        launch.finish_run(root, gpu, run_id)
    return dg.MaterializeResult(
        metadata={"rows": sum(int(c[3]) for c in counts), "run_id_closed": run_id or "",
                  "duckdb": str(root / "maya.duckdb"), "views": views,
                  "counts": dg.MetadataValue.json([list(map(str, c)) for c in counts])})


CALIBRATION_ASSETS = [hardware, kernel_benchmarks, collective_benchmarks, in_training_benchmarks,
                      reference_measurements, warehouse]
