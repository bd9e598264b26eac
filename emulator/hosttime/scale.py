"""The host-speed ratio between the machine that emulated and the target's nodes.

Both sides time the same workload (`emulator.core.hostspeed`). Without a measurement of the
target's nodes, the newest measured node of another GPU stands in (a GPU server's CPU is nearer
another GPU server's than the machine that emulated, often a laptop or a shared VM), and the
prediction says it is a proxy; with no GPU node measured at all the ratio is 1 and the
prediction says so.
"""

from __future__ import annotations

import json
from pathlib import Path


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


def rank_scale(host: dict, speeds: list[float]) -> float:
    """The host-gap scale of one rank from its own probes of the host-speed workload: the median of the
    rank's probes (before the program and after each iteration) against the target's measurement.

    Why the median of every probe and not the run's first and last: this machine's speed moves within
    seconds, and a probe is itself a short sample; the median over several, spread through the run, is
    the most stable estimate of the speed the gaps were recorded at (single probes next to each
    iteration made the spread of five predictions worse, not better). The run's one scale when the
    target's speed is not a measurement (an explicit scale, the cpu target, no inventory) or the rank
    took no probes."""
    target = host.get("target_s_per_op")
    good = sorted(s for s in speeds if s and s > 0)
    if not target or not good:
        return float(host["scale"])
    return float(target) / _median(good)


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def probe_band(speeds: list[float]) -> tuple[float, float]:
    """(low, high) factors on a rank's host-gap scale: the median probe against the slowest and the
    fastest probe of the rank's run.

    Why: a rank's gaps were recorded at this machine's speed of their moment, which its probes only
    bracket (the machine's speed moves within seconds); scaled by the slowest probe instead of the
    median they are the shortest the target's host time can be on this evidence, by the fastest the
    longest. (1, 1) when the rank took fewer than two probes: no evidence of a spread."""
    good = sorted(s for s in speeds if s and s > 0)
    if len(good) < 2:
        return 1.0, 1.0
    mid = _median(good)
    return mid / good[-1], mid / good[0]
