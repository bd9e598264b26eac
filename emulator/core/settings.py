"""Where maya keeps its data: the warehouse root, the committed reference data and the MLflow store.

One place for these so the emulator (which loads predictors), maya_models (which trains
them) and the pipelines (which measure) agree without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path


def warehouse_root() -> Path:
    """$MAYA_WAREHOUSE, else ./warehouse under the current directory."""
    return Path(os.environ.get("MAYA_WAREHOUSE") or Path.cwd() / "warehouse").resolve()


def reference_root() -> Path:
    """$MAYA_REFERENCE, else the committed `warehouse/reference` of the repository (next to the packages):
    public reference measurements and the GPU nodes' inventories measured for this project."""
    env = os.environ.get("MAYA_REFERENCE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "warehouse" / "reference"


def mlflow_tracking_uri() -> str:
    """$MLFLOW_TRACKING_URI, else a SQLite store inside the warehouse (the registry needs a DB store)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    root = warehouse_root()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'mlflow.db'}"


def configured_mlflow():
    """The mlflow module, pointed at maya's tracking and registry store (imported lazily: emulating needs
    no MLflow). Per-download progress bars are off: they would bury the prediction table."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    uri = mlflow_tracking_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return mlflow


def mlflow_artifact_root() -> str:
    return str(warehouse_root() / "mlartifacts")


def model_cache_dir() -> Path:
    """Local copies of registry models so predictions work offline once a model was loaded."""
    return Path(os.environ.get("MAYA_MODEL_CACHE") or warehouse_root() / "model_cache")


def kernel_model_name(gpu: str) -> str:
    return f"maya-kernels-{gpu}"


def collective_model_name(gpu: str) -> str:
    return f"maya-collectives-{gpu}"


CHAMPION_ALIAS = "champion"
