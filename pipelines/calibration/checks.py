"""Quality checks on one GPU partition of the warehouse, as Dagster asset checks on `warehouse`.

Each check is a plain function over the partition's rows returning a `CheckOutcome`, so tests and
the CLI can call them without Dagster, and an `@asset_check` beside it that runs it on the
partition. The integrity checks block: the predictors downstream do not train on a partition
that fails one. What they guard against:
- positive_times: a zero or negative median means a broken timer or an op that did not run.
- no_duplicate_signatures: a resumed run must not measure a chunk twice.
- noise: a large (p90 - p10) / median says the device was shared or throttling while timing.
- clock_stability: rows whose SM clock sagged >10% (NVML) are slower than the part really is.
- family_coverage: a predictor family with no measurement falls back to the roofline.
- parquet_integrity: a truncated or corrupt file is named so it can be deleted and re-measured.
"""


from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pandas as pd

from pipelines.calibration.assets import warehouse
from pipelines.metadata import to_metadata
from pipelines.resources import GPU_PARTITIONS, WarehouseResource

# families a training step needs measured on every device (memcpy/p2p are GPU-node specific)
REQUIRED_FAMILIES = ("gemm", "attention_fwd", "attention_bwd", "elementwise", "norm", "softmax_loss", "embedding",
                     "optimizer", "copy", "collective")
NOISE_MAX_MEDIAN_SPREAD = {"cpu": 1.0, "gpu": 0.10}  # median over a run's rows of (p90 - p10) / median
CLOCK_DROP_MAX_SHARE = 0.05


@dataclass
class CheckOutcome:
    name: str
    passed: bool
    description: str
    severity: str = "ERROR"  # ERROR | WARN
    metadata: dict = field(default_factory=dict)


def positive_times(df: pd.DataFrame) -> CheckOutcome:
    ok = df[df["status"] == "ok"]
    bad = ok[~(ok["duration_s"] > 0)]
    return CheckOutcome("positive_times", bad.empty,
                        f"{len(bad)} of {len(ok)} ok rows have a non-positive or missing duration"
                        + (f" (e.g. {bad['op'].iloc[0]} in run {bad['run_id'].iloc[0]})" if len(bad) else ""),
                        metadata={"rows_ok": len(ok), "rows_bad": len(bad)})


def no_duplicate_signatures(df: pd.DataFrame) -> CheckOutcome:
    if df.empty:
        return CheckOutcome("no_duplicate_signatures", True, "no rows", metadata={"duplicates": 0})
    keys = ["run_id", "source", "signature"] + (["group_size"] if "group_size" in df else [])
    dup = df[df.duplicated(subset=keys, keep=False)]
    dup = dup[dup["source"] == "maya-bench"]  # public datasets may repeat a signature (e.g. several frameworks)
    runs = sorted(dup["run_id"].unique().tolist())
    return CheckOutcome("no_duplicate_signatures", dup.empty,
                        f"{len(dup)} maya-bench rows share a signature within a run" + (f": runs {runs}" if runs
                                                                                        else ""),
                        metadata={"duplicates": len(dup)})


def noise(df: pd.DataFrame, gpu: str) -> CheckOutcome:
    mine = df[(df["source"] == "maya-bench") & (df["status"] == "ok")]
    limit = NOISE_MAX_MEDIAN_SPREAD["cpu" if gpu == "cpu" else "gpu"]
    if mine.empty:
        return CheckOutcome("noise", True, "no maya-bench rows to judge", "WARN")
    per_run = mine.groupby("run_id")["spread"].median()
    worst = float(per_run.max())
    return CheckOutcome("noise", worst <= limit,
                        f"median spread per run {per_run.round(3).to_dict()} (limit {limit})", "WARN",
                        metadata={"worst_median_spread": worst, "limit": limit})


def clock_stability(df: pd.DataFrame) -> CheckOutcome:
    mine = df[(df["source"] == "maya-bench") & (df["status"] == "ok")]
    clocked = mine[mine["clock_mhz"].notna()]
    if clocked.empty:
        return CheckOutcome("clock_stability", True, "no NVML clock samples (CPU or no NVML): nothing to judge",
                            "WARN", metadata={"rows_with_clock": 0})
    share = float(clocked["clock_drop"].fillna(False).astype(bool).mean())
    return CheckOutcome("clock_stability", share <= CLOCK_DROP_MAX_SHARE,
                        f"{share:.1%} of clocked rows ran >10% below the run's max SM clock",
                        "WARN", metadata={"rows_with_clock": len(clocked), "drop_share": share})


def family_coverage(df: pd.DataFrame, gpu: str) -> CheckOutcome:
    ok = df[df["status"] == "ok"]
    counts = ok.groupby("family").size().to_dict() if not ok.empty else {}
    missing = [f for f in REQUIRED_FAMILIES if not counts.get(f)]
    return CheckOutcome("family_coverage", not missing,
                        f"{gpu}: no ok measurement for {missing}" if missing else f"{gpu}: every family measured",
                        metadata={"rows_per_family": {k: int(v) for k, v in counts.items()}, "missing": missing})


def parquet_integrity(corrupt: list[tuple[Path, str]]) -> CheckOutcome:
    files = [str(p) for p, _ in corrupt]
    return CheckOutcome("parquet_integrity", not corrupt,
                        "corrupt measurement files: " + "; ".join(f"{p} ({why})" for p, why in corrupt)
                        if corrupt else "every measurement file reads in full",
                        metadata={"corrupt_files": files})


# -- the Dagster face ------------------------------------------------------------------------------
_SEVERITY = {"ERROR": dg.AssetCheckSeverity.ERROR, "WARN": dg.AssetCheckSeverity.WARN}


def _result(outcome: CheckOutcome) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=outcome.passed, severity=_SEVERITY[outcome.severity],
                               description=outcome.description, metadata=to_metadata(outcome.metadata))


def _rows(context: dg.AssetCheckExecutionContext, store: WarehouseResource) -> pd.DataFrame:
    from maya_models.warehouse import read_measurements

    return read_measurements(gpu=context.partition_key, status=None, root=store.path(), skip_corrupt=True)


def _check(name: str, blocking: bool, description: str):
    return dg.asset_check(asset=warehouse, name=name, partitions_def=GPU_PARTITIONS, blocking=blocking,
                          description=description)


@_check("parquet_integrity", True, "every measurement file reads in full")
def parquet_integrity_check(context: dg.AssetCheckExecutionContext,
                            warehouse_store: WarehouseResource) -> dg.AssetCheckResult:
    from maya_models.warehouse import scan_corrupt

    return _result(parquet_integrity(scan_corrupt(warehouse_store.path())))


@_check("positive_times", True, "every ok row has a positive duration")
def positive_times_check(context: dg.AssetCheckExecutionContext,
                         warehouse_store: WarehouseResource) -> dg.AssetCheckResult:
    return _result(positive_times(_rows(context, warehouse_store)))


@_check("no_duplicate_signatures", True, "a run measures each signature once")
def no_duplicate_signatures_check(context: dg.AssetCheckExecutionContext,
                                  warehouse_store: WarehouseResource) -> dg.AssetCheckResult:
    return _result(no_duplicate_signatures(_rows(context, warehouse_store)))


@_check("noise", False, "the repeats of a run agree")
def noise_check(context: dg.AssetCheckExecutionContext, warehouse_store: WarehouseResource) -> dg.AssetCheckResult:
    return _result(noise(_rows(context, warehouse_store), context.partition_key))


@_check("clock_stability", False, "the SM clock held while timing")
def clock_stability_check(context: dg.AssetCheckExecutionContext,
                          warehouse_store: WarehouseResource) -> dg.AssetCheckResult:
    return _result(clock_stability(_rows(context, warehouse_store)))


@_check("family_coverage", False, "every op family a training step needs is measured")
def family_coverage_check(context: dg.AssetCheckExecutionContext,
                          warehouse_store: WarehouseResource) -> dg.AssetCheckResult:
    return _result(family_coverage(_rows(context, warehouse_store), context.partition_key))


WAREHOUSE_CHECKS = [parquet_integrity_check, positive_times_check, no_duplicate_signatures_check, noise_check,
                    clock_stability_check, family_coverage_check]
