"""How fast a machine's CPU runs the host side of eager PyTorch: CPU seconds per dispatched op.

Why: a recorded host gap is the program's CPU time on the machine that emulated it, but the
GPU servers a prediction is for run that Python on their own CPUs, often faster than a laptop
or a shared VM. The same fixed workload timed on both sides gives the ratio `maya predict`
scales host gaps by: here at emulation time (rank 0 measures before and after the program and
writes the mean to its summary: a shared machine's speed drifts while the gaps are recorded), and
on the GPU node by the hardware inventory of a calibration run (`pipelines.runners.hardware`). Without a
measurement of the target's nodes, the newest measured node of another GPU stands in (a GPU server's
CPU is nearer another GPU server's than the machine that emulated, often a laptop or a shared VM),
and the prediction says it is a proxy; with no GPU node measured at all the ratio is 1.

The workload: forward, backward and a foreach AdamW step of a small MLP (Linear, LayerNorm,
GELU) on tiny CPU tensors, so the time is dispatch, autograd and Python, not arithmetic. One
thread; the best of several repeats, because interference from other processes only adds time.
Needs only torch (it runs on bare GPU nodes).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

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
        with torch.device("cpu"):
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


def scale_between(local: dict | None, target: dict | None) -> float | None:
    """Target host seconds per local host second, or None when the two were not measured alike."""
    if not local or not target or local.get("workload") != target.get("workload"):
        return None
    a, b = local.get("s_per_op"), target.get("s_per_op")
    if not a or not b or a <= 0 or b <= 0:
        return None
    return float(b) / float(a)


def target_host_speed(gpu_key: str, warehouse: Path | None = None) -> tuple[dict | None, str | None]:
    """(host speed, where it came from) of the newest hardware inventory of `gpu_key`'s nodes, if any:
    the warehouse's own (a calibration run), else the committed ones in the reference folder."""
    return _newest_inventory(lambda folder: folder.name == f"gpu={gpu_key}", warehouse)


def proxy_host_speed(gpu_key: str, warehouse: Path | None = None) -> tuple[dict | None, str | None]:
    """(host speed, where) of the newest inventory of any other GPU's nodes: the stand-in for a target
    whose nodes were never measured."""
    return _newest_inventory(lambda folder: folder.name not in (f"gpu={gpu_key}", "gpu=cpu"), warehouse)


def _newest_inventory(wanted, warehouse: Path | None) -> tuple[dict | None, str | None]:
    """The newest inventory with a host speed in the `gpu=*` folders `wanted` accepts: the warehouse's
    first, then the committed reference folder's."""
    from emulator.core.settings import reference_root, warehouse_root

    for root in (warehouse or warehouse_root(), reference_root()):
        paths = [p for f in (root / "hardware").glob("gpu=*") if wanted(f) for p in f.glob("*.json")]
        for path in sorted(paths, key=lambda p: p.stat().st_mtime, reverse=True):
            try:
                inv = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a damaged inventory is skipped, not fatal: the next one may do
            cpu = inv.get("cpu") or {}
            if isinstance(cpu.get("host_speed"), dict):
                gpu = path.parent.name.removeprefix("gpu=")
                return cpu["host_speed"], f"{cpu.get('model') or 'host CPU'} of the {gpu} node (inventory {path.stem})"
    return None, None


def host_gap_scale(local: dict | None, gpu_key: str, explicit: float | None = None) -> dict:
    """How the simulator scales this trace's host gaps for `gpu_key`'s nodes, and why (prediction.json)."""
    if explicit is not None:
        return {"scale": float(explicit), "source": "host_gap_scale in the cluster file"}
    from emulator.core.hardware import get_gpu

    if get_gpu(gpu_key).is_cpu:
        return {"scale": 1.0, "source": "the cpu target is this machine"}
    kind = "measured"
    target, where = target_host_speed(gpu_key)
    scale = scale_between(local, target)
    if scale is None:
        kind = f"proxy (no host-speed measurement of {gpu_key} nodes; `make calibrate` on one measures it)"
        target, where = proxy_host_speed(gpu_key)
        scale = scale_between(local, target)
    if scale is None:
        why = ("no host-speed measurement of this machine in the trace" if not local else
               "no host-speed measurement of any GPU node (run the hardware asset of `make calibrate` on one)")
        return {"scale": 1.0, "source": f"unscaled: this machine's host speed ({why})"}
    return {"scale": scale, "source": f"{kind}: {where} vs this machine",
            "local_s_per_op": local["s_per_op"], "target_s_per_op": target["s_per_op"]}
