"""The worker pool: rank processes, `jobs` at a time, with one progress bar, remembering every rank it ran.

Each emulated rank is one `python -m emulator.launch.worker` process (a rank must be its own
process: the fake device, the recording process group and the program's globals are per
process), with torchrun's environment for its rank and its output in `OUT/logs/rank=R.log`.

Interrupts: under `interrupts()`, SIGTERM reaches the launcher as KeyboardInterrupt, like Ctrl-C.
Either way the pool stops its running workers with SIGTERM (each writes its partial trace,
marked interrupted), waits for them (SIGKILL after STOP_GRACE_S) and re-raises, so the launcher
can write an emulation.json that says the run was interrupted.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from emulator.core.exitcodes import Exit
from emulator.core.hardware import CPU_RANK_THREADS
from emulator.launch import forkserver
from emulator.launch.job import WORKER, EmulationJob
from emulator.trace.io import read_rank_summary
from emulator.trace.layout import PROGRESS_FILE_ENV, rank_log_path, rank_progress_path
from emulator.trace.summaries import RankSummary, SummaryError

# How long a rank emulated without its peers waits for a Python object from one (see
# emulator.distributed.objects); short, because the launcher then re-runs the ranks together.
PROBE_EXCHANGE_TIMEOUT_S = 10
_EXCHANGE_CHANNEL = re.compile(r"ObjectExchangeTimeout.*?\((?:p2p|bcast|tbcast|ag)\.([^.\s]+)\.", re.S)
PROGRESS_ENV = "MAYA_PROGRESS"  # 1: print each optimizer step the watched rank reaches; 0: never; unset: on a terminal
PROGRESS_POLL_S = 0.25
STOP_GRACE_S = 20  # how long a stopped worker may take to write its outputs before it is killed
_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                  "TORCHELASTIC_RUN_ID")


@dataclass
class RankRun:
    rank: int
    returncode: int
    wall_s: float
    summary: RankSummary | None  # OUT/ranks/rank=R.json, None if the worker died before writing it
    log: Path
    probe_iterations: int | None = None  # a dedup probe stopped after its first iterations

    @property
    def ended_cleanly(self) -> bool:
        """The rank's program ran to its end, or to an OOM (whose trace still shows the rank's role)."""
        return self.returncode in (Exit.OK, Exit.OOM)


@contextlib.contextmanager
def interrupts():
    """SIGTERM raises KeyboardInterrupt in this (the launcher's) process while inside, like Ctrl-C."""
    def to_interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    try:
        previous = signal.signal(signal.SIGTERM, to_interrupt)
    except ValueError:  # not the main thread: signals are not ours to handle
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(master_port: int) -> dict[str, str]:
    """The parent's environment minus any torchrun variables of its own, plus the rendezvous address
    and a run id of its own (the emulated ranks' object exchange is keyed by it)."""
    env = {k: v for k, v in os.environ.items() if k not in _TORCHRUN_VARS}
    env.setdefault("OMP_NUM_THREADS", str(CPU_RANK_THREADS))  # one core per rank; ranks run side by side
    env["MASTER_ADDR"] = "127.0.0.1"
    env["MASTER_PORT"] = str(master_port)
    env["TORCHELASTIC_RUN_ID"] = f"maya-{os.getpid()}-{master_port}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class RankRunner:
    """Runs worker processes, `jobs` at a time; `runner(ranks)` returns their summaries (None: failed)."""

    def __init__(self, job: EmulationJob, jobs: int, console: Console, all_at_once: bool = False):
        self.job, self.jobs, self.console = job, max(jobs, 1), console
        self.all_at_once = all_at_once  # profile mode: real collectives need every rank alive together
        self.runs: dict[int, RankRun] = {}
        self.env = worker_env(free_port())
        self.stop = False  # set after a failure: later phases do not start
        # ranks forked from a process that booted the device and imported torch once (emulator.launch.forkserver);
        # None until the first rank, False where the job's ranks start as plain processes
        self.server: forkserver.ForkServer | None | bool = (
            None if not job.profile and job.worker == WORKER and forkserver.wanted() else False)

    def __call__(self, ranks: list[int], iterations: int | None = None) -> dict[int, RankSummary | None]:
        """Run `ranks` (each stopped after `iterations` when given: a probe) and return their summaries."""
        if self.stop:
            return {}
        self._run(ranks, iterations)
        return {r: self.runs[r].summary if self.runs[r].ended_cleanly else None
                for r in ranks if r in self.runs}  # after a failure, later ranks never start

    def restart_side_by_side(self, probe_timeout_set: bool) -> None:
        """Forget the runs so far; from now on the ranks asked for start together (they wait for each
        other's Python objects), with the user's exchange timeout again if the probe one was set."""
        self.runs.clear()
        self.stop = False
        self.all_at_once = True
        if probe_timeout_set:
            self.env.pop("MAYA_EXCHANGE_TIMEOUT_S", None)

    def use_stand_ins(self) -> None:
        """From now on a rank whose peer is not running reads the objects the same position of an
        already emulated group sent (`emulator.distributed.objects`, stand-ins)."""
        self.env["MAYA_EXCHANGE_STANDIN"] = "1"

    def close(self) -> None:
        """The job's ranks are done: end the fork server, if one ran."""
        if isinstance(self.server, forkserver.ForkServer):
            self.server.close()
        self.server = False

    def _start(self, rank: int, iterations: int | None, env: dict):
        """A rank's process (forked from the server where it can be) and the log handle to close after it."""
        cmd = self.job.worker_command(rank, iterations)
        log = rank_log_path(self.job.out, rank)
        if self.server is None:
            job = self.job
            self.server = forkserver.ForkServer.start(cmd[0], job.gpu, job.gpu_table(), job.nproc_per_node, self.env,
                                                      job.out / "logs" / "forkserver.log") or False
        if self.server:
            try:
                return self.server.spawn(cmd[len(WORKER):], env, log), None
            except (OSError, RuntimeError) as e:  # the server went away: plain processes from now on
                self.console.print(f"[yellow]maya: the fork server stopped ({e}); starting ranks as new "
                                   f"processes[/yellow]")
                self.server.close()
                self.server = False
        fh = open(log, "wb")  # noqa: SIM115 - closed when the process ends
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env), fh

    def exchange_group(self) -> str | None:
        """The process group named by a rank that gave up waiting for a peer's Python object, if any."""
        for run in self.runs.values():
            m = _EXCHANGE_CHANNEL.search((run.summary.error if run.summary else None) or "")
            if m:
                return m.group(1)
        return None

    def _run(self, ranks: list[int], iterations: int | None = None) -> None:
        (self.job.out / "logs").mkdir(parents=True, exist_ok=True)
        pending = list(ranks)
        running: dict[int, tuple[subprocess.Popen, float, object]] = {}
        limit = len(ranks) if self.all_at_once else self.jobs
        label = "profiling" if self.job.profile else "emulating"
        # the batch tells its ranks who runs during it: a Python object awaited from any other rank that has
        # not already sent it can never come (emulator.distributed.objects)
        base = {**self.env, "MAYA_EXCHANGE_PEERS": ",".join(map(str, ranks))}
        watch = _Progress(self.job, min(ranks), self.console) if ranks and _progress_on(self.console) else None
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=self.console, transient=True,
                      disable=not self.console.is_terminal) as bar:
            task = bar.add_task(f"{label} ranks {ranges(ranks)}", total=len(ranks))
            try:
                while pending or running:
                    while pending and len(running) < limit and not self.stop:
                        r = pending.pop(0)
                        env = base if watch is None or r != watch.rank else watch.env(base)
                        proc, fh = self._start(r, iterations, env)
                        running[r] = (proc, time.perf_counter(), fh)
                    if watch is not None and watch.rank in running:
                        watch.poll()
                    if self.stop and not running:
                        break
                    for r, (proc, t0, fh) in list(running.items()):
                        rc = proc.poll()
                        if rc is None:
                            continue
                        if fh is not None:
                            fh.close()
                        del running[r]
                        if watch is not None and r == watch.rank:
                            watch.poll(last=True)  # a step reached just before the worker ended
                        self._finished(r, rc, time.perf_counter() - t0, iterations)
                        bar.advance(task)
                    time.sleep(0.02)
            except BaseException:
                self._stop(running, iterations)
                raise

    def _stop(self, running: dict, iterations: int | None = None) -> None:
        """Stop the running workers (SIGTERM: each writes what it recorded; SIGKILL after the grace) and
        remember how each ended; a second Ctrl-C meanwhile does not cut this short."""
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
        try:
            for proc, _, _fh in running.values():
                proc.terminate()
            deadline = time.monotonic() + STOP_GRACE_S
            for r, (proc, t0, fh) in running.items():
                try:
                    rc = proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    rc = proc.wait()
                if fh is not None:
                    fh.close()
                self._finished(r, rc, time.perf_counter() - t0, iterations)
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)

    def _finished(self, rank: int, rc: int, wall: float, iterations: int | None = None) -> None:
        try:
            summary = read_rank_summary(self.job.out, rank)
        except (OSError, ValueError, SummaryError, TypeError):
            summary = None
        self.runs[rank] = RankRun(rank, rc, wall, summary, rank_log_path(self.job.out, rank), iterations)
        if not self.runs[rank].ended_cleanly:
            self.stop = True
        self.console.print(rank_line(self.runs[rank]))


def _progress_on(console: Console) -> bool:
    v = os.environ.get(PROGRESS_ENV, "").strip()
    return console.is_terminal if v == "" else v not in ("0", "false", "no", "off")


class _Progress:
    """One live line per optimizer step that the watched rank (the lowest of a batch: rank 0 first) reaches,
    e.g. `rank 0: iteration 2/3 (12.4 s)` (seconds since the rank started), read from the lines its worker
    appends to a small file at each step."""

    def __init__(self, job: EmulationJob, rank: int, console: Console):
        self.rank, self.console, self.total = rank, console, job.iterations
        self.path = rank_progress_path(job.out, rank)
        self.path.unlink(missing_ok=True)
        self.shown, self.next_poll, self.started = 0, 0.0, time.time()

    def env(self, env: dict) -> dict:
        self.started = time.time()
        return {**env, PROGRESS_FILE_ENV: str(self.path)}

    def poll(self, last: bool = False) -> None:
        now = time.perf_counter()
        if now < self.next_poll and not last:
            return
        self.next_poll = now + PROGRESS_POLL_S
        try:
            text = self.path.read_text()
        except OSError:
            return
        for line in text.splitlines(keepends=True):
            parts = line.split()
            if not line.endswith("\n") or len(parts) != 2:
                continue  # a line being written
            try:
                steps, at = int(parts[0]), float(parts[1])
            except ValueError:
                continue
            if steps > self.shown:
                self.shown = steps
                total = f"/{self.total}" if self.total else ""
                self.console.print(f"rank {self.rank}: iteration {steps}{total} ({at - self.started:.1f} s)",
                                   highlight=False)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def ranges(ranks: list[int]) -> str:
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


def gib(n) -> str:
    return f"{(n or 0) / 2**30:.2f} GiB"


def rank_line(run: RankRun) -> str:
    s = run.summary or RankSummary(rank=run.rank)
    if run.returncode == Exit.OK:
        probe = " (a probe: its first iterations decide its role)" if run.probe_iterations else ""
        return (f"  rank {run.rank}: ok, {s.n_events:,} events, {s.iterations} iterations{probe}, "
                f"peak {gib(s.peak_allocated)} / {gib(s.peak_reserved)} reserved, {run.wall_s:.1f} s")
    if run.returncode == Exit.OOM:
        return f"  [red]rank {run.rank}: out of memory[/red] after {run.wall_s:.1f} s"
    if run.returncode == Exit.INTERRUPTED:
        return f"  [yellow]rank {run.rank}: interrupted[/yellow] after {run.wall_s:.1f} s"
    return (f"  [red]rank {run.rank}: failed ({how_it_ended(run.returncode)})[/red] after {run.wall_s:.1f} s, "
            f"log {run.log}")


def how_it_ended(returncode: int) -> str:
    """'exit 1', or 'killed by SIGKILL' for a worker a signal ended."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"
