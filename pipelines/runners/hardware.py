"""Hardware inventory: what a calibration run measured on. `python -m pipelines.runners.hardware --gpu G`.

GPUs are described through NVML (nvidia-ml-py): name, UUID, memory, SM and memory clocks,
power limit, driver and CUDA versions, NVLink / P2P topology and current throttle reasons. Without
NVML (no driver, a CPU machine) that part is recorded as unavailable with the reason — never a crash.
The CPU is always described (model, cores, threads torch uses, and its eager-PyTorch host speed,
`emulator.core.hostspeed`), because CPU timings and the host side of every benchmark, and of every
prediction for these GPUs, depend on it.
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

from pipelines.runners import common


def cpu_description() -> dict:
    import torch

    from emulator.core.hardware import cpu_model_name  # stdlib only: fine on a bare node

    model = cpu_model_name()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = None
    from emulator.core import hostspeed  # torch only: fine on a bare node

    return {"model": model, "logical_cores": os.cpu_count(), "usable_cores": usable,
            "torch_threads": torch.get_num_threads(), "memory_bytes": mem, "machine": platform.machine(),
            "python": platform.python_version(), "torch": torch.__version__,
            # what `maya predict` scales emulated host gaps by, against the emulating machine's figure
            "host_speed": hostspeed.measure()}


def _s(x):
    return x.decode() if isinstance(x, bytes) else x


def _throttle_reasons(nv, h) -> list[str]:
    try:
        mask = nv.nvmlDeviceGetCurrentClocksEventReasons(h)
    except Exception:  # older drivers: the pre-rename call
        try:
            mask = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        except Exception:
            return ["unknown"]
    names = {n: getattr(nv, n) for n in dir(nv) if n.startswith("nvmlClocksThrottleReason") and
             n not in ("nvmlClocksThrottleReasonAll", "nvmlClocksThrottleReasonNone")}
    return sorted(n.removeprefix("nvmlClocksThrottleReason") for n, bit in names.items()
                  if isinstance(bit, int) and bit and mask & bit) or ["none"]


def _try(fn, *a):
    try:
        return _s(fn(*a))
    except Exception as e:  # noqa: BLE001 - one unsupported query must not lose the others
        return f"unavailable: {type(e).__name__}"


def gpu_description() -> dict:
    """NVML facts for every GPU, or {'available': False, 'reason': ...}."""
    try:
        import pynvml as nv
    except ImportError as e:
        return {"available": False, "reason": f"nvidia-ml-py not installed: {e}"}
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:
        return {"available": False, "reason": f"NVML unavailable: {e}"}
    try:
        count = nv.nvmlDeviceGetCount()
        cuda = nv.nvmlSystemGetCudaDriverVersion()
        out = {"available": True, "driver": _try(nv.nvmlSystemGetDriverVersion),
               "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}", "count": count, "devices": []}
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        for i, h in enumerate(handles):
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            d = {"index": i, "name": _try(nv.nvmlDeviceGetName, h), "uuid": _try(nv.nvmlDeviceGetUUID, h),
                 "memory_bytes": int(mem.total),
                 "sm_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                 "sm_clock_max_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                 "mem_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                 "mem_clock_max_mhz": _try(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
                 "power_limit_w": (lambda v: v / 1000 if isinstance(v, int) else v)(
                     _try(nv.nvmlDeviceGetPowerManagementLimit, h)),
                 "temperature_c": _try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
                 "throttle_reasons": _throttle_reasons(nv, h), "nvlink": [], "p2p": {}}
            remote = getattr(nv, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None) or nv.nvmlDeviceGetNvLinkRemotePciInfo
            for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if nv.nvmlDeviceGetNvLinkState(h, link) == nv.NVML_FEATURE_ENABLED:
                        d["nvlink"].append({"link": link, "peer_bus_id": _s(remote(h, link).busId)})
                except Exception:  # noqa: BLE001 - NVMLError past the last link, or no NVLink at all
                    break
            for j, hj in enumerate(handles):
                if j != i:
                    try:
                        lvl = nv.nvmlDeviceGetTopologyCommonAncestor(h, hj)
                        d["p2p"][str(j)] = int(lvl)
                    except Exception as e:  # noqa: BLE001
                        d["p2p"][str(j)] = f"unavailable: {type(e).__name__}: {e}"
            out["devices"].append(d)
        return out
    except Exception as e:  # noqa: BLE001 - NVMLError or a binding without some call: no crash, say why
        return {"available": False, "reason": f"NVML query failed: {type(e).__name__}: {e}"}
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def inventory(gpu: str) -> dict:
    """The full description for partition `gpu` (which device of the inventory it is, when found)."""
    from emulator.core.hardware import gpu_key_from_device_name

    inv = {"gpu": gpu, "collected_at": common.now().isoformat(), "cpu": cpu_description(),
           "nvml": gpu_description()}
    if inv["nvml"].get("available"):
        inv["matching_devices"] = [d["index"] for d in inv["nvml"]["devices"]
                                   if gpu_key_from_device_name(str(d["name"])) == gpu]
    return inv


def write_inventory(root: Path, gpu: str, run_id: str, inv: dict) -> Path:
    path = Path(root) / "hardware" / f"gpu={gpu}" / f"{run_id}.json"
    common.write_json_atomic(path, {**inv, "run_id": run_id})
    return path


def main(argv=None) -> int:
    from emulator.core.settings import warehouse_root

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--root", default=None)
    p.add_argument("--summary", default=None)
    a = p.parse_args(argv)
    inv = inventory(a.gpu)
    path = write_inventory(Path(a.root) if a.root else warehouse_root(), a.gpu, a.run_id, inv)
    common.emit_summary({"suite": "hardware", "path": str(path), **inv}, a.summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
