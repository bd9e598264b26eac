"""Runner summaries and maya_models' results as Dagster metadata, shared by every domain's assets."""

import json

import dagster as dg


def to_metadata(summary: dict) -> dict:
    """Scalars as they are, everything else as JSON."""
    out = {}
    for k, v in summary.items():
        out[k] = v if isinstance(v, bool | int | float | str) else dg.MetadataValue.json(v)
    return out


def result_metadata(res: dict) -> dict:
    """maya_models' result dict: the fitted predictor object stays out, the rest as JSON."""
    return to_metadata(json.loads(json.dumps({k: v for k, v in res.items() if k != "predictor"}, default=str)))
