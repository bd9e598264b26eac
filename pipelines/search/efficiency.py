"""`make search-eval`, part 2: how many evaluations each algorithm needs to get within 1% of the optimum.

The space is `examples/search/efficiency.toml` (1,024 configurations of a small Megatron-style job:
part, server type, NIC, layout). It is first evaluated exhaustively (grid, no pruning, every trial a
real `maya predict`, cached), which gives the optimum. Then each algorithm runs against that same
cached evaluator (a trial that is not in the cache would be an error) for several seeds, with its
normal pruning, and we count the evaluations (executed + cached configurations, in the order the
search met them) until the best so far is within 1% of the exhaustive optimum.
"""

from __future__ import annotations

import io
import statistics
from pathlib import Path

from rich.console import Console

from emulator.search import Options, Program, run_search
from emulator.search.driver import Search, run_inline
from emulator.search.space import load_space
from emulator.search.store import Store
from pipelines.search.groups import PROGRAM
from pipelines.validation.holdout import REPO_ROOT

SPACE = REPO_ROOT / "examples" / "search" / "efficiency.toml"
ALGORITHMS = ("cmaes", "random", "grid")
BUDGET = 300
TOLERANCE = 0.01


class NotCached(RuntimeError):
    """The efficiency runs must only read the exhaustive sweep's trials."""


def parts() -> set[str]:
    """The GPU parts the efficiency space rents (its `gpu` knob): its trials need their predictors."""
    return {str(v) for v in load_space(SPACE).knobs["gpu"].values}


def _not_cached(spec, predictors):
    raise NotCached(f"trial not in the exhaustive sweep: {spec.command()}")


def exhaustive(store: Store, console: Console):
    space = load_space(SPACE)
    opts = Options(objective="cost-per-token", algorithm="grid", budget=len(space.feasible()), engine="inline",
                   prune=False)
    return run_search(space, Program.of(PROGRAM, None, []), opts, store=store, console=console).completed()


def evaluations_to_within(store: Store, algorithm: str, seed: int, optimum: float, budget: int = BUDGET) -> dict:
    """Run `algorithm` on the cached evaluator; the evaluation count at which it first got within TOLERANCE."""
    space = load_space(SPACE)
    opts = Options(objective="cost-per-token", algorithm=algorithm, budget=budget, engine="inline", seed=seed)
    s = Search(space, Program.of(PROGRAM, None, []), opts, store=store, evaluate=_not_cached,
               console=Console(file=io.StringIO()))
    res = run_inline(s).completed()
    best, count, hit = float("inf"), 0, None
    for e in res.entries:
        if e.outcome not in ("executed", "cached"):
            continue
        count += 1
        if e.value is not None and e.value < best:
            best = e.value
        if hit is None and best <= optimum * (1 + TOLERANCE):
            hit = count
    return dict(algorithm=algorithm, seed=seed, evaluations=hit, evaluated=res.counts["evaluated"],
                skipped=res.counts["skipped"], infeasible=res.counts["infeasible"], best=best,
                gap=best / optimum - 1)


def run_efficiency(store: Store, console: Console, seeds: int = 10) -> dict:
    full = exhaustive(store, console)
    best = full.best
    optimum = best.value
    runs = [evaluations_to_within(store, alg, seed, optimum) for alg in ALGORITHMS
            for seed in (range(seeds) if alg != "grid" else range(1))]
    summary = {}
    for alg in ALGORITHMS:
        rs = [r for r in runs if r["algorithm"] == alg]
        hits = [r["evaluations"] for r in rs if r["evaluations"] is not None]
        summary[alg] = dict(runs=len(rs), reached=len(hits), median=statistics.median(hits) if hits else None,
                            worst=max(hits) if hits else None, best=min(hits) if hits else None)
    walls = [(e.row or {}).get("trial_wall_s") or 0.0 for e in full.entries]
    return dict(space=str(Path(SPACE).relative_to(REPO_ROOT)), size=full.counts["space"],
                feasible=full.counts["feasible_space"], optimum=optimum, optimum_knobs=full.space.setting(best.key),
                optimum_command=best.row.get("command"), budget=BUDGET, tolerance=TOLERANCE, runs=runs,
                summary=summary, sweep_trial_wall_s=sum(walls),
                sweep_emulations=len({(e.row or {}).get("emulation_key") for e in full.entries}))
