"""`maya emulate`: run a program as N emulated ranks and merge what they recorded.

At most `jobs` ranks run at once (default: the number of cores, see `emulator.launch.pool`).
With rank deduplication (the default) only the ranks that do distinct work run
(`emulator.launch.roles`). What the user gets: a progress line per rank, the failing rank's own
traceback when the program fails (not ours), an OOM report with the allocator's message when
the target GPU would run out of memory, and `OUT/emulation.json` (`EmulationSummary`) next to
the traces. A previous run's outputs in the same OUT are cleared first, so a trace folder never
mixes two runs. Ctrl-C or SIGTERM stops the workers (each writes its partial trace), and the
emulation.json written then says `interrupted: true, complete: false`.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from rich.console import Console

from emulator.launch.job import BadJob, EmulationJob
from emulator.launch.merge import merge, report
from emulator.launch.pool import PROBE_EXCHANGE_TIMEOUT_S, RankRunner, interrupts
from emulator.launch.roles import deduplicate, exchange_units
from emulator.trace.io import write_summary
from emulator.trace.layout import (
    EMULATION_JSON,
    EXCHANGE_DIR,
    PREDICTION_JSON,
    RANK_FOLDERS,
    TIMELINE_JSON,
    rank_trace_path,
)
from emulator.trace.summaries import EmulationSummary

# How many iterations a dedup probe runs (emulator.launch.roles): the first decides whether a rank's
# position changes its work. MAYA_PROBE_ITERATIONS=0 emulates probes in full.
PROBE_ITERATIONS = 1
PROBE_ITERATIONS_ENV = "MAYA_PROBE_ITERATIONS"


def probe_iterations(job: EmulationJob) -> int | None:
    """Iterations a probe runs, None when that would not be fewer than the job's own."""
    raw = os.environ.get(PROBE_ITERATIONS_ENV, "").strip()
    try:
        n = int(raw) if raw else PROBE_ITERATIONS
    except ValueError as e:
        raise BadJob(f"{PROBE_ITERATIONS_ENV} must be a whole number of iterations (0: off), got {raw!r}") from e
    if n <= 0 or (job.iterations is not None and job.iterations <= n):
        return None
    return n


def clear_outputs(out: Path) -> None:
    """Remove what an earlier run left in OUT: only maya's own entries (`rank=*` under trace/, ranks/,
    logs/, the object exchange, the summaries), never anything else a user keeps in that folder."""
    is_maya_folder = (out / EMULATION_JSON).exists()
    for name in RANK_FOLDERS:
        d = out / name
        if not d.is_dir():
            continue
        for entry in d.glob("rank=*"):
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for entry in d.glob(".*.tmp"):  # an interrupted atomic write
            entry.unlink()
        if not any(d.iterdir()):
            d.rmdir()
    if (out / EXCHANGE_DIR).is_dir():
        shutil.rmtree(out / EXCHANGE_DIR)
    for name in (EMULATION_JSON, PREDICTION_JSON, TIMELINE_JSON):
        if (out / name).exists() and (name == EMULATION_JSON or is_maya_folder):
            (out / name).unlink()


def run_emulation(script: str | None, module: str | None, argv: list[str], gpu: str, nproc_per_node: int = 1,
                  nnodes: int = 1, iterations: int | None = None, out: Path | str = "out", dedup: bool = True,
                  jobs: int | None = None, verify: int = 0, worker: list[str] | None = None,
                  console: Console | None = None, routing: str | None = None,
                  allow_unsupported: bool = False) -> EmulationSummary:
    """Emulate the program on `nproc_per_node * nnodes` ranks of `gpu`; returns (and writes) emulation.json.

    `verify` (default: $MAYA_DEDUP_VERIFY, else 0) emulates that many extra, randomly chosen
    deduplicated ranks and checks their work matches their representative's. `worker` replaces
    the worker command (tests). `routing`: the policy for data-dependent sizes (`emulator.core.routing`).
    `allow_unsupported`: an op without a fake kernel gets a best-guess output (counted, timed by the
    roofline) instead of stopping the run with a message naming it.
    """
    if not verify:
        try:
            verify = int(os.environ.get("MAYA_DEDUP_VERIFY", "0"))
        except ValueError:
            verify = 0
    job = EmulationJob(script=str(script) if script else None, module=module, argv=list(argv or []), gpu=gpu,
                       nproc_per_node=nproc_per_node, nnodes=nnodes, iterations=iterations, out=Path(out),
                       routing=routing, allow_unsupported=allow_unsupported)
    if worker:
        job.worker = list(worker)
    return launch(job, dedup=dedup, jobs=jobs, verify=verify, console=console, mode="emulate")


def _console(console: Console | None) -> Console:
    if console is not None:
        return console
    console = Console(stderr=True)
    if not console.is_terminal:  # piped or in CI: wide enough that rank lines don't fold
        console = Console(stderr=True, width=max(console.width, 140))
    return console


def launch(job: EmulationJob, dedup: bool, jobs: int | None, verify: int, console: Console | None,
           mode: str) -> EmulationSummary:
    """Run the job's ranks (deduplicated unless `dedup` is off or it is a profile), merge, write, report.
    Raises BadJob, before anything is written, when the job cannot run as given."""
    console = _console(console)
    problem = job.problem()
    if problem:
        raise BadJob(problem)
    short = probe_iterations(job)
    job.out.mkdir(parents=True, exist_ok=True)
    clear_outputs(job.out)
    t0 = time.perf_counter()
    runner = RankRunner(job, jobs or os.cpu_count() or 1, console, all_at_once=job.profile)
    interrupted = False
    try:
        with interrupts():
            rank_map, dedup_info = _run_ranks(job, runner, dedup, verify, console, short)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the pool stopped the workers; say so in emulation.json
        interrupted = True
        rank_map, dedup_info = {r: r for r in runner.runs}, None
    finally:
        runner.close()
    for r in (dedup_info or {}).get("probed", []):  # first iterations only: no rank uses it, none may read it
        shutil.rmtree(rank_trace_path(job.out, r).parent, ignore_errors=True)
    summary = merge(job, runner.runs, rank_map, time.perf_counter() - t0, mode, dedup_info, interrupted)
    write_summary(job.out, summary)
    report(summary, console)
    return summary


def _run_ranks(job: EmulationJob, runner: RankRunner, dedup: bool, verify: int, console: Console,
               short: int | None) -> tuple[dict[int, int], dict | None]:
    """Run the ranks the job needs: (every rank -> the emulated rank whose trace it shares, dedup details);
    `short`: the iterations a dedup probe runs (None: in full)."""
    world = job.world_size
    dedup_info = None
    if dedup and world > 1 and not job.profile:
        user_timeout = "MAYA_EXCHANGE_TIMEOUT_S" in os.environ
        if not user_timeout:
            runner.env["MAYA_EXCHANGE_TIMEOUT_S"] = str(PROBE_EXCHANGE_TIMEOUT_S)
        result = deduplicate(world, runner, verify=verify, probe_iterations=short)
        group = runner.exchange_group() if result is None else None
        if group is not None and 0 in runner.runs and runner.runs[0].summary:
            # The program passes Python objects between ranks (pipelining does, to agree on shapes):
            # the ranks of each such group must run side by side. Start over with that constraint.
            units = exchange_units(runner.runs[0].summary.groups, world, group)
            console.print(f"[yellow]ranks exchange Python objects over group {group}: emulating the ranks "
                          f"of one such group together, the others reading its objects[/yellow]")
            runner.restart_side_by_side(probe_timeout_set=not user_timeout)
            result = deduplicate(world, runner, verify=verify, unit_of=units, stand_in=runner.use_stand_ins,
                                 probe_iterations=short)
        if result is None:
            rank_map = {r: r for r in runner.runs}
        else:
            rank_map = result.rank_map
            dedup_info = result.to_json()
    else:
        staggered = not job.profile and runner.jobs < world and "MAYA_EXCHANGE_TIMEOUT_S" not in os.environ
        if staggered:
            runner.env["MAYA_EXCHANGE_TIMEOUT_S"] = str(PROBE_EXCHANGE_TIMEOUT_S)
        runner(list(range(world)))
        if staggered and runner.exchange_group() is not None:
            # ranks wait for each other's Python objects (pipelining's start-up vote): run them side by side
            console.print(f"[yellow]ranks exchange Python objects over group {runner.exchange_group()}: "
                          f"running all {world} ranks side by side[/yellow]")
            runner.restart_side_by_side(probe_timeout_set=True)
            runner(list(range(world)))
        rank_map = {r: r for r in range(world)}
    return rank_map, dedup_info
