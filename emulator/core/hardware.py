"""The one place that knows each GPU's numbers.

Every other part of maya (the fake device, the roofline fallback, predictor features,
the simulator's topology defaults, cost) reads hardware facts from here. Figures are
vendor datasheet values for the SXM/board part named, dense (no structured sparsity).

Sources:
- H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet (2023), "H100 SXM" column.
- H200 SXM: NVIDIA H200 Tensor Core GPU datasheet (2024), "H200 SXM" column.
- A100: NVIDIA A100 Tensor Core GPU datasheet (2021), SXM4 80GB / 40GB columns,
  and the A100 PCIe 80GB / 40GB columns.
- L40S: NVIDIA L40S datasheet (2023).
- B200: NVIDIA DGX B200 / HGX B200 datasheet (2024), per-GPU figures (dense = sparse / 2).
- V100: NVIDIA Tesla V100 datasheet (2018), SXM2 32GB column.
- L4: NVIDIA L4 datasheet (2023); T4: NVIDIA T4 datasheet (2019).
- H100 NVL / PCIe: H100 datasheet, "H100 NVL" column.
- H800 SXM5: NVIDIA H800 product brief (2023): the H100 SXM5 die with NVLink cut to 400 GB/s
  (both directions, 200 GB/s each way) and FP64 to 1 TFLOP/s; memory and tensor rates as H100.
- H100 SXM5 96 GB: the H100 SXM5 with its sixth HBM3 stack enabled (TechPowerUp GPU database,
  "H100 SXM5 96 GB": 96 GB, 3.36 TB/s, 700 W). Its exposed capacity is the nominal 96 GiB times the
  80 GB part's exposed fraction (81559 / 81920 MiB): an estimate, override it with `memory_GiB`.
Variants (`base` set) are timed by their base part's predictors, brought to the variant's clock,
bandwidths and links by `emulator.estimate.variant` (labelled in every report).
`name` is the string `torch.cuda.get_device_name()` reports on the real part, and
`memory_bytes` the `total_memory` the driver exposes (nvidia-smi's MiB x 2**20).
Prices are indicative on-demand USD per GPU-hour (late 2026 public cloud list prices);
users override them with `--price-per-gpu-hour` or a price file.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field, replace

MiB = 2**20
TB = 1e12
GB = 1e9


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet facts about one accelerator part (or the local CPU)."""

    key: str  # maya's short name: "h100", "a100-80gb", "cpu"
    name: str  # as torch.cuda.get_device_name() reports it
    memory_bytes: int
    sm_count: int
    capability: tuple[int, int]
    peak_flops: dict[str, float]  # dense FLOP/s per dtype name (torch dtype names, "tf32" for fp32 GEMMs)
    hbm_bandwidth: float  # bytes/s
    l2_bytes: int
    nvlink_bandwidth: float  # bytes/s per GPU, one direction (0 = no NVLink)
    pcie_bandwidth: float  # bytes/s, one direction
    clock_mhz: int  # boost clock
    tdp_w: int
    price_per_hour: float  # USD per GPU-hour, indicative
    gpus_per_node: int = 8
    # GPUs of a node that NVLink joins to each other: None = the whole node (NVSwitch), 2 for PCIe cards
    # bridged in pairs. A group wider than this inside a node crosses PCIe, as NCCL's rings over such
    # cards do (vidur's pairwise-NVLink A100 node in the reference network rows)
    nvlink_domain: int | None = None
    internode_bandwidth: float = 50 * GB  # bytes/s per GPU (400 Gb/s NIC per GPU)
    internode_latency_s: float = 5e-6
    intranode_latency_s: float = 2e-6
    aliases: tuple[str, ...] = field(default_factory=tuple)
    is_cpu: bool = False
    base: str | None = None  # a variant of this known part: its predictors time the variant
    power_limit_w: int | None = None  # board power limit when below tdp_w (sets the sustained clock)
    sustained_clock_mhz: int | None = None  # SM clock under a training load, when known
    variant_table: dict | None = None  # the `[gpu]` table it was built from (travels to workers and reports)

    @property
    def model_key(self) -> str:
        """The part whose registered predictors time this one (itself unless it is a variant)."""
        return self.base or self.key

    @property
    def supports_bf16(self) -> bool:
        return self.peak_flops.get("bfloat16", 0.0) > 0

    @property
    def supports_fp8(self) -> bool:
        return self.peak_flops.get("float8_e4m3fn", 0.0) > 0

    def peak_for(self, dtype: str, *, tf32: bool = False) -> float:
        """Dense peak FLOP/s for a GEMM in `dtype` (torch dtype name, with or without 'torch.')."""
        d = dtype.removeprefix("torch.")
        if d in ("float32", "float") and tf32:
            d = "tf32"
        if d.startswith("float8"):
            d = "float8_e4m3fn"
        return self.peak_flops.get(d) or self.peak_flops["float32"]


def _flops(fp32: float, tf32: float, bf16: float, fp16: float, fp8: float = 0.0, fp64: float = 0.0):
    table = {"float32": fp32 * TB, "tf32": tf32 * TB, "bfloat16": bf16 * TB, "float16": fp16 * TB,
             "float64": fp64 * TB}
    if fp8:
        table["float8_e4m3fn"] = fp8 * TB
    return table


GPUS: dict[str, GPUSpec] = {}


def register(spec: GPUSpec) -> GPUSpec:
    GPUS[spec.key] = spec
    return spec


register(GPUSpec(
    key="h100", name="NVIDIA H100 80GB HBM3", memory_bytes=81559 * MiB, sm_count=132,
    capability=(9, 0), peak_flops=_flops(66.9, 494.7, 989.4, 989.4, 1978.9, 33.5),
    hbm_bandwidth=3.35 * TB, l2_bytes=50 * MiB, nvlink_bandwidth=450 * GB, pcie_bandwidth=64 * GB,
    clock_mhz=1980, tdp_w=700, price_per_hour=3.00, aliases=("h100-sxm", "h100_sxm", "h100-80gb"),
))
register(GPUSpec(
    key="h100-96gb", name="NVIDIA H100 96GB HBM3", memory_bytes=int(96 * 1024 * 81559 / 81920) * MiB,
    sm_count=132, capability=(9, 0), peak_flops=_flops(66.9, 494.7, 989.4, 989.4, 1978.9, 33.5),
    hbm_bandwidth=3.36 * TB, l2_bytes=50 * MiB, nvlink_bandwidth=450 * GB, pcie_bandwidth=64 * GB,
    clock_mhz=1980, tdp_w=700, price_per_hour=3.20, aliases=("h100-sxm-96gb", "h100-sxm5-96gb"), base="h100",
))
register(GPUSpec(
    key="h800", name="NVIDIA H800", memory_bytes=81559 * MiB, sm_count=132,
    capability=(9, 0), peak_flops=_flops(66.9, 494.7, 989.4, 989.4, 1978.9, 1.0),
    hbm_bandwidth=3.35 * TB, l2_bytes=50 * MiB, nvlink_bandwidth=200 * GB, pcie_bandwidth=64 * GB,
    clock_mhz=1980, tdp_w=700, price_per_hour=2.60, aliases=("h800-sxm", "h800-sxm5", "h800-80gb"), base="h100",
))
register(GPUSpec(
    key="h100-nvl", name="NVIDIA H100 NVL", memory_bytes=95830 * MiB, sm_count=132,
    capability=(9, 0), peak_flops=_flops(60.0, 417.5, 835.0, 835.0, 1670.5, 30.0),
    hbm_bandwidth=3.9 * TB, l2_bytes=50 * MiB, nvlink_bandwidth=300 * GB, pcie_bandwidth=64 * GB,
    clock_mhz=1785, tdp_w=400, price_per_hour=2.50, gpus_per_node=4, nvlink_domain=2, aliases=("h100-pcie",),
))
register(GPUSpec(
    key="h200", name="NVIDIA H200", memory_bytes=143771 * MiB, sm_count=132,
    capability=(9, 0), peak_flops=_flops(66.9, 494.7, 989.4, 989.4, 1978.9, 33.5),
    hbm_bandwidth=4.8 * TB, l2_bytes=50 * MiB, nvlink_bandwidth=450 * GB, pcie_bandwidth=64 * GB,
    clock_mhz=1980, tdp_w=700, price_per_hour=3.80, aliases=("h200-sxm", "h200_sxm"),
))
register(GPUSpec(
    key="a100-80gb", name="NVIDIA A100-SXM4-80GB", memory_bytes=81920 * MiB, sm_count=108,
    capability=(8, 0), peak_flops=_flops(19.5, 156.0, 312.0, 312.0, 0.0, 9.7),
    hbm_bandwidth=2.039 * TB, l2_bytes=40 * MiB, nvlink_bandwidth=300 * GB, pcie_bandwidth=32 * GB,
    clock_mhz=1410, tdp_w=400, price_per_hour=1.80, internode_bandwidth=25 * GB,
    aliases=("a100", "a100-sxm", "a100_sxm", "a100-sxm4-80gb"),
))
register(GPUSpec(
    key="a100-40gb", name="NVIDIA A100-SXM4-40GB", memory_bytes=40960 * MiB, sm_count=108,
    capability=(8, 0), peak_flops=_flops(19.5, 156.0, 312.0, 312.0, 0.0, 9.7),
    hbm_bandwidth=1.555 * TB, l2_bytes=40 * MiB, nvlink_bandwidth=300 * GB, pcie_bandwidth=32 * GB,
    clock_mhz=1410, tdp_w=400, price_per_hour=1.30, internode_bandwidth=25 * GB,
    aliases=("a100-sxm4-40gb",),
))
register(GPUSpec(
    key="a100-80gb-pcie", name="NVIDIA A100 80GB PCIe", memory_bytes=81920 * MiB, sm_count=108,
    capability=(8, 0), peak_flops=_flops(19.5, 156.0, 312.0, 312.0, 0.0, 9.7),
    hbm_bandwidth=1.935 * TB, l2_bytes=40 * MiB, nvlink_bandwidth=300 * GB, pcie_bandwidth=32 * GB,
    clock_mhz=1410, tdp_w=300, price_per_hour=1.50, gpus_per_node=4, nvlink_domain=2,
    internode_bandwidth=25 * GB,
))
register(GPUSpec(
    key="a100-40gb-pcie", name="NVIDIA A100-PCIE-40GB", memory_bytes=40960 * MiB, sm_count=108,
    capability=(8, 0), peak_flops=_flops(19.5, 156.0, 312.0, 312.0, 0.0, 9.7),
    hbm_bandwidth=1.555 * TB, l2_bytes=40 * MiB, nvlink_bandwidth=0.0, pcie_bandwidth=32 * GB,
    clock_mhz=1410, tdp_w=250, price_per_hour=1.10, gpus_per_node=4, internode_bandwidth=25 * GB,
))
register(GPUSpec(
    key="l40s", name="NVIDIA L40S", memory_bytes=46068 * MiB, sm_count=142,
    capability=(8, 9), peak_flops=_flops(91.6, 183.0, 362.05, 362.05, 733.0),
    hbm_bandwidth=864 * GB, l2_bytes=96 * MiB, nvlink_bandwidth=0.0, pcie_bandwidth=32 * GB,
    clock_mhz=2520, tdp_w=350, price_per_hour=1.00, internode_bandwidth=25 * GB,
))
register(GPUSpec(
    key="b200", name="NVIDIA B200", memory_bytes=183359 * MiB, sm_count=148,
    capability=(10, 0), peak_flops=_flops(75.0, 1100.0, 2250.0, 2250.0, 4500.0, 37.0),
    hbm_bandwidth=8.0 * TB, l2_bytes=126 * MiB, nvlink_bandwidth=900 * GB, pcie_bandwidth=64 * GB,
    clock_mhz=1965, tdp_w=1000, price_per_hour=5.50, aliases=("b200-sxm", "b200_sxm"),
))
register(GPUSpec(
    key="v100", name="Tesla V100-SXM2-32GB", memory_bytes=32510 * MiB, sm_count=80,
    capability=(7, 0), peak_flops=_flops(15.7, 0.0, 0.0, 125.0, 0.0, 7.8),
    hbm_bandwidth=900 * GB, l2_bytes=6 * MiB, nvlink_bandwidth=150 * GB, pcie_bandwidth=16 * GB,
    clock_mhz=1530, tdp_w=300, price_per_hour=0.80, internode_bandwidth=12.5 * GB,
    aliases=("v100-32gb", "v100-sxm2"),
))
register(GPUSpec(
    key="l4", name="NVIDIA L4", memory_bytes=23034 * MiB, sm_count=58,
    capability=(8, 9), peak_flops=_flops(30.3, 60.0, 121.0, 121.0, 242.5),
    hbm_bandwidth=300 * GB, l2_bytes=48 * MiB, nvlink_bandwidth=0.0, pcie_bandwidth=32 * GB,
    clock_mhz=2040, tdp_w=72, price_per_hour=0.70,
))
register(GPUSpec(
    key="t4", name="Tesla T4", memory_bytes=15360 * MiB, sm_count=40,
    capability=(7, 5), peak_flops=_flops(8.1, 0.0, 0.0, 65.0),
    hbm_bandwidth=320 * GB, l2_bytes=4 * MiB, nvlink_bandwidth=0.0, pcie_bandwidth=16 * GB,
    clock_mhz=1590, tdp_w=70, price_per_hour=0.35,
))


# Threads of one CPU rank: maya (like torchrun) runs each rank with OMP_NUM_THREADS=1, so the `cpu`
# target's kernels are measured, and predicted, on one thread.
CPU_RANK_THREADS = 1


def cpu_model_name() -> str:
    """The processor's marketing name (/proc/cpuinfo on Linux, else what platform knows)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_spec() -> GPUSpec:
    """The local processor as a 'device': used by CPU calibration and validation.

    Peak figures are nominal (cores x 2 FMA units x AVX2/AVX-512 lanes x clock); the
    predictors learn the real efficiency from CPU measurements, so these only seed the
    roofline fallback.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    model = cpu_model_name()
    ghz = 2.5
    fp32 = cores * ghz * 1e9 * 32  # 2 FMA x 8 fp32 lanes x 2 flops
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = 16 * 2**30
    return GPUSpec(
        key="cpu", name=f"CPU: {model}", memory_bytes=mem, sm_count=cores, capability=(0, 0),
        peak_flops={"float32": fp32, "tf32": fp32, "bfloat16": fp32, "float16": fp32 / 4,
                    "float64": fp32 / 2},
        hbm_bandwidth=20 * GB, l2_bytes=32 * MiB, nvlink_bandwidth=0.0, pcie_bandwidth=10 * GB,
        clock_mhz=int(ghz * 1000), tdp_w=0, price_per_hour=0.05, gpus_per_node=cores,
        internode_bandwidth=1.25 * GB, internode_latency_s=50e-6, intranode_latency_s=20e-6,
        is_cpu=True,
    )


register(_cpu_spec())


class UnknownGPUError(KeyError):
    """An unknown part was asked for; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return self.args[0]


def known_gpus() -> list[str]:
    return sorted(GPUS)


def get_gpu(key: str) -> GPUSpec:
    """Look a part up by maya key, alias or the name torch reports (case-insensitive)."""
    k = key.strip().lower().replace(" ", "-")
    if k in GPUS:
        return GPUS[k]
    for spec in GPUS.values():
        if k in spec.aliases or k == spec.name.lower().replace(" ", "-"):
            return spec
    raise UnknownGPUError(f"unknown GPU {key!r}; known parts: {', '.join(known_gpus())}")


def gpu_key_from_device_name(name: str) -> str | None:
    """Map a device name as NVML/torch report it ('NVIDIA H100 80GB HBM3') to a maya key."""
    n = name.lower()
    for spec in GPUS.values():
        if spec.name.lower() == n:
            return spec.key
    rules = [("h200", "h200"), ("h800", "h800"), ("h100 nvl", "h100-nvl"), ("h100 pcie", "h100-nvl"),
             ("h100 96gb", "h100-96gb"), ("h100", "h100"),
             ("b200", "b200"), ("a100-sxm4-40gb", "a100-40gb"), ("a100-pcie-40gb", "a100-40gb-pcie"),
             ("a100 80gb pcie", "a100-80gb-pcie"), ("a100", "a100-80gb"), ("l40s", "l40s"), ("l4", "l4"),
             ("v100", "v100"), ("t4", "t4")]
    for needle, key in rules:
        if needle in n:
            return key
    return None


def with_overrides(spec: GPUSpec, **changes) -> GPUSpec:
    """A copy of `spec` with some fields changed (e.g. a cluster file's network bandwidth)."""
    return replace(spec, **changes)
