"""Which predictors a trial's answer comes from: part of its cache key, so new champions re-simulate.

Looked up once per GPU part before any trial runs; a part without registered predictors is a clear
error then (with how to get them), not a crash in every trial.
"""

from __future__ import annotations

from emulator.core import settings
from emulator.estimate.base import NoPredictorError
from emulator.estimate.registry import QuietMlflow, how_to_get_predictors

ROOFLINE = {"kernels": "roofline", "collectives": "roofline"}


def predictor_versions(gpu: str, roofline_only: bool = False) -> dict:
    """{"kernels": "<name> v<version> <run id>", "collectives": ...} of the champions of `gpu`."""
    if roofline_only:
        return dict(ROOFLINE)
    mlflow = settings.configured_mlflow()
    out = {}
    with QuietMlflow():
        client = mlflow.MlflowClient()
        for kind, name in (("kernels", settings.kernel_model_name(gpu)),
                           ("collectives", settings.collective_model_name(gpu))):
            try:
                mv = client.get_model_version_by_alias(name, settings.CHAMPION_ALIAS)
            except Exception:  # noqa: BLE001 - mlflow raises its own types for "no such model/alias"
                raise NoPredictorError(how_to_get_predictors(gpu)) from None
            out[kind] = f"{name} v{mv.version} {mv.run_id}"
    return out
