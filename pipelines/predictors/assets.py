"""Predictor assets, one partition per GPU type: train on the warehouse, register in MLflow, gate the champion.

    warehouse ─┬─ kernel_predictor ─────┐
               └─ collective_predictor ─┴─ published_predictors
"""

import dagster as dg

from pipelines.calibration.assets import warehouse
from pipelines.metadata import result_metadata, training_metadata
from pipelines.resources import GPU_PARTITIONS, WarehouseResource

GROUP = "predictors"


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[warehouse], kinds={"xgboost", "mlflow"})
def kernel_predictor(context: dg.AssetExecutionContext, warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """Train the kernel predictor for this GPU, evaluate it on held-out shapes, register an MLflow version."""
    from maya_models.train import train_kernel_predictor

    return dg.MaterializeResult(metadata=training_metadata(
        train_kernel_predictor(context.partition_key, root=warehouse_store.path(), progress=context.log.info)))


@dg.asset(partitions_def=GPU_PARTITIONS, group_name=GROUP, deps=[warehouse], kinds={"xgboost", "mlflow"})
def collective_predictor(context: dg.AssetExecutionContext,
                         warehouse_store: WarehouseResource) -> dg.MaterializeResult:
    """Train the collective predictor for this GPU and register an MLflow version."""
    from maya_models.train import train_collective_predictor

    return dg.MaterializeResult(metadata=training_metadata(
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
    return dg.MaterializeResult(metadata={**meta, **result_metadata({"gate": out})})


PREDICTOR_ASSETS = [kernel_predictor, collective_predictor, published_predictors]
