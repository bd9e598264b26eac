"""`maya profile`: run the program for real on the local device and write the same trace, with durations.

Why: a real run on the machine at hand is the ground truth the emulator and the predictors are
checked against ("transparent profiling"), and it needs no GPU: on a CPU box the program runs on
the CPU with a real gloo process group. Every rank is one `emulator.launch.worker --profile`
process, all started together (real collectives need every member alive), on a free local
rendezvous port; the output folder has exactly the layout of `maya emulate` plus measured
`duration_s`, and emulation.json says `"mode": "profile"` and names the local device as `gpu`.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from emulator.launch.emulate import launch
from emulator.launch.job import EmulationJob
from emulator.trace.summaries import EmulationSummary


def local_device_key() -> str:
    """maya's key for the device this machine would run on: a known CUDA part, else 'cpu'."""
    import torch

    if torch.cuda.is_available():
        from emulator.core.hardware import gpu_key_from_device_name

        return gpu_key_from_device_name(torch.cuda.get_device_name(0)) or "cpu"
    return "cpu"


def run_profile(script: str | None, module: str | None, argv: list[str], nproc_per_node: int = 1,
                iterations: int | None = None, out: Path | str = "out-profile", worker: list[str] | None = None,
                console: Console | None = None, timing_only: bool = False) -> EmulationSummary:
    """Run every rank for real (no deduplication); returns and writes the emulation.json equivalent.

    `timing_only`: record nothing, only the wall time of each iteration (`measured_iterations_s`):
    recording every op costs far more than a small model's own host time, so the program's real
    speed is measured without it."""
    job = EmulationJob(script=str(script) if script else None, module=module, argv=list(argv or []),
                       gpu=local_device_key(), nproc_per_node=nproc_per_node, nnodes=1, iterations=iterations,
                       out=Path(out), profile=True, timing_only=timing_only)
    if worker:
        job.worker = list(worker)
    return launch(job, dedup=False, jobs=nproc_per_node, verify=0, console=console, mode="profile")
