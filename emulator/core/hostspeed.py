"""How fast a machine's CPU runs the host side of eager PyTorch: CPU seconds per dispatched op.

Why: a recorded host gap is the program's CPU time on the machine that emulated it, but the
GPU servers a prediction is for run that Python on their own CPUs, often faster than a laptop
or a shared VM. The same fixed workload timed on both sides gives the ratio `maya predict`
scales host gaps by (`emulator.hosttime.scale`): here at emulation time (rank 0 measures before
and after the program and writes the mean to its summary: a shared machine's speed drifts while
the gaps are recorded), and on the GPU node by the hardware inventory of a calibration run
(`pipelines.runners.hardware`).

The workload: forward, backward and a foreach AdamW step of a small MLP (Linear, LayerNorm,
GELU) on tiny CPU tensors, so the time is dispatch, autograd and Python, not arithmetic. One
thread; the best of several repeats, because interference from other processes only adds time.
Needs only torch (it runs on bare GPU nodes).
"""

from __future__ import annotations

import math
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

WORKLOAD = "mlp4-d32-fwd-bwd-adamw/v1"  # change the name when the workload changes: ratios need the same one


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def _training_step():
    gen = torch.Generator().manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(32, 32), torch.nn.LayerNorm(32), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(4, 32, generator=gen)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()

    return step


def measure(repeats: int = 5, steps: int = 20) -> dict:
    """{"workload", "s_per_op", "ops_per_step", "s_per_step", "torch"} for this machine's CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # the probe may run inside the program's `torch.no_grad()` (Megatron's optimizer step is decorated
        # with it, and the probe runs at the step's end): its own backward needs grad mode whatever the caller's
        with torch.device("cpu"), torch.enable_grad():
            step = _training_step()
            for _ in range(3):
                step()
            with _OpCounter() as counter:
                step()
            best = math.inf
            for _ in range(repeats):
                t0 = time.process_time()
                for _ in range(steps):
                    step()
                best = min(best, (time.process_time() - t0) / steps)
    finally:
        torch.set_num_threads(threads)
    return {"workload": WORKLOAD, "s_per_op": best / max(counter.ops, 1), "ops_per_step": counter.ops,
            "s_per_step": best, "torch": torch.__version__}


def average(measurements: list[dict]) -> dict:
    """One figure from several measurements of the same workload (the mean seconds per op)."""
    out = dict(measurements[0])
    samples = [m["s_per_op"] for m in measurements]
    out["s_per_op"] = sum(samples) / len(samples)
    out["s_per_step"] = out["s_per_op"] * out["ops_per_step"]
    out["samples_s_per_op"] = samples
    return out
