"""`python -m pipelines.validation` (= `make validate`): maya's prediction error, CPU and GPU tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from pipelines.validation.runner import GPU_ITERATIONS
from pipelines.validation.validate import run_validation


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipelines.validation", description=__doc__)
    p.add_argument("--cpu-only", action="store_true", help="only the CPU table (runs measured here)")
    p.add_argument("--gpu-only", action="store_true", help="only the GPU table (published measurements)")
    p.add_argument("--quick", action="store_true", help="a few cases of each table (smoke run)")
    p.add_argument("--fresh", action="store_true", help="rerun cases even when a finished run is cached")
    p.add_argument("--resimulate", action="store_true",
                   help="reuse finished emulations but simulate again (e.g. after new predictors)")
    p.add_argument("--stored", action="store_true",
                   help="run nothing: report the cases that already have results (re-render the report)")
    p.add_argument("--only", help="run only the cases whose name contains this")
    p.add_argument("--out", type=Path, help="report folder (default <warehouse>/validation)")
    p.add_argument("--gpu-iterations", type=int, default=GPU_ITERATIONS,
                   help="optimizer steps each GPU case emulates (the first is warm-up; default %(default)s)")
    p.add_argument("--timeout-s", type=float, default=900, help="per maya command")
    a = p.parse_args(argv)
    if a.cpu_only and a.gpu_only:
        p.error("--cpu-only and --gpu-only exclude each other")
    console = Console(width=max(Console().width, 140))
    rep = run_validation(cpu=not a.gpu_only, gpu=not a.cpu_only, quick=a.quick, fresh=a.fresh, out_dir=a.out,
                         only=a.only, timeout_s=a.timeout_s, console=console, resimulate=a.resimulate,
                         stored=a.stored, gpu_iterations=a.gpu_iterations)
    failed = [r["name"] for s in ("cpu", "gpu") for r in (rep.get(s) or {}).get("rows", [])
              if r["predicted_s"] is None and not r["oom"]]
    if failed:
        console.print(f"[red]{len(failed)} case(s) produced no prediction: {', '.join(failed)}[/red]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
