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


PLOTTED = ("median_ape", "p90_ape", "n")  # per-family figures Dagster plots over materializations


def training_metadata(res: dict) -> dict:
    """A predictor training result as metadata: everything `result_metadata` gives, plus one float per family
    and figure (`gemm.median_ape`, ..., percent; `.n` rows held out), which the asset's page plots across
    runs, and a link to the MLflow run."""
    out = result_metadata(res)
    for fam, m in sorted((res.get("metrics") or {}).items()):
        for k in PLOTTED:
            v = m.get(k) if isinstance(m, dict) else None
            if isinstance(v, int | float) and v == v:
                out[f"{fam}.{k}"] = dg.MetadataValue.float(float(v))
    if isinstance(res.get("score"), int | float) and res["score"] == res["score"]:
        out["score"] = dg.MetadataValue.float(float(res["score"]))
    if res.get("run_id"):
        from maya_models.registry import run_url

        out["mlflow_run"] = dg.MetadataValue.url(run_url(str(res["run_id"])))
    return out
