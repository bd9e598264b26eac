"""`maya emulate`: run a program as N emulated ranks and merge what they recorded.

Each emulated rank is one `python -m emulator.launch.worker` process (a rank must be its own process:
the fake device, the recording process group and the program's globals are per process). At
most `jobs` run at once (default: the number of cores), each with torchrun's environment for
its rank. With rank deduplication (the default) only the ranks that do distinct work run;
see `emulator.launch.roles`.

What the user gets: a progress line per rank, the failing rank's own traceback when the program
fails (not ours), an OOM report with the allocator's message when the target GPU would run out
of memory, and `OUT/emulation.json` (keys in `emulator.trace.io`) next to the traces. A previous
run's outputs in the same OUT are cleared first, so a trace folder never mixes two runs.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from emulator.core.exitcodes import Exit
from emulator.core.hardware import CPU_RANK_THREADS
from emulator.launch.roles import deduplicate, exchange_units, work_hash
from emulator.trace.io import rank_summary_path, rank_trace_path, read_json, write_summary

WORKER = [sys.executable, "-m", "emulator.launch.worker"]
SUMMARY_VERSION = 1
# How long a rank emulated without its peers waits for a Python object from one (see
# emulator.distributed.objects); short, because the launcher then re-runs the ranks together.
PROBE_EXCHANGE_TIMEOUT_S = 10
_EXCHANGE_CHANNEL = re.compile(r"ObjectExchangeTimeout.*?\((?:p2p|bcast|ag)\.([^.\s]+)\.", re.S)


@dataclass
class Job:
    """What to run and how the world is laid out (torchrun's terms)."""

    script: str | None
    module: str | None
    argv: list[str]
    gpu: str
    nproc_per_node: int
    nnodes: int
    iterations: int | None
    out: Path
    profile: bool = False
    timing_only: bool = False  # profile: time iterations, record no trace

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes


@dataclass
class RankRun:
    rank: int
    returncode: int
    wall_s: float
    summary: dict | None  # OUT/ranks/rank=R.json, None if the worker died before writing it
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_command(job: Job, rank: int, worker: list[str] | None = None) -> list[str]:
    cmd = list(worker or WORKER)
    cmd += ["--gpu", job.gpu, "--rank", str(rank), "--world-size", str(job.world_size),
            "--local-rank", str(rank % job.nproc_per_node), "--local-world-size", str(job.nproc_per_node),
            "--nnodes", str(job.nnodes), "--node-rank", str(rank // job.nproc_per_node), "--out", str(job.out)]
    if job.iterations is not None:
        cmd += ["--iterations", str(job.iterations)]
    if job.profile:
        cmd.append("--profile")
        if job.timing_only:
            cmd.append("--timing-only")
    cmd += ["--script", job.script] if job.script else ["--module", job.module]
    return cmd + ["--", *job.argv]


def worker_env(master_port: int) -> dict[str, str]:
    """The parent's environment minus any torchrun variables of its own, plus the rendezvous address
    and a run id of its own (the emulated ranks' object exchange is keyed by it)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                        "TORCHELASTIC_RUN_ID")}
    env.setdefault("OMP_NUM_THREADS", str(CPU_RANK_THREADS))  # one core per rank; ranks run side by side
    env["MASTER_ADDR"] = "127.0.0.1"
    env["MASTER_PORT"] = str(master_port)
    env["TORCHELASTIC_RUN_ID"] = f"maya-{os.getpid()}-{master_port}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def clear_outputs(out: Path) -> None:
    """Remove what an earlier run left in OUT: only maya's own entries (`rank=*` under trace/, ranks/,
    logs/, the object exchange, the summaries), never anything else a user keeps in that folder."""
    is_maya_folder = (out / "emulation.json").exists()
    for name in ("trace", "ranks", "logs"):
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
    if (out / ".exchange").is_dir():
        shutil.rmtree(out / ".exchange")
    for name in ("emulation.json", "prediction.json", "timeline.json"):
        if (out / name).exists() and (name == "emulation.json" or is_maya_folder):
            (out / name).unlink()


class RankRunner:
    """Runs worker processes, `jobs` at a time, with one progress bar; remembers every rank it ran."""

    def __init__(self, job: Job, jobs: int, console: Console, worker: list[str] | None = None,
                 all_at_once: bool = False):
        self.job, self.jobs, self.console, self.worker = job, max(jobs, 1), console, worker
        self.all_at_once = all_at_once  # profile mode: real collectives need every rank alive together
        self.runs: dict[int, RankRun] = {}
        self.env = worker_env(free_port())
        self.stop = False  # set after a failure: later phases do not start

    def __call__(self, ranks: list[int]) -> dict[int, dict | None]:
        if self.stop:
            return {}
        self._run(ranks)
        # an OOM rank's trace (up to the failed allocation) still tells its role apart
        return {r: self.runs[r].summary if self.runs[r].returncode in (Exit.OK, Exit.OOM) else None
                for r in ranks if r in self.runs}  # after a failure, later ranks never start

    def restart_side_by_side(self, probe_timeout_set: bool) -> None:
        """Forget the runs so far; from now on the ranks asked for start together (they wait for each
        other's Python objects), with the user's exchange timeout again if the probe one was set."""
        self.runs.clear()
        self.stop = False
        self.all_at_once = True
        if probe_timeout_set:
            self.env.pop("MAYA_EXCHANGE_TIMEOUT_S", None)

    def exchange_group(self) -> str | None:
        """The process group named by a rank that gave up waiting for a peer's Python object, if any."""
        for run in self.runs.values():
            m = _EXCHANGE_CHANNEL.search((run.summary or {}).get("error") or "")
            if m:
                return m.group(1)
        return None

    def _run(self, ranks: list[int]) -> None:
        (self.job.out / "logs").mkdir(parents=True, exist_ok=True)
        pending = list(ranks)
        running: dict[int, tuple[subprocess.Popen, float, object]] = {}
        limit = len(ranks) if self.all_at_once else self.jobs
        label = "profiling" if self.job.profile else "emulating"
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=self.console, transient=True,
                      disable=not self.console.is_terminal) as bar:
            task = bar.add_task(f"{label} ranks {_ranges(ranks)}", total=len(ranks))
            try:
                while pending or running:
                    while pending and len(running) < limit and not self.stop:
                        r = pending.pop(0)
                        log = self.job.out / "logs" / f"rank={r}.log"
                        fh = open(log, "wb")  # noqa: SIM115 - closed when the process ends
                        proc = subprocess.Popen(worker_command(self.job, r, self.worker), stdout=fh,
                                                stderr=subprocess.STDOUT, env=self.env)
                        running[r] = (proc, time.perf_counter(), fh)
                    if self.stop and not running:
                        break
                    for r, (proc, t0, fh) in list(running.items()):
                        rc = proc.poll()
                        if rc is None:
                            continue
                        fh.close()
                        del running[r]
                        self._finished(r, rc, time.perf_counter() - t0)
                        bar.advance(task)
                    time.sleep(0.02)
            except BaseException:
                for proc, _, _fh in running.values():
                    proc.terminate()
                for proc, _, fh in running.values():
                    proc.wait()
                    fh.close()
                raise

    def _finished(self, rank: int, rc: int, wall: float) -> None:
        path = rank_summary_path(self.job.out, rank)
        summary = None
        if path.exists():
            try:
                summary = read_json(path)
            except (OSError, ValueError):
                summary = None
        if summary is not None and rc == Exit.OK and rank_trace_path(self.job.out, rank).exists():
            import pyarrow.parquet as pq

            summary["work_hash"] = work_hash(pq.read_table(rank_trace_path(self.job.out, rank)))
        log = self.job.out / "logs" / f"rank={rank}.log"
        self.runs[rank] = RankRun(rank, rc, wall, summary, log)
        if rc not in (Exit.OK, Exit.OOM):
            self.stop = True
        self.console.print(_rank_line(self.runs[rank]))


def _ranges(ranks: list[int]) -> str:
    """[0,1,2,5] -> '0-2,5'."""
    out, rs = [], sorted(ranks)
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def _gib(n) -> str:
    return f"{(n or 0) / 2**30:.2f} GiB"


def _rank_line(run: RankRun) -> str:
    s = run.summary or {}
    if run.returncode == Exit.OK:
        return (f"  rank {run.rank}: ok, {s.get('n_events', 0):,} events, {s.get('iterations', 0)} iterations, "
                f"peak {_gib(s.get('peak_allocated'))} / {_gib(s.get('peak_reserved'))} reserved, {run.wall_s:.1f} s")
    if run.returncode == Exit.OOM:
        return f"  [red]rank {run.rank}: out of memory[/red] after {run.wall_s:.1f} s"
    return f"  [red]rank {run.rank}: failed (exit {run.returncode})[/red] after {run.wall_s:.1f} s, log {run.log}"


def _log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def merge(job: Job, runs: dict[int, RankRun], rank_map: dict[int, int], wall: float, mode: str,
          dedup_info: dict | None = None) -> dict:
    """The job summary (emulation.json) from the per-rank summaries."""
    world = job.world_size
    summaries = {r: run.summary for r, run in runs.items() if run.summary is not None}
    failed = sorted(r for r, run in runs.items() if run.returncode not in (Exit.OK, Exit.OOM))
    oom_reps = sorted(r for r, run in runs.items() if run.returncode == Exit.OOM
                      or (run.summary or {}).get("oom"))
    ok = bool(runs) and not failed and not oom_reps and all(run.returncode == Exit.OK for run in runs.values())
    covered = all(rank_map.get(r) in summaries for r in range(world))
    first = summaries.get(0) or next(iter(summaries.values()), {})
    unsupported: Counter = Counter()
    placeholders: Counter = Counter()
    for s in summaries.values():
        for op, n in (s.get("unsupported_ops") or {}).items():
            unsupported[op] = max(unsupported[op], int(n))
        for kind, n in (s.get("placeholders") or {}).items():
            placeholders[kind] = max(placeholders[kind], int(n))
    peak_alloc = {str(r): int(summaries[rep].get("peak_allocated") or 0)
                  for r, rep in sorted(rank_map.items()) if rep in summaries}
    peak_res = {str(r): int(summaries[rep].get("peak_reserved") or 0)
                for r, rep in sorted(rank_map.items()) if rep in summaries}
    oom_ranks = sorted(r for r, rep in rank_map.items() if rep in oom_reps)
    failed_rank = failed[0] if failed else (oom_reps[0] if oom_reps else None)
    error = None
    if failed_rank is not None:
        run = runs[failed_rank]
        error = (run.summary or {}).get("error") or (run.summary or {}).get("oom_message") \
            or _log_tail(run.log) or f"worker exited with status {run.returncode}"
    from emulator.core.hardware import get_gpu

    try:
        gpu_name = get_gpu(job.gpu).name
    except Exception:  # noqa: BLE001 - a name is only decoration here
        gpu_name = job.gpu
    iterations = [int(s.get("iterations") or 0) for s in summaries.values()]
    return {
        "schema_version": SUMMARY_VERSION, "mode": mode, "ok": ok, "complete": ok and covered,
        "script": job.script, "module": job.module, "argv": list(job.argv), "gpu": job.gpu, "gpu_name": gpu_name,
        "world_size": world, "nnodes": job.nnodes, "nproc_per_node": job.nproc_per_node,
        "torch_version": first.get("torch_version"), "iterations_requested": job.iterations,
        "host_speed": first.get("host_speed"),
        "iterations_found": min(iterations) if iterations else 0,
        "peak_allocated_bytes": peak_alloc, "peak_reserved_bytes": peak_res,
        "oom": bool(oom_reps), "oom_ranks": oom_ranks,
        "oom_message": next((s.get("oom_message") for s in summaries.values() if s.get("oom_message")), None),
        "unsupported_ops": dict(unsupported), "placeholders": dict(placeholders),
        "emulation_wall_s": wall, "ranks_emulated": sorted(summaries),
        "rank_map": {str(r): int(rep) for r, rep in sorted(rank_map.items())},
        "groups": [{"name": g.get("name"), "ranks": g.get("ranks")} for g in (first.get("groups") or [])],
        "failed_rank": failed_rank, "error": error,
        "rank_wall_s": {str(r): run.wall_s for r, run in sorted(runs.items())},
        # profile: the wall time of every iteration on every rank, as measured (emulation: its own speed)
        "measured_iterations_s": ({str(r): list(s.get("iteration_wall_s") or []) for r, s in sorted(summaries.items())}
                                  if mode == "profile" else None),
        "work_hash": {str(r): s.get("work_hash") or s.get("op_hash") for r, s in sorted(summaries.items())},
        "dedup": dedup_info,
    }


def _report(summary: dict, console: Console) -> None:
    if summary["oom"]:
        console.print(f"[bold red]OOM[/bold red] on the emulated {summary['gpu_name']}: ranks "
                      f"{_ranges(summary['oom_ranks'])} would run out of memory")
        if summary.get("oom_message"):
            console.print(summary["oom_message"], markup=False, highlight=False)
    elif summary["failed_rank"] is not None:
        console.print(f"[bold red]the program failed on rank {summary['failed_rank']}[/bold red]:")
        console.print(summary["error"] or "", markup=False, highlight=False)
    else:
        peak = max((int(v) for v in summary["peak_reserved_bytes"].values()), default=0)
        alloc = max((int(v) for v in summary["peak_allocated_bytes"].values()), default=0)
        verb = "profiled" if summary["mode"] == "profile" else "emulated"
        console.print(f"[green]{verb}[/green] {summary['world_size']} ranks on {summary['gpu_name']} "
                      f"({len(summary['ranks_emulated'])} run), {summary['iterations_found']} iterations, "
                      f"peak {_gib(alloc)} allocated / {_gib(peak)} reserved per rank, "
                      f"{summary['emulation_wall_s']:.1f} s")
    if summary["unsupported_ops"]:
        console.print(f"unsupported ops: {summary['unsupported_ops']}")
    if summary["placeholders"]:
        console.print(f"placeholders for data-dependent values: {summary['placeholders']}")


def _check(job: Job) -> str | None:
    if job.nproc_per_node < 1 or job.nnodes < 1:
        return f"--nproc-per-node ({job.nproc_per_node}) and --nnodes ({job.nnodes}) must be at least 1"
    if job.iterations is not None and job.iterations < 1:
        return f"--iterations must be at least 1, got {job.iterations}"
    if job.script and not Path(job.script).is_file():
        return f"no such script: {job.script}"
    if not job.script and not job.module:
        return "give a script or -m module"
    return None


def run_emulation(script: str | None, module: str | None, argv: list[str], gpu: str, nproc_per_node: int = 1,
                  nnodes: int = 1, iterations: int | None = None, out: Path | str = "out", dedup: bool = True,
                  jobs: int | None = None, verify: int = 0, worker: list[str] | None = None,
                  console: Console | None = None) -> dict:
    """Emulate the program on `nproc_per_node * nnodes` ranks of `gpu`; returns (and writes) emulation.json.

    `verify` (default: $MAYA_DEDUP_VERIFY, else 0) emulates that many extra, randomly chosen
    deduplicated ranks and checks their work matches their representative's. `worker` replaces
    the worker command (tests).
    """
    if not verify:
        try:
            verify = int(os.environ.get("MAYA_DEDUP_VERIFY", "0"))
        except ValueError:
            verify = 0
    job = Job(script=str(script) if script else None, module=module, argv=list(argv or []), gpu=gpu,
              nproc_per_node=nproc_per_node, nnodes=nnodes, iterations=iterations, out=Path(out))
    return _launch(job, dedup=dedup, jobs=jobs, verify=verify, worker=worker, console=console, mode="emulate")


def _launch(job: Job, dedup: bool, jobs: int | None, verify: int, worker, console: Console | None,
            mode: str) -> dict:
    if console is None:
        console = Console(stderr=True)
        if not console.is_terminal:  # piped or in CI: wide enough that rank lines don't fold
            console = Console(stderr=True, width=max(console.width, 140))
    problem = _check(job)
    if problem:
        console.print(f"[red]{problem}[/red]")
        return {"ok": False, "complete": False, "oom": False, "error": problem}
    job.out.mkdir(parents=True, exist_ok=True)
    clear_outputs(job.out)
    t0 = time.perf_counter()
    world = job.world_size
    runner = RankRunner(job, jobs or os.cpu_count() or 1, console, worker, all_at_once=job.profile)
    dedup_info = None
    if dedup and world > 1 and not job.profile:
        user_timeout = "MAYA_EXCHANGE_TIMEOUT_S" in os.environ
        if not user_timeout:
            runner.env["MAYA_EXCHANGE_TIMEOUT_S"] = str(PROBE_EXCHANGE_TIMEOUT_S)
        result = deduplicate(world, runner, verify=verify)
        group = runner.exchange_group() if result is None else None
        if group is not None and 0 in runner.runs and runner.runs[0].summary:
            # The program passes Python objects between ranks (pipelining does, to agree on shapes):
            # the ranks of each such group must run side by side. Start over with that constraint.
            units = exchange_units(runner.runs[0].summary.get("groups") or [], world, group)
            console.print(f"[yellow]ranks exchange Python objects over group {group}: emulating the ranks "
                          f"of each such group together[/yellow]")
            runner.restart_side_by_side(probe_timeout_set=not user_timeout)
            result = deduplicate(world, runner, verify=verify, unit_of=units)
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
    summary = merge(job, runner.runs, rank_map, time.perf_counter() - t0, mode, dedup_info)
    write_summary(job.out, summary)
    _report(summary, console)
    if dedup_info and dedup_info["mismatches"]:
        console.print(f"[yellow]dedup check: ranks {dedup_info['mismatches']} differ from their representative; "
                      "they keep their own traces[/yellow]")
    return summary


__all__ = ["Job", "RankRunner", "merge", "run_emulation", "rank_trace_path", "worker_command"]
