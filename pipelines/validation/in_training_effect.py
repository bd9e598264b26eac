"""What the in-training rows change: CPU kernel time of each validation case, predicted from isolated rows
only and from isolated + in-training rows, against the per-op time `maya profile` measured in the same run.

Both predictors are trained here, on the same warehouse (nothing is registered); each case's emulated
trace is predicted op by op for one steady iteration, and the slowest rank's kernel sum is compared with
the profiled one (the mean over its steady iterations).

    python -m pipelines.validation.in_training_effect [--runs <warehouse>/validation/runs]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from emulator.trace.io import read_traces
from pipelines.runners.in_training import SOURCE, profiled_steady_iterations


def kernel_times(case: Path, predictors: dict) -> dict[str, float] | None:
    """{predictor name: predicted kernel seconds, "measured": profiled kernel seconds} (slowest rank): the
    emulation's last full iteration against the profile's steady iterations, chosen as the in-training rows'
    (`profiled_steady_iterations`)."""
    emu_dir, prof_dir = case / "emulate", case / "profile-ops"
    if not (emu_dir / "trace").is_dir() or not (prof_dir / "trace").is_dir():
        return None
    emu, real = read_traces(emu_dir), read_traces(prof_dir)
    tot: dict[str, list[float]] = {}
    for r in emu.keys() & real.keys():
        e, p = emu[r].to_pandas(), real[r].to_pandas()
        e = e[(e.iteration == sorted(e.iteration.unique())[-2]) & (e.kind == "kernel")].reset_index(drop=True)
        steady = profiled_steady_iterations(p.iteration.unique())
        p = p[(p.kind == "kernel") & p.iteration.isin(steady)]
        for name, pred in predictors.items():
            tot.setdefault(name, []).append(float(pred.predict(e)["duration_s"].sum()))
        tot.setdefault("measured", []).append(float(p.duration_s.sum()) / len(steady))
    return {k: max(v) for k, v in tot.items()} if tot else None


def main(argv=None) -> int:
    from emulator.core.settings import warehouse_root
    from maya_models.train import train_kernel_predictor
    from maya_models.warehouse import read_measurements

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default=None, help="validation runs folder (default <warehouse>/validation/runs)")
    a = p.parse_args(argv)
    runs = Path(a.runs) if a.runs else warehouse_root() / "validation" / "runs"
    cases = sorted(c for c in runs.glob("cpu-*") if (c / "profile-ops").is_dir())
    if not cases:
        raise SystemExit(f"no CPU case with a per-op profile under {runs} (run make validate ARGS=--cpu-only)")
    rows = read_measurements(gpu="cpu")
    predictors = {name: train_kernel_predictor("cpu", data=data, register=False, return_predictor=True)["predictor"]
                  for name, data in (("isolated", rows[rows["source"] != SOURCE]), ("with in-training", rows))}
    errors: dict[str, list[float]] = {name: [] for name in predictors}
    print("| case | " + " | ".join(f"{n} (error)" for n in predictors) + " | measured |")
    print("|---|" + "---|" * (len(predictors) + 1))
    for case in cases:
        t = kernel_times(case, predictors)
        if t is None:
            continue
        cells = []
        for name in predictors:
            err = t[name] / t["measured"] - 1
            errors[name].append(abs(err))
            cells.append(f"{t[name] * 1e3:.1f} ms ({err:+.1%})")
        print(f"| {case.name} | " + " | ".join(cells) + f" | {t['measured'] * 1e3:.1f} ms |")
    for name, e in errors.items():
        print(f"{name}: kernel-time MAPE {sum(e) / len(e):.1%} over {len(e)} cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
