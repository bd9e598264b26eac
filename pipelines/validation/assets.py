"""Dagster asset `validation_report`: maya's end-to-end error, as a materialization with metadata.

It runs the same code as `make validate`; run
config picks the tables and the quick subset. Metadata carries the headline numbers (MAPE,
median |error|, target met) so the Dagster UI shows the trend across materializations, plus the
markdown report itself and the paths of the JSON and plots.
"""


import dagster as dg

from pipelines.validation.validate import run_validation


class ValidationConfig(dg.Config):
    cpu: bool = True  # CPU table: real runs on this machine vs `maya predict --gpu cpu`
    gpu: bool = True  # GPU table: published holdout measurements (skipped when the data is absent)
    quick: bool = False  # a few cases per table
    fresh: bool = False  # rerun cached cases
    resimulate: bool = False  # reuse finished emulations, simulate again (new predictors)
    timeout_s: float = 900.0


def _metric(section: dict | None, label: str, key: str) -> float | None:
    if not section or section.get("skipped"):
        return None
    value = section["summary"][label][key]
    return None if value is None else float(value)


def report_metadata(rep: dict) -> dict:
    """Dagster metadata of a validation report dict (kept separate so tests can check it)."""
    meta: dict = {}
    for key, target in (("cpu", "median_abs"), ("gpu", "mape")):
        section = rep.get(key)
        if section is None:
            continue
        if section.get("skipped"):
            meta[f"{key}_skipped"] = dg.MetadataValue.text(section["skipped"])
            continue
        summary = section["summary"]
        meta[f"{key}_rows"] = dg.MetadataValue.int(summary["maya"]["n"])
        meta[f"{key}_scored"] = dg.MetadataValue.int(summary["maya"]["scored"])
        for label in ("maya", "roofline", "llm-analysis"):
            value = _metric(section, label, target)
            if value is not None:
                meta[f"{key}_{label.replace('-', '_')}_{target}"] = dg.MetadataValue.float(value)
        met = summary["target"]["met"]
        meta[f"{key}_target_met"] = dg.MetadataValue.text({True: "yes", False: "no", None: "not scored"}[met])
    files = rep.get("files", {})
    if "json" in files:
        meta["report_json"] = dg.MetadataValue.path(files["json"])
    for plot in ("cpu_plot", "gpu_plot"):
        if plot in files:
            meta[plot] = dg.MetadataValue.path(files[plot])
    if "markdown" in files:
        with open(files["markdown"]) as f:
            meta["report"] = dg.MetadataValue.md(f.read())
    return meta


@dg.asset(group_name="validation", compute_kind="python",
          description="Iteration-time error of maya against real CPU runs and published GPU measurements "
                      "(report + plots under <warehouse>/validation/).")
def validation_report(context: dg.AssetExecutionContext, config: ValidationConfig) -> dg.MaterializeResult:
    rep = run_validation(cpu=config.cpu, gpu=config.gpu, quick=config.quick, fresh=config.fresh,
                         timeout_s=config.timeout_s, resimulate=config.resimulate)
    for key in ("cpu", "gpu"):
        section = rep.get(key) or {}
        for row in section.get("rows", []):
            if row.get("error"):
                context.log.warning(f"{row['name']}: {str(row['error'])[:300]}")
    return dg.MaterializeResult(metadata=report_metadata(rep))


VALIDATION_ASSETS = [validation_report]
