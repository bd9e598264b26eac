"""The calibration chain as Dagster assets, one partition per GPU type.

    hardware ─┬─ kernel_benchmarks ─────┐
              └─ collective_benchmarks ─┼─ warehouse ─┬─ kernel_predictor ─────┐
    reference_measurements ─────────────┘             └─ collective_predictor ─┴─ published_predictors

`warehouse` builds the DuckDB views and carries the asset checks.

Benchmarks run the runners in subprocesses (`pipelines.launch`) and return their summaries as
metadata. Training and publishing call maya_models (engineer D's code); they end the chain.
"""


import json

import dagster as dg

from pipelines import launch
from pipelines.resources import (
    DEFAULT_COLLECTIVE_BUDGET_S,
    DEFAULT_KERNEL_BUDGET_S,
    GPU_PARTITIONS,
    CollectiveBenchConfig,
    KernelBenchConfig,
    WarehouseResource,
    budget,
)

GROUP = "calibration"


def _meta(summary: dict) -> dict:
    """Runner summary → Dagster metadata (scalars as is, the rest as JSON)."""
    out = {}
    for k, v in summary.items():
        out[k] = v if isinstance(v, bool | int | float | str) else dg.MetadataValue.json(v)
    return out


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, kinds={"python"})
def hardware(context: dg.AssetExecutionContext, warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """What this partition is measured on: NVML facts per GPU, or the CPU's description."""
    gpu = context.partition_key
    root = warehouse_store.path()
    run_id, resumed = launch.current_run_id(root, gpu)
    s = launch.run_runner("hardware", ["--gpu", gpu, "--run-id", run_id, "--root", str(root)], timeout_s=120,
                          log=context.log.info)
    nvml = s.get("nvml", {})
    return dg.MaterializeResult(metadata={
        "run_id": run_id, "resumed": resumed, "path": s["path"], "cpu_model": s["cpu"]["model"],
        "cpu_threads": s["cpu"]["torch_threads"], "nvml_available": bool(nvml.get("available")),
        "nvml": dg.MetadataValue.json(nvml)})


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[hardware], kinds={"pytorch"})
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
    s = launch.run_runner("kernels", args, timeout_s=b * 2 + 300, log=context.log.info)
    return dg.MaterializeResult(metadata=_meta(s))


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[hardware], kinds={"pytorch"})
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
    s = launch.run_runner("collectives", args, timeout_s=b * 3 + 300, log=context.log.info)
    return dg.MaterializeResult(metadata=_meta(s))


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, kinds={"parquet"})
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


def _check_specs():
    from pipelines.checks import CHECK_NAMES

    return [dg.AssetCheckSpec(name, asset="warehouse") for name in CHECK_NAMES]


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, kinds={"duckdb"},
          deps=[kernel_benchmarks, collective_benchmarks, reference_measurements], check_specs=_check_specs())
def warehouse(context: dg.AssetExecutionContext, warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """DuckDB views over the Parquet measurements, plus the quality checks of this GPU's rows.

    Finishing this step also closes the calibration run: the next one gets a new run id.
    """
    from maya_models.warehouse import connect, read_measurements, scan_corrupt
    from pipelines import checks

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
    df = read_measurements(gpu=gpu, status=None, root=root, skip_corrupt=True)
    outcomes = checks.run_all(df, gpu, corrupt)
    run_id = launch.pending_run_id(root, gpu)
    if run_id:
        launch.finish_run(root, gpu, run_id)
    sev = {"ERROR": dg.AssetCheckSeverity.ERROR, "WARN": dg.AssetCheckSeverity.WARN}
    return dg.MaterializeResult(
        metadata={"rows": len(df), "run_id_closed": run_id or "", "duckdb": str(root / "maya.duckdb"), "views": views,
                  "counts": dg.MetadataValue.json([list(map(str, c)) for c in counts])},
        check_results=[dg.AssetCheckResult(check_name=o.name, passed=o.passed, severity=sev[o.severity],
                                           description=o.description, metadata=_meta(o.metadata))
                       for o in outcomes])


def _model_meta(res: dict) -> dict:
    """maya_models' result dict → metadata: the fitted predictor object stays out, the rest as JSON."""
    clean = json.loads(json.dumps({k: v for k, v in res.items() if k != "predictor"}, default=str))
    return _meta(clean)


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[warehouse], kinds={"xgboost", "mlflow"})
def kernel_predictor(context: dg.AssetExecutionContext, warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """Train the kernel predictor for this GPU, evaluate it on held-out shapes, register an MLflow version."""
    from maya_models.train import train_kernel_predictor

    return dg.MaterializeResult(metadata=_model_meta(
        train_kernel_predictor(context.partition_key, root=warehouse_store.path())))


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[warehouse], kinds={"xgboost", "mlflow"})
def collective_predictor(context: dg.AssetExecutionContext,
                         warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """Train the collective predictor for this GPU and register an MLflow version."""
    from maya_models.train import train_collective_predictor

    return dg.MaterializeResult(metadata=_model_meta(
        train_collective_predictor(context.partition_key, root=warehouse_store.path())))


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[kernel_predictor, collective_predictor],
          kinds={"mlflow"})
def published_predictors(context: dg.AssetExecutionContext,
                         warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """Move each `champion` alias to the newest version only where it beats the current champion."""
    from maya_models.train import publish

    gpu, root = context.partition_key, warehouse_store.path()
    out = {kind: publish(gpu, kind=kind, root=root) for kind in ("kernels", "collectives")}
    meta = {f"{kind}_promoted": bool(r.get("promoted")) for kind, r in out.items()}
    meta.update({f"{kind}_champion": str(r.get("champion")) for kind, r in out.items()})
    return dg.MaterializeResult(metadata={**meta, **_model_meta({"gate": out})})


BENCHMARK_ASSETS = [hardware, kernel_benchmarks, collective_benchmarks, reference_measurements, warehouse]
PREDICTOR_ASSETS = [kernel_predictor, collective_predictor, published_predictors]
ALL_ASSETS = BENCHMARK_ASSETS + PREDICTOR_ASSETS
