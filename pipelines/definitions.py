"""The Dagster code location: `dagster dev -m pipelines.definitions` (`make dagster`).

Definitions by domain, each with its assets, checks and automation side by side:
calibration (`pipelines.calibration`), predictors (`pipelines.predictors`), validation
(`pipelines.validation.assets`), search (`pipelines.search.assets`: saved `maya search`es rerun on a
schedule); resources in `pipelines.resources`.
"""

import dagster as dg

from pipelines.calibration.assets import CALIBRATION_ASSETS
from pipelines.calibration.automation import (
    calibration_job,
    recalibration_schedule,
    trace_shapes_job,
    trace_shapes_sensor,
)
from pipelines.calibration.checks import WAREHOUSE_CHECKS
from pipelines.predictors.assets import PREDICTOR_ASSETS
from pipelines.resources import WarehouseResource
from pipelines.search.assets import SEARCH_ASSETS, search_job, search_schedule
from pipelines.validation.assets import VALIDATION_ASSETS

defs = dg.Definitions(
    assets=[*CALIBRATION_ASSETS, *PREDICTOR_ASSETS, *VALIDATION_ASSETS, *SEARCH_ASSETS],
    asset_checks=WAREHOUSE_CHECKS,
    jobs=[calibration_job, trace_shapes_job, search_job],
    schedules=[recalibration_schedule, search_schedule],
    sensors=[trace_shapes_sensor],
    resources={"warehouse_store": WarehouseResource()},
)
