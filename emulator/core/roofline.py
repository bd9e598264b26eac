"""The analytical fallback: a roofline for kernels and an alpha-beta model for collectives.

maya prefers learned predictors (trained on real measurements, loaded from the MLflow
registry). This module is the *labelled* fallback they and the simulator use where no
measurement covers an op, and the prior `maya_models` builds its predictors around. Every
duration it returns is a model quantity, never a measurement: callers must label rows timed
here with source ``fallback``.

Assumptions (stated once, here, so reports can point at them):

Kernels -- ``time = max(launch_floor, flops / (eff_c * peak(dtype)), bytes / (eff_m * HBM bw))``
  * GEMM-like families (gemm, conv, attention) run on tensor cores at the dtype's dense peak
    (`GPUSpec.peak_for`; fp32 GEMMs use the fp32 SIMT peak because PyTorch disables TF32 for
    matmuls by default). Other families do their few flops on the fp32 SIMT pipes.
  * Achievable fractions ``FAMILY_EFFICIENCY`` (compute, memory): large cuBLAS GEMMs reach
    ~70-80% of dense peak, flash attention ~50-60% forward and ~40% backward, well-written
    bandwidth-bound kernels (elementwise, norms, copies, foreach optimizers) ~70-80% of HBM
    bandwidth. These are round numbers from public benchmark reports, not fitted here.
  * ``LAUNCH_FLOOR_S``: no kernel takes less than ~2.5 us on a datacenter GPU (launch +
    the smallest grid); 1 us on the CPU "device".
  * memcpy (host<->device) moves ``bytes`` over PCIe at 80% of its one-direction bandwidth.

Host ops -- ``time = max(1 us, flops / (0.5 * host peak), bytes / (0.7 * host bandwidth))``
  * `host_op` rows (ops on tensors the program moved to the host: CPU offload's optimizer step)
    run on the GPU node's CPU. A dual-socket server of an 8-GPU node has ~600 GB/s of DRAM
    bandwidth and ~10-15 TFLOP/s of fp32 SIMD; one rank (a process and its intra-op threads)
    gets an eighth: ``HOST_BANDWIDTH_PER_GPU``, ``HOST_FLOPS_PER_GPU``. Round numbers, not
    fitted. On the `cpu` target the host is the device itself.

Collectives -- alpha-beta per algorithm, NCCL-like:
  ``time = base + steps(n) * alpha + factor(n) * coll_bytes / (eff * bw)``
  * ``coll_bytes`` follows the nccl-tests convention (see `emulator.core.ops`); ``factor`` is the
    nccl-tests bus-bandwidth factor of a ring (all_reduce 2(n-1)/n, all_gather/reduce_scatter/
    all_to_all (n-1)/n, broadcast/reduce/send/recv 1).
  * Inside one node the link is NVLink/NVSwitch (per-GPU one-direction bandwidth, PCIe when
    the part has no NVLink) with ``intranode_latency_s`` per step. A group spanning several
    nodes crosses the network with ``internode_latency_s`` per step; each GPU has its own NIC
    (``internode_bandwidth``, rail-optimised clusters such as DGX SuperPODs), and NCCL spreads
    its rings over the NICs of all the group's GPUs in a node, so a collective whose group has
    k GPUs per node gets min(k x NIC, NVLink) -- a TP16 group over two 8-GPU nodes uses all
    eight NICs of each node, a data-parallel group with one GPU per node uses one. A p2p pair
    across nodes uses one NIC.
  * all_reduce takes the faster of ring (2(n-1) steps) and tree (2 log2 n steps, factor 2).
  * ``eff`` = 0.8 of the link bandwidth; ``base`` = 5 us per NCCL kernel launch.
"""

from __future__ import annotations

import math

import numpy as np

from emulator.core.hardware import GPUSpec
from emulator.core.ops import as_list, as_number, collective_name, op_family

SOURCE = "fallback"  # the label every duration from this module carries

# (compute fraction of peak, memory fraction of HBM bandwidth) per op family
FAMILY_EFFICIENCY: dict[str, tuple[float, float]] = {
    "gemm": (0.75, 0.80),
    "conv": (0.60, 0.70),
    "attention_fwd": (0.55, 0.70),
    "attention_bwd": (0.40, 0.60),
    "norm": (0.50, 0.70),
    "softmax_loss": (0.50, 0.70),
    "embedding": (0.50, 0.60),
    "optimizer": (0.50, 0.75),
    "copy": (0.50, 0.80),
    "memset": (0.50, 0.85),
    "elementwise": (0.50, 0.80),
    "generated": (0.50, 0.75),  # Inductor's fused Triton kernels: bandwidth-bound, about as good as hand-written
    "other": (0.50, 0.60),
}
TENSOR_CORE_FAMILIES = frozenset({"gemm", "conv", "attention_fwd", "attention_bwd"})
LAUNCH_FLOOR_S = 2.5e-6
CPU_LAUNCH_FLOOR_S = 1e-6
PCIE_EFFICIENCY = 0.8

HOST_BANDWIDTH_PER_GPU = 75e9
HOST_FLOPS_PER_GPU = 1.5e12
HOST_OP_FLOOR_S = 1e-6

COLLECTIVE_BASE_S = 5e-6
LINK_EFFICIENCY = 0.8


def launch_floor(spec: GPUSpec) -> float:
    return CPU_LAUNCH_FLOOR_S if spec.is_cpu else LAUNCH_FLOOR_S


def compute_and_memory_time(flops: float, bytes: float, dtype: str | None, family: str,
                            spec: GPUSpec) -> tuple[float, float]:
    """(seconds of arithmetic, seconds of DRAM traffic) of one kernel at the family's achievable fractions."""
    eff_c, eff_m = FAMILY_EFFICIENCY.get(family, FAMILY_EFFICIENCY["other"])
    if family in TENSOR_CORE_FAMILIES:
        peak = spec.peak_for(dtype or "float32")
    else:
        peak = spec.peak_flops["float32"]
    return float(flops or 0.0) / (eff_c * peak), float(bytes or 0.0) / (eff_m * spec.hbm_bandwidth)


def compute_share(flops: float, bytes: float, dtype: str | None, family: str, spec: GPUSpec) -> float:
    """How much of the kernel's time the SM clock sets: 1 when compute bound, t_compute / t_memory below the
    ridge point (DRAM traffic does not follow the SM clock)."""
    t_compute, t_memory = compute_and_memory_time(flops, bytes, dtype, family, spec)
    if t_compute <= 0:
        return 0.0
    return 1.0 if t_compute >= t_memory else t_compute / t_memory


def kernel_time(flops: float, bytes: float, dtype: str | None, family: str, spec: GPUSpec) -> float:
    """Seconds one kernel of `family` doing `flops` and moving `bytes` takes on `spec` (roofline)."""
    floor = launch_floor(spec)
    if family == "memcpy":
        return max(floor, float(bytes or 0.0) / (PCIE_EFFICIENCY * spec.pcie_bandwidth))
    t_compute, t_memory = compute_and_memory_time(flops, bytes, dtype, family, spec)
    return max(floor, t_compute, t_memory)


def host_op_time(flops: float, bytes: float, spec: GPUSpec) -> float:
    """Seconds the host's CPU of a `spec` node takes for one op on host tensors (one rank's share)."""
    if spec.is_cpu:
        bandwidth, peak = spec.hbm_bandwidth, spec.peak_flops["float32"]
    else:
        bandwidth, peak = HOST_BANDWIDTH_PER_GPU, HOST_FLOPS_PER_GPU
    return max(HOST_OP_FLOOR_S, float(flops or 0.0) / (0.5 * peak), float(bytes or 0.0) / (0.7 * bandwidth))


def ring_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: how many times the message crosses each link of a ring."""
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    if collective == "barrier":
        return 0.0
    return 1.0  # broadcast, reduce, send, recv: the whole message crosses each link once (pipelined)


def ring_steps(collective: str, n: int) -> int:
    """Latency steps of the algorithm on `n` GPUs (ring; log-depth trees for broadcast, reduce, barrier)."""
    if collective == "all_reduce":
        return 2 * (n - 1)
    if collective in ("send", "recv"):
        return 1
    if collective in ("broadcast", "reduce", "barrier"):
        return max(1, math.ceil(math.log2(n)))
    return n - 1


def group_link(spec: GPUSpec, collective: str, group_size: int, nnodes: int) -> tuple[float, float]:
    """(bandwidth bytes/s, per-step latency s) of the slowest link `collective` uses on a group of
    `group_size` GPUs spread evenly over `nnodes` nodes. Inside a node: NVLink while the group's GPUs
    there fit the part's NVLink domain (`GPUSpec.nvlink_domain`: pairs for bridged PCIe cards), PCIe
    beyond it or without NVLink; between nodes the NICs of the group's GPUs in a node (one for a
    p2p pair), capped by that inside link."""
    nodes = max(int(nnodes or 1), 1)
    members = math.ceil(max(int(group_size or 1), 1) / nodes)  # the group's GPUs in each node
    nvlink = spec.nvlink_bandwidth > 0 and (spec.nvlink_domain is None or members <= spec.nvlink_domain)
    intra = spec.nvlink_bandwidth if nvlink else spec.pcie_bandwidth
    if nodes == 1:
        return intra, spec.intranode_latency_s
    rails = 1 if collective in ("send", "recv") else members
    return min(intra, rails * spec.internode_bandwidth), spec.internode_latency_s


def collective_time(collective: str, coll_bytes: float, group_size: int, nnodes: int, gpus_per_node: int,
                    spec: GPUSpec) -> float:
    """Seconds one `collective` (emulator.core.ops.collective_name form) of `coll_bytes` takes on a group of
    `group_size` GPUs spread over `nnodes` nodes with `gpus_per_node` GPUs each.

    `gpus_per_node` is part of the stable signature (learned collective models use it); the
    alpha-beta model needs only how many of the group's GPUs share a node, `group_size / nnodes`
    (groups are spread evenly over the nodes they span).
    """
    del gpus_per_node  # see docstring
    n = max(int(group_size or 1), 1)
    if collective in ("send", "recv"):
        n = max(n, 2)
    if n == 1:
        return launch_floor(spec)
    bw, alpha = group_link(spec, collective, n, nnodes)
    size = float(coll_bytes or 0.0)
    eff_bw = LINK_EFFICIENCY * bw
    ring = ring_steps(collective, n) * alpha + ring_factor(collective, n) * size / eff_bw
    if collective == "all_reduce":
        tree = 2 * math.ceil(math.log2(n)) * alpha + 2.0 * size / eff_bw
        ring = min(ring, tree)
    return COLLECTIVE_BASE_S + ring


def row_dtype(op: str, dtypes) -> str:
    """The dtype that sets a row's peak: the matrix operands' for addmm-style ops, else the first input's."""
    d = list(dtypes or [])
    if not d:
        return "float32"
    if op in ("aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation", "aten::addmv") and len(d) > 1:
        return str(d[1])
    return str(d[0])


def roofline_durations(df, spec: GPUSpec) -> np.ndarray:
    """Fallback durations (s) for every row of a pandas DataFrame of trace rows.

    Uses columns `kind, op, dtypes, flops, bytes` and, for collective/p2p rows, `collective,
    coll_bytes, group_size, nnodes, gpus_per_node` (the estimation contract). `dtypes` may be
    lists or JSON strings.
    """
    out = np.empty(len(df), dtype=np.float64)
    cols = df.columns
    for i, row in enumerate(df.itertuples(index=False)):
        r = dict(zip(cols, row, strict=True))
        kind, op = r.get("kind"), r.get("op")
        if kind == "host_op":
            out[i] = host_op_time(as_number(r.get("flops")), as_number(r.get("bytes")), spec)
        elif kind in ("collective", "p2p"):
            coll = r.get("collective") or collective_name(op)
            out[i] = collective_time(coll, as_number(r.get("coll_bytes")), int(as_number(r.get("group_size"), 1)),
                                     int(as_number(r.get("nnodes"), 1)), int(as_number(r.get("gpus_per_node"), 8)),
                                     spec)
        else:
            fam = "memcpy" if kind == "memcpy" else op_family(op)
            out[i] = kernel_time(as_number(r.get("flops")), as_number(r.get("bytes")),
                                 row_dtype(op, as_list(r.get("dtypes"))), fam, spec)
    return out
