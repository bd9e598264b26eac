"""Does a second rank slow the first one's kernels? One program profiled at 1 rank and at 2 ranks on this
machine, with the same per-rank shapes (a data-parallel program: DDP or FSDP, the per-rank batch fixed).

The CPU validation's two-rank cases come out short while its one-process cases do not. If the kernels of a
rank ran slower beside a second rank (shared caches and memory bandwidth), the isolated and one-process
in-training measurements would miss it. This prints, per op family, the median over shared op signatures of
(2-rank time / 1-rank time) and the time-weighted ratio, and per steady iteration the step's wall time, its
kernel sum and its host gaps at each rank count, so what the second rank adds can be read off.

    python -m pipelines.validation.rank_contention [--out DIR] [PROGRAM ARGS...]
    (default: examples/ddp.py at width 448, the in-training calibration program ddp-d448)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd

from emulator.core.ops import op_family
from emulator.trace.io import read_rank_trace
from pipelines.runners.in_training import profiled_steady_iterations

DEFAULT_PROGRAM = ["examples/ddp.py", "--model", "tiny", "--d-model", "448", "--layers", "2", "--heads", "7",
                   "--kv-heads", "7", "--seq-len", "128", "--vocab", "2048", "--batch-size", "3",
                   "--dtype", "float32", "--steps", "8"]
ITERATIONS = 7


def steady_rows(out: Path, rank: int = 0) -> pd.DataFrame:
    """A profile's rows of its steady iterations (`profiled_steady_iterations`), with an op signature."""
    t = read_rank_trace(out, rank).to_pandas()
    t = t[t.iteration.isin(profiled_steady_iterations(t.iteration.unique()))]
    return t.assign(sig=t.op + " " + t.shapes.astype(str) + " " + t.args.astype(str))


def family_ratios(one: pd.DataFrame, two: pd.DataFrame) -> pd.DataFrame:
    """Per family: shared signatures, median of their (2-rank / 1-rank) median times, the time-weighted ratio and
    the family's 1-rank kernel time per iteration (ms). Kernel rows only."""
    def per_sig(t):
        k = t[t.kind == "kernel"]
        return k.groupby("sig").agg(op=("op", "first"), d=("duration_s", "median"), n=("duration_s", "size"))

    n_iter = max(one.iteration.nunique(), 1)
    j = per_sig(one).join(per_sig(two)[["d"]].rename(columns={"d": "d2"}), how="inner")
    j["family"] = j.op.map(op_family)
    rows = []
    for fam, g in j.groupby("family"):
        rows.append({"family": fam, "signatures": len(g), "median_ratio": float((g.d2 / g.d).median()),
                     "time_weighted": float((g.d2 * g.n).sum() / (g.d * g.n).sum()),
                     "ms_per_iteration": float((g.d * g.n).sum() * 1e3 / n_iter)})
    return pd.DataFrame(rows).sort_values("ms_per_iteration", ascending=False).reset_index(drop=True)


def steady_rows_by_rank(out: Path) -> dict[int, pd.DataFrame]:
    """Every rank's steady rows of one profile, read once (`steady_rows`)."""
    summary = json.loads((out / "emulation.json").read_text())
    return {int(r): steady_rows(out, int(r)) for r in summary["measured_iterations_s"]}


def step_parts(out: Path, rows: dict[int, pd.DataFrame]) -> dict[str, float]:
    """Median over steady iterations and ranks of the wall time, kernel sum and host gaps (ms)."""
    summary = json.loads((out / "emulation.json").read_text())
    wall, kern, gaps = [], [], []
    for r, times in summary["measured_iterations_s"].items():
        t = rows[int(r)]
        wall += [times[i] * 1e3 for i in t.iteration.unique() if i < len(times)]
        kern += (t[t.kind == "kernel"].groupby("iteration").duration_s.sum() * 1e3).tolist()
        gaps += (t.groupby("iteration").host_gap_s.sum() * 1e3).tolist()
    return {"wall_ms": statistics.median(wall), "kernels_ms": statistics.median(kern),
            "host_gaps_ms": statistics.median(gaps)}


def profile(program: list[str], ranks: int, out: Path) -> None:
    cmd = [sys.executable, "-m", "emulator.cli", "profile", "--nproc-per-node", str(ranks), "--iterations",
           str(ITERATIONS), "--out", str(out), *program]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("out/rank-contention"))
    p.add_argument("program", nargs=argparse.REMAINDER, help="script and args (default: the ddp-d448 program)")
    a = p.parse_args(argv)
    program = a.program or DEFAULT_PROGRAM
    outs = {n: a.out / f"ranks-{n}" for n in (1, 2)}
    for n, out in outs.items():
        profile(program, n, out)
    rows = {n: steady_rows_by_rank(out) for n, out in outs.items()}
    print(family_ratios(rows[1][0], rows[2][0]).round(3).to_string(index=False))
    for n, out in outs.items():
        parts = step_parts(out, rows[n])
        print(f"{n} rank(s): " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
