"""What to run and how the world is laid out, in torchrun's terms, and the worker command line for a rank."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from emulator.core.routing import RoutingPolicy, RoutingPolicyError

WORKER = [sys.executable, "-m", "emulator.launch.worker"]


class BadJob(ValueError):
    """The job cannot run as given (a missing script, a world of no ranks); nothing was started or written."""


@dataclass
class EmulationJob:
    """One `maya emulate` / `maya profile` run: the program, the target and the ranks."""

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
    routing: str | None = None  # emulator.core.routing spec (None: the default, balanced)
    allow_unsupported: bool = False  # ops without a fake kernel: best guess and roofline instead of stopping
    worker: list[str] = field(default_factory=lambda: list(WORKER))  # tests replace the worker program

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def problem(self) -> str | None:
        """Why this job cannot run, in one line, or None."""
        if self.nproc_per_node < 1 or self.nnodes < 1:
            return f"--nproc-per-node ({self.nproc_per_node}) and --nnodes ({self.nnodes}) must be at least 1"
        if self.iterations is not None and self.iterations < 1:
            return f"--iterations must be at least 1, got {self.iterations}"
        if self.script and not Path(self.script).is_file():
            return f"no such script: {self.script}"
        if not self.script and not self.module:
            return "give a script or -m module"
        if self.routing:
            try:
                RoutingPolicy.parse(self.routing)
            except RoutingPolicyError as e:
                return str(e)
        return None

    def gpu_table(self) -> dict | None:
        """The `[gpu]` table of a variant given on the command line or in a cluster file (the worker, a new
        process, registers it again), None for a known part."""
        from emulator.core.hardware import GPUS

        spec = GPUS.get(self.gpu)
        return spec.variant_table if spec is not None else None

    def worker_command(self, rank: int, iterations: int | None = None) -> list[str]:
        """`python -m emulator.launch.worker ...` for `rank` (torchrun's environment is set by the worker);
        `iterations` stops this rank sooner than the job's own limit (a probe, emulator.launch.roles)."""
        cmd = list(self.worker)
        table = self.gpu_table()
        if table is not None:
            cmd += ["--gpu-spec", json.dumps(table)]
        cmd += ["--gpu", self.gpu, "--rank", str(rank), "--world-size", str(self.world_size),
                "--local-rank", str(rank % self.nproc_per_node), "--local-world-size", str(self.nproc_per_node),
                "--nnodes", str(self.nnodes), "--node-rank", str(rank // self.nproc_per_node), "--out", str(self.out)]
        limits = [n for n in (self.iterations, iterations) if n is not None]
        if limits:
            cmd += ["--iterations", str(min(limits))]
        if self.routing:
            cmd += ["--routing", self.routing]
        if self.allow_unsupported:
            cmd.append("--allow-unsupported")
        if self.profile:
            cmd.append("--profile")
            if self.timing_only:
                cmd.append("--timing-only")
        cmd += ["--script", self.script] if self.script else ["--module", self.module]
        return cmd + ["--", *self.argv]
