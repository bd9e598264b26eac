"""The Dagster code location: `dagster dev -m pipelines.definitions` (`make dagster`).

Engineer F's validation assets (`pipelines.validation.assets`) are added when that module exists.
"""

import importlib

import dagster as dg

from pipelines.assets import ALL_ASSETS
from pipelines.automation import calibration_job, recalibration_schedule, trace_shapes_job, trace_shapes_sensor
from pipelines.resources import WarehouseResource


def _validation_assets() -> list:
    try:
        mod = importlib.import_module("pipelines.validation.assets")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("pipelines.validation"):
            return []
        raise
    return list(dg.load_assets_from_modules([mod]))


defs = dg.Definitions(
    assets=[*ALL_ASSETS, *_validation_assets()],
    jobs=[calibration_job, trace_shapes_job],
    schedules=[recalibration_schedule],
    sensors=[trace_shapes_sensor],
    resources={"warehouse_store": WarehouseResource()},
)
