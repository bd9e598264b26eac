"""`python -m pipelines.search` (= `make search-eval`): maya search against measured optima, and search efficiency.

Prints the regret / top-3 / Spearman table per group with the roofline-only, llm-analysis and 6N x tokens
baselines, then evaluations-to-within-1% for cmaes, random and grid; writes both to
`<warehouse>/search/eval/` (report.md, report.json). Every emulation and trial is cached in the
warehouse, so a rerun only computes what is new.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from pipelines.search.evaluate import DEFAULT_PROGRAM, GroupSelectionError
from pipelines.search.groups import ITERATIONS, MULTI_NODE_ITERATIONS, check_iterations, require_program
from pipelines.search.report import run_eval
from pipelines.validation.holdout import PROGRAMS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipelines.search", description=__doc__)
    p.add_argument("--multi", default=None, help="comma-separated multi-node groups (default: those that fit here)")
    p.add_argument("--single", type=int, default=None, help="how many single-node groups (cheapest first)")
    p.add_argument("--only", help="only groups whose name contains this")
    p.add_argument("--no-ranking", action="store_true", help="skip the vTrain ranking part")
    p.add_argument("--no-efficiency", action="store_true", help="skip the search-efficiency part")
    p.add_argument("--seeds", type=int, default=10, help="seeds per algorithm for the efficiency part")
    p.add_argument("--program", choices=sorted(PROGRAMS), default=DEFAULT_PROGRAM,
                   help="the Megatron-style program the ranking trials run: the plain-PyTorch imitation or "
                        "megatron-core itself (installed by `make test-frameworks`)")
    p.add_argument("--workers", type=int, default=None,
                   help="trials at once, each on its own cores (default: one per usable core; 1: one by one, no Ray)")
    p.add_argument("--iterations", type=int, default=None,
                   help=f"optimizer steps each ranking trial emulates, the first a warm-up; at least 2 (default "
                        f"{ITERATIONS} for single-node groups, as `make validate` emulates: their layouts are "
                        "host-bound, and a host gap is a median over the steady iterations' same-position gaps; "
                        f"{MULTI_NODE_ITERATIONS} for multi-node groups, device-bound, whose steady iterations "
                        "repeat the same kernels)")
    a = p.parse_args(argv)
    if a.iterations is not None:
        try:
            check_iterations(a.iterations)
        except ValueError as e:
            p.error(f"--iterations: {e}")
    if not a.no_ranking:
        try:
            require_program(a.program)
        except ValueError as e:
            p.error(f"--program {a.program}: {e}")
    console = Console(width=max(Console().width, 140))
    try:
        run_eval(multi=tuple(a.multi.split(",")) if a.multi else None, single=a.single, only=a.only,
                 ranking=not a.no_ranking, efficiency=not a.no_efficiency, seeds=a.seeds, console=console,
                 program=a.program, workers=a.workers, iterations=a.iterations)
    except GroupSelectionError as e:
        console.print(f"[red]{e}[/red]")
        return 2
    except KeyboardInterrupt as e:
        console.print(f"interrupted: {e or 'stopped'}; a rerun resumes from the cached trials")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
