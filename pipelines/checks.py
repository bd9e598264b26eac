"""Quality checks on one GPU partition of the warehouse (run as Dagster asset checks).

Each check is a plain function over the partition's rows returning (passed, description, metadata),
so tests and the CLI can call them without Dagster. What they guard against:
- positive_times: a zero or negative median means a broken timer or an op that did not run.
- no_duplicate_signatures: a resumed run must not measure a chunk twice.
- noise: a large (p90 - p10) / median says the device was shared or throttling while timing.
- clock_stability: rows whose SM clock sagged >10% (NVML) are slower than the part really is.
- family_coverage: a predictor family with no measurement falls back to the roofline.
- parquet_integrity: a truncated or corrupt file is named so it can be deleted and re-measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

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


def run_all(df: pd.DataFrame, gpu: str, corrupt: list[tuple[Path, str]]) -> list[CheckOutcome]:
    return [positive_times(df), no_duplicate_signatures(df), noise(df, gpu), clock_stability(df),
            family_coverage(df, gpu), parquet_integrity(corrupt)]


CHECK_NAMES = ("positive_times", "no_duplicate_signatures", "noise", "clock_stability", "family_coverage",
               "parquet_integrity")
