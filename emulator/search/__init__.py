"""`maya search`: the cheapest (or fastest) way to run a program, found by emulating its configurations.

On top of the prediction side: each trial is a `maya predict` (emulator.launch + emulator.pipeline).

    space.py       the search-space file: knobs, templates, derived values, constraints (checked up front)
    expr.py        the safe expression language of derived values and constraints
    trial.py       one trial: run it, its emulation and trial keys, every outcome as a result row
    versions.py    the predictor versions a trial's answer depends on
    store.py       results in the warehouse (Parquet per trial, per-search runs, DuckDB views)
    prune.py       memory-monotone pruning rules
    searchers.py   grid, random, CMA-ES (Optuna) behind one ask/tell interface
    driver.py      the search loop (what needs a trial, what is cached, skipped or infeasible), inline engine
    ray_engine.py  Ray Tune as the engine, local or on a cluster
    cores.py       a slot of cores per concurrent trial
    report.py      ranked table, best command line, Pareto plot (PNG + HTML), JSON
"""

from __future__ import annotations

from rich.console import Console

from emulator.search.driver import Options, Search, SearchResult, run_inline
from emulator.search.space import Space, SpaceError, load_space, parse_overrides, parse_space
from emulator.search.store import Store, create_views
from emulator.search.trial import Program

ENGINES = ("ray", "inline")


def run_search(space: Space, program: Program, options: Options, store: Store | None = None,
               console: Console | None = None, evaluate=None, versions=None) -> SearchResult:
    """Run (or resume) a search with the chosen engine; results are stored as they finish. `evaluate` and
    `versions` replace the trial runner and the predictor lookup (tests, the search-efficiency benchmark)."""
    search = Search(space, program, options, store=store, console=console, evaluate=evaluate,
                    **({"versions": versions} if versions else {}))
    if options.engine == "ray":
        from emulator.search.ray_engine import run_ray

        result = run_ray(search)
    elif options.engine == "inline":
        result = run_inline(search)
    else:
        raise ValueError(f"unknown engine {options.engine!r}; one of {list(ENGINES)}")
    create_views(search.store.root.parent)
    return result


def rerun_stored(search_id: str, store: Store | None = None, console: Console | None = None,
                 engine: str | None = None) -> SearchResult:
    """Run a stored search again (what the Dagster schedule does): cached trials are read back, trials whose
    predictors changed are re-simulated from their stored emulations."""
    store = store or Store()
    meta = store.read_meta(search_id)
    opts = Options(**meta["options"])
    if engine:
        opts.engine = engine
    space = parse_space(meta["space_text"], gpus=opts.gpus, path=meta.get("space_path") or "space",
                        overrides=meta.get("overrides"))
    pr = meta["program"]
    program = Program.of(pr["script"], pr["module"], pr["argv"])
    return run_search(space, program, opts, store=store, console=console)


__all__ = ["ENGINES", "Options", "Program", "SearchResult", "SpaceError", "Store", "load_space", "parse_overrides",
           "rerun_stored", "run_search"]
