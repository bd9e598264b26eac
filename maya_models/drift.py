"""How far a part's speed moved between its calibrations: the same op signatures, measured again.

Every calibration of the `cpu` part measures its whole set anew, so consecutive calibrations share
hundreds of signatures. For each pair of consecutive calibrations (by when they measured) and each
source, this prints how many signatures both measured and the ratio of their median times (later /
earlier): its median and quartiles. A ratio far from 1 means the machine itself changed speed between
them: a prediction for the `cpu` part (whose predictors pool every calibration, the machine's typical
speed) cannot be closer to one run on it than that.

    python -m maya_models.drift [--gpu cpu] [--min-shared 20]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

# the suites one calibration writes, each under the calibration's run id plus its suffix
# (pipelines.calibration.assets, which this package may not import)
CALIBRATION_SUITES = ("-kernels", "-collectives", "-in-training")
COLUMNS = ["source", "earlier", "later", "shared", "median_ratio", "q25", "q75", "row_median_ape", "row_mape"]


def calibration_of(run_id) -> str:
    """The calibration a row's run belongs to: its run id without the suite suffix ("" when it has none)."""
    run_id = run_id if isinstance(run_id, str) else ""
    for suffix in CALIBRATION_SUITES:
        if run_id.endswith(suffix):
            return run_id[: -len(suffix)]
    return run_id


def drift_table(rows: pd.DataFrame, min_shared: int = 20) -> pd.DataFrame:
    """One line per (source, earlier calibration, later calibration) of consecutive calibrations: signatures
    both measured (ok rows, median per signature and timing condition) and the later/earlier time ratio."""
    ok = rows[(rows["status"] == "ok") & (pd.to_numeric(rows["duration_s"], errors="coerce") > 0)].copy()
    if not len(ok):
        return pd.DataFrame(columns=COLUMNS)
    ok["calibration"] = ok["run_id"].map(calibration_of)
    ok["timing"] = ok["timing"].fillna("") if "timing" in ok.columns else ""
    ok["duration_s"] = pd.to_numeric(ok["duration_s"])
    when = pd.to_datetime(ok["measured_at"], utc=True, errors="coerce").groupby(ok["calibration"]).min()
    med = ok.groupby(["source", "calibration", "signature", "timing"])["duration_s"].median()
    out = []
    for source, by_cal in med.groupby(level="source"):
        cals = sorted(by_cal.index.get_level_values("calibration").unique(), key=lambda c: when.get(c, pd.NaT))
        for earlier, later in zip(cals, cals[1:], strict=False):
            a = by_cal.xs(earlier, level="calibration").droplevel("source")
            b = by_cal.xs(later, level="calibration").droplevel("source")
            ratio = (b / a).dropna()
            if len(ratio) >= min_shared:
                own = np.abs(ratio / ratio.median() - 1) * 100  # each row's move beyond the common shift
                out.append({"source": source, "earlier": earlier, "later": later, "shared": len(ratio),
                            "median_ratio": ratio.median(), "q25": ratio.quantile(0.25), "q75": ratio.quantile(0.75),
                            "row_median_ape": own.median(), "row_mape": own.mean()})
    return pd.DataFrame(out, columns=COLUMNS)


def main(argv=None) -> int:
    from maya_models.warehouse import read_measurements

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="cpu", help="the part whose calibrations are compared (default cpu)")
    p.add_argument("--min-shared", type=int, default=20, help="skip pairs sharing fewer signatures")
    p.add_argument("--kind", default=None, help="only rows of this kind (kernel, collective, ...; default every kind)")
    p.add_argument("--root", action="append", default=None, metavar="WAREHOUSE",
                   help="read these warehouses together (repeatable; default $MAYA_WAREHOUSE): calibrations made "
                        "in separate warehouses, compared as one history")
    a = p.parse_args(argv)
    rows = pd.concat([read_measurements(gpu=a.gpu, kind=a.kind, root=r) for r in (a.root or [None])], ignore_index=True)
    table = drift_table(rows, a.min_shared)
    if not len(table):
        print(f"no two calibrations of {a.gpu} share {a.min_shared} or more signatures")
        return 0
    print("| source | earlier calibration | later calibration | shared signatures | later / earlier (median) | IQR "
          "| a row beyond that: median, mean |")
    print("|---|---|---|---|---|---|---|")
    for r in table.itertuples():
        print(f"| {r.source} | {r.earlier} | {r.later} | {r.shared} | x{r.median_ratio:.3f} | "
              f"x{r.q25:.2f}-{r.q75:.2f} | {r.row_median_ape:.1f}%, {r.row_mape:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
