"""The job's summary (`emulation.json`) from what each rank's worker reported, and its lines on the terminal."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console

from emulator.core.exitcodes import Exit
from emulator.core.hardware import UnknownGPUError, get_gpu
from emulator.core.routing import POLICY_PLACEHOLDERS
from emulator.launch.job import EmulationJob
from emulator.launch.pool import RankRun, gib, how_it_ended, ranges
from emulator.trace.summaries import EmulationSummary


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _no_summary(run: RankRun) -> str:
    """What is known of a worker that ended without writing its summary: how it ended, its log's tail."""
    tail = _log_tail(run.log)
    if run.returncode < 0:  # a signal: killed by hand, by the OOM killer of the host, ...
        head = f"the worker of rank {run.rank} was {how_it_ended(run.returncode)} before it wrote its outputs"
        return head + (f"; the last lines of {run.log}:\n{tail}" if tail else "")
    return tail or f"the worker of rank {run.rank} ended ({how_it_ended(run.returncode)}) without writing its outputs"


def merge(job: EmulationJob, runs: dict[int, RankRun], rank_map: dict[int, int], wall: float, mode: str,
          dedup_info: dict | None = None, interrupted: bool = False) -> EmulationSummary:
    """One summary for the job: ok only when every rank ended cleanly; the first failing rank's own error.
    `interrupted`: the launcher was stopped (Ctrl-C / SIGTERM); the ranks it stopped are not failures."""
    world = job.world_size
    summaries = {r: run.summary for r, run in runs.items() if run.summary is not None}
    stopped = {r for r, run in runs.items()
               if interrupted and (run.returncode == Exit.INTERRUPTED or run.returncode < 0)}
    failed = sorted(r for r, run in runs.items() if not run.ended_cleanly and r not in stopped)
    oom_reps = sorted(r for r, run in runs.items() if run.returncode == Exit.OOM or (run.summary and run.summary.oom))
    ok = bool(runs) and not interrupted and not failed and not oom_reps \
        and all(run.returncode == Exit.OK for run in runs.values())
    covered = all(rank_map.get(r) in summaries for r in range(world))
    first = summaries.get(0) or next(iter(summaries.values()), None)
    unsupported: Counter = Counter()
    placeholders: Counter = Counter()
    compiled: Counter = Counter()
    eager: Counter = Counter()
    for s in summaries.values():
        for total, counts in ((unsupported, s.unsupported_ops), (placeholders, s.placeholders),
                              (compiled, s.compiled), (eager, s.eager_fallbacks)):
            for key, n in counts.items():
                total[key] = max(total[key], int(n))
    failed_rank = failed[0] if failed else (oom_reps[0] if oom_reps else None)
    error = None
    if failed_rank is not None:
        run = runs[failed_rank]
        s = run.summary
        error = (s.error if s else None) or (s.oom_message if s else None) or _no_summary(run)
    elif interrupted:
        error = "interrupted (Ctrl-C / SIGTERM)"
    try:
        gpu_name = get_gpu(job.gpu).name
    except UnknownGPUError:
        gpu_name = job.gpu
    # iterations of the traces ranks use (a dedup probe stopped after its first iterations is not one)
    used = set(rank_map.values())
    iterations = [s.iterations for r, s in summaries.items() if r in used]
    return EmulationSummary(
        mode=mode, ok=ok, complete=ok and covered, interrupted=interrupted, script=job.script, module=job.module,
        argv=list(job.argv), gpu=job.gpu, gpu_name=gpu_name, gpu_spec=job.gpu_table(), world_size=world,
        nnodes=job.nnodes, nproc_per_node=job.nproc_per_node,
        torch_version=first.torch_version if first else None, iterations_requested=job.iterations,
        host_speed=first.host_speed if first else None, iterations_found=min(iterations) if iterations else 0,
        host_speed_by_rank={str(r): list(s.host_speed_by_iteration) for r, s in sorted(summaries.items())
                            if s.host_speed_by_iteration},
        peak_allocated_bytes={str(r): summaries[rep].peak_allocated for r, rep in sorted(rank_map.items())
                              if rep in summaries},
        peak_reserved_bytes={str(r): summaries[rep].peak_reserved for r, rep in sorted(rank_map.items())
                             if rep in summaries},
        oom=bool(oom_reps), oom_ranks=sorted(r for r, rep in rank_map.items() if rep in oom_reps),
        oom_message=next((s.oom_message for s in summaries.values() if s.oom_message), None),
        ooms_caught={str(r): s.ooms_caught for r, s in sorted(summaries.items()) if s.ooms_caught},
        unsupported_ops=dict(unsupported), placeholders=dict(placeholders), compiled=dict(compiled),
        eager_fallbacks=dict(eager), emulation_wall_s=wall,
        ranks_emulated=sorted(summaries), rank_map={str(r): int(rep) for r, rep in sorted(rank_map.items())},
        groups=[{"name": g.get("name"), "ranks": g.get("ranks")} for g in (first.groups if first else [])],
        failed_rank=failed_rank, error=error, rank_wall_s={str(r): run.wall_s for r, run in sorted(runs.items())},
        # profile: the wall time of every iteration on every rank, as measured (emulation: its own speed)
        measured_iterations_s=({str(r): list(s.iteration_wall_s) for r, s in sorted(summaries.items())}
                               if mode == "profile" else None),
        work_hash={str(r): s.work_hash for r, s in sorted(summaries.items())}, dedup=dedup_info,
        routing=first.routing if first else None)


def report(summary: EmulationSummary, console: Console) -> None:
    """The job's outcome on the terminal: an interrupt, an OOM or the failing rank's traceback first."""
    if summary.interrupted:
        console.print(f"[bold yellow]interrupted[/bold yellow]: stopped after {summary.emulation_wall_s:.1f} s; "
                      f"{summary.mode} traces so far are in the output folder, marked interrupted in emulation.json "
                      "(a rerun into the same folder replaces them)")
    elif summary.oom:
        console.print(f"[bold red]OOM[/bold red] on the emulated {summary.gpu_name}: ranks "
                      f"{ranges(summary.oom_ranks)} would run out of memory")
        if summary.oom_message:
            console.print(summary.oom_message, markup=False, highlight=False)
    elif summary.failed_rank is not None:
        console.print(f"[bold red]the program failed on rank {summary.failed_rank}[/bold red]:")
        console.print(summary.error or "", markup=False, highlight=False)
    else:
        peak = max((int(v) for v in summary.peak_reserved_bytes.values()), default=0)
        alloc = max((int(v) for v in summary.peak_allocated_bytes.values()), default=0)
        verb = "profiled" if summary.mode == "profile" else "emulated"
        console.print(f"[green]{verb}[/green] {summary.world_size} ranks on {summary.gpu_name} "
                      f"({len(summary.ranks_emulated)} run), {summary.iterations_found} iterations, "
                      f"peak {gib(alloc)} allocated / {gib(peak)} reserved per rank, "
                      f"{summary.emulation_wall_s:.1f} s")
    if summary.unsupported_ops:
        console.print(f"unsupported ops: {summary.unsupported_ops}")
    if summary.placeholders:
        console.print(f"placeholders for data-dependent values: {summary.placeholders}")
    if summary.ooms_caught:
        console.print(f"[yellow]the program caught torch.cuda.OutOfMemoryError and went on[/yellow] "
                      f"(rank: count {summary.ooms_caught})")
    if summary.eager_fallbacks:
        console.print("[yellow]torch.compile ran eagerly (no Triton for a GPU target, no C++ compiler for the cpu "
                      f"one, profiling on a GPU, or MAYA_COMPILE=eager): {summary.eager_fallbacks}; the trace holds "
                      "the unfused ops[/yellow]")
    if POLICY_PLACEHOLDERS & set(summary.placeholders):
        console.print(f"router choices and token counts follow the routing policy {summary.routing or 'balanced'} "
                      "(--routing)")
    mismatches = (summary.dedup or {}).get("mismatches")
    if mismatches:
        console.print(f"[yellow]dedup check: ranks {mismatches} differ from their representative; "
                      "they keep their own traces[/yellow]")
