"""The simulated cluster: which GPU, how many per node, and the links between them.

Defaults come from the part's `GPUSpec` (NVLink/NVSwitch bandwidth inside a node, one NIC per
GPU between nodes); a cluster file (JSON or TOML) or flags override them. Keys of a cluster
file (all optional; unknown keys are an error so a typo never silently keeps a default):

    gpu = "h100"                      # part key, see `maya gpus`; or a [gpu] table describing a
                                      # variant of a known part (emulator.core.variants)
    nnodes = 4
    gpus_per_node = 8                 # alias: nproc_per_node
    nvlink_bandwidth_GBps = 450       # per GPU, one direction, inside a node
    nvlink_domain = 2                 # GPUs of a node NVLink joins: PCIe cards bridged in pairs
                                      # (default: the whole node, NVSwitch); a wider group crosses PCIe
    internode_bandwidth_GBps = 50     # per GPU, one direction, between nodes (400 Gb/s NIC = 50)
    intranode_latency_us = 2
    internode_latency_us = 5
    price_per_gpu_hour = 3.0          # USD
    launch_overhead_us = 4            # host time to launch one kernel
    host_gap_scale = 1.0              # recorded host gaps x this (0.25: the cluster's CPUs run the
                                      # script's Python 4x faster than the machine that emulated it)
    internode_collectives = "model"   # "model": collectives across nodes from the bandwidths above;
                                      # "learned": the collective predictor's inter-node fit, for
                                      # predictors calibrated on this cluster's own network
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from emulator.core.hardware import GPUSpec, get_gpu, with_overrides
from emulator.core.variants import GPUVariantError, variant_from_table

CLUSTER_KEYS = {"gpu", "nnodes", "gpus_per_node", "nproc_per_node", "nvlink_bandwidth_GBps", "nvlink_domain",
                "internode_bandwidth_GBps", "intranode_latency_us", "internode_latency_us", "price_per_gpu_hour",
                "launch_overhead_us", "host_gap_scale", "internode_collectives"}
INTERNODE_COLLECTIVES = ("model", "learned")
WHOLE_KEYS = ("nnodes", "gpus_per_node", "nproc_per_node", "nvlink_domain")  # counts: whole numbers >= 1
POSITIVE_KEYS = ("nvlink_bandwidth_GBps", "internode_bandwidth_GBps")  # a link of no bandwidth is no link
NON_NEGATIVE_KEYS = ("intranode_latency_us", "internode_latency_us", "price_per_gpu_hour", "launch_overhead_us",
                     "host_gap_scale")
DEFAULT_LAUNCH_OVERHEAD_S = 4e-6  # cudaLaunchKernel + ATen dispatch on a modern host CPU


class ClusterFileError(ValueError):
    """A cluster file that cannot be read or has unknown keys."""


@dataclass(frozen=True)
class Cluster:
    spec: GPUSpec  # with any link overrides applied
    nnodes: int
    gpus_per_node: int
    price_per_gpu_hour: float
    launch_overhead_s: float
    host_gap_scale: float = 1.0
    learned_internode: bool = False  # cross-node collectives from the learned fit, not the network model

    @property
    def world_size(self) -> int:
        return self.nnodes * self.gpus_per_node

    def describe(self) -> dict:
        s = self.spec
        return dict(gpu=s.key, nnodes=self.nnodes, gpus_per_node=self.gpus_per_node,
                    nvlink_bandwidth_GBps=s.nvlink_bandwidth / 1e9, nvlink_domain=s.nvlink_domain,
                    internode_bandwidth_GBps=s.internode_bandwidth / 1e9,
                    intranode_latency_us=s.intranode_latency_s * 1e6, internode_latency_us=s.internode_latency_s * 1e6,
                    price_per_gpu_hour=self.price_per_gpu_hour, launch_overhead_us=self.launch_overhead_s * 1e6,
                    host_gap_scale=self.host_gap_scale,
                    internode_collectives="learned" if self.learned_internode else "model")


def read_cluster_file(path: Path) -> dict:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ClusterFileError(f"cannot read cluster file {path}: {e}") from e
    try:
        data = tomllib.loads(raw.decode()) if path.suffix.lower() == ".toml" else json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ClusterFileError(f"{path}: not valid {'TOML' if path.suffix.lower() == '.toml' else 'JSON'}: {e}") \
            from e
    if not isinstance(data, dict):
        raise ClusterFileError(f"{path}: expected a table/object of settings")
    unknown = sorted(set(data) - CLUSTER_KEYS)
    if unknown:
        raise ClusterFileError(f"{path}: unknown keys {unknown}; known: {sorted(CLUSTER_KEYS)}")
    _check_values(data, path)
    if isinstance(data.get("gpu"), dict):  # a variant: registered, and named by its key from here on
        try:
            data["gpu"] = variant_from_table(data["gpu"], f"{path} [gpu]").key
        except GPUVariantError as e:
            raise ClusterFileError(str(e)) from e
    return data


def is_number(v) -> bool:
    """An int or a float, not a bool (TOML's `true` is an int to isinstance)."""
    return isinstance(v, int | float) and not isinstance(v, bool)


def _check_values(data: dict, path: Path) -> None:
    """Each setting's type and range, so a typo in a value (a string, a zero) is named here, not met later
    as a Python error or silently replaced by the default. `build_cluster` relies on it."""
    for key, v in data.items():
        if key in WHOLE_KEYS and not (is_number(v) and isinstance(v, int) and v >= 1):
            raise ClusterFileError(f"{path}: {key} must be a whole number >= 1, got {v!r}")
        if key in POSITIVE_KEYS and not (is_number(v) and v > 0):
            raise ClusterFileError(f"{path}: {key} must be a number > 0, got {v!r}")
        if key in NON_NEGATIVE_KEYS and not (is_number(v) and v >= 0):
            raise ClusterFileError(f"{path}: {key} must be a number >= 0, got {v!r}")
    if "gpu" in data and not isinstance(data["gpu"], str | dict):
        raise ClusterFileError(f"{path}: gpu must be a part's name or a [gpu] table, got {data['gpu']!r}")
    if data.get("internode_collectives", "model") not in INTERNODE_COLLECTIVES:
        raise ClusterFileError(f"{path}: internode_collectives must be one of {list(INTERNODE_COLLECTIVES)}, "
                               f"got {data['internode_collectives']!r}")


def build_cluster(gpu: str, nnodes: int, gpus_per_node: int, file_settings: dict | None = None,
                  price_per_gpu_hour: float | None = None) -> Cluster:
    """The cluster to simulate: flags win over the cluster file (`file_settings`, as `read_cluster_file` read and
    checked them), which wins over the part's defaults."""
    f = dict(file_settings or {})
    spec = get_gpu(gpu)
    changes = {}
    if "nvlink_bandwidth_GBps" in f:
        changes["nvlink_bandwidth"] = float(f["nvlink_bandwidth_GBps"]) * 1e9
    if "internode_bandwidth_GBps" in f:
        changes["internode_bandwidth"] = float(f["internode_bandwidth_GBps"]) * 1e9
    if "intranode_latency_us" in f:
        changes["intranode_latency_s"] = float(f["intranode_latency_us"]) * 1e-6
    if "internode_latency_us" in f:
        changes["internode_latency_s"] = float(f["internode_latency_us"]) * 1e-6
    if "nvlink_domain" in f:
        changes["nvlink_domain"] = f["nvlink_domain"]
    if changes:
        spec = with_overrides(spec, **changes)
    price = price_per_gpu_hour if price_per_gpu_hour is not None else f.get("price_per_gpu_hour", spec.price_per_hour)
    default_launch = 0.0 if spec.is_cpu else DEFAULT_LAUNCH_OVERHEAD_S
    launch = float(f["launch_overhead_us"]) * 1e-6 if "launch_overhead_us" in f else default_launch
    scale = float(f.get("host_gap_scale", 1.0))
    internode = f.get("internode_collectives", "model")
    return Cluster(spec=spec, nnodes=int(nnodes), gpus_per_node=int(gpus_per_node), price_per_gpu_hour=float(price),
                   launch_overhead_s=launch, host_gap_scale=scale, learned_internode=internode == "learned")
