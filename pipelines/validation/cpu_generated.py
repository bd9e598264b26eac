"""How well the CPU's generated-kernel model times a compiled program it never saw (leave one program out).

The CPU calibration profiles several compiled training programs (`pipelines.runners.in_training.PROGRAMS`); each of
Inductor's C++ kernels there is one `cpp::pointwise` / `cpp::reduction` row of the warehouse, timed where it ran.
The trainer's own held-out figure splits those rows by shape group, so a program's other kernels still teach the
model the program's kernels. A user's program is a new program: here each compiled program in turn is left out,
the kernel predictor is trained on the others' rows (as `maya calibrate` trains it, nothing registered) and
predicts the left-out program's kernels, beside the labelled roofline of the same rows. A program's kernels weigh
by how often the profiled steady steps called each (the row's `repeats`), so the sum is the program's
generated-kernel time over those steps.

    python -m pipelines.validation.cpu_generated [--root WAREHOUSE]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines.runners.in_training import SOURCE


def compiled_rows(root: Path | None = None) -> pd.DataFrame:
    """The warehouse's in-training rows of generated CPU kernels, one per program and signature (median time)."""
    from maya_models.train import training_rows
    from maya_models.warehouse import read_measurements

    df = read_measurements(gpu="cpu", source=SOURCE, root=root)
    df = df[df["op"].astype(str).str.startswith("cpp::")]
    if df.empty:
        return df
    df = df.assign(repeats=pd.to_numeric(df["repeats"], errors="coerce").fillna(1.0))
    by_program = []
    for program, rows in df.groupby("provenance"):
        one = training_rows(data=rows)  # usable rows, repeated measurements of a signature merged
        by_program.append(one.assign(provenance=program))
    return pd.concat(by_program, ignore_index=True)


def leave_one_program_out(rows: pd.DataFrame) -> list[dict]:
    """Per left-out program: its generated-kernel time per steady step, measured, learned and roofline."""
    from emulator.core.hardware import get_gpu
    from maya_models.features import featurize
    from maya_models.train import InsufficientDataError, train_kernel_predictor

    out = []
    for program in sorted(rows["provenance"].unique()):
        test, train = rows[rows["provenance"] == program], rows[rows["provenance"] != program]
        try:
            predictor = train_kernel_predictor("cpu", data=train, register=False, return_predictor=True)["predictor"]
        except InsufficientDataError as e:
            raise SystemExit(f"too few compiled programs' rows to leave one out: {e}") from e
        learned = predictor.predict(test.reset_index(drop=True))
        roofline = featurize(test.reset_index(drop=True), get_gpu("cpu"))["roofline_s"].to_numpy()
        measured = test["duration_s"].to_numpy()
        calls = test["repeats"].to_numpy()
        time = learned["duration_s"].to_numpy()
        out.append({"program": program, "kernels": len(test), "measured_s": float((measured * calls).sum()),
                    "learned_s": float((time * calls).sum()), "roofline_s": float((roofline * calls).sum()),
                    "learned_share": float((learned["source"] == "learned").mean()),
                    "median_ape": float(np.median(np.abs(time / measured - 1)) * 100),
                    "roofline_median_ape": float(np.median(np.abs(roofline / measured - 1)) * 100)})
    return out


def report(results: list[dict]) -> str:
    lines = ["| left-out program | kernels | measured (steady steps) | learned | roofline | per-kernel median APE "
             "(roofline) |",
             "|---|---|---|---|---|---|"]
    for r in results:
        m = r["measured_s"]
        lines.append(f"| {r['program'].split(' examples/', 1)[-1]} | {r['kernels']} | {m * 1e3:.2f} ms | "
                     f"{r['learned_s'] * 1e3:.2f} ms ({(r['learned_s'] / m - 1) * 100:+.1f}%) | "
                     f"{r['roofline_s'] * 1e3:.2f} ms ({(r['roofline_s'] / m - 1) * 100:+.1f}%) | "
                     f"{r['median_ape']:.1f}% ({r['roofline_median_ape']:.1f}%) |")
    err = [abs(r["learned_s"] / r["measured_s"] - 1) * 100 for r in results]
    roof = [abs(r["roofline_s"] / r["measured_s"] - 1) * 100 for r in results]
    lines.append(f"\nmean |error| of a program's generated-kernel time: learned {np.mean(err):.1f}%, "
                 f"roofline {np.mean(roof):.1f}% ({len(results)} programs)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipelines.validation.cpu_generated",
                                description=__doc__.splitlines()[0])
    p.add_argument("--root", default=None, help="warehouse root (default $MAYA_WAREHOUSE or ./warehouse)")
    a = p.parse_args(argv)
    rows = compiled_rows(Path(a.root) if a.root else None)
    programs = rows["provenance"].nunique() if len(rows) else 0
    if programs < 3:
        raise SystemExit(f"the warehouse holds generated CPU kernels of {programs} compiled programs; leaving one out "
                         "needs 3 or more: run the CPU calibration first (`maya calibrate --gpu cpu`)")
    print(report(leave_one_program_out(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
