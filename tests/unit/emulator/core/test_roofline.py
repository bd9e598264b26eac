"""The labelled analytical fallback: sane magnitudes and the directions a user relies on."""

import pandas as pd
import pytest

from emulator.core.hardware import get_gpu, with_overrides
from emulator.core.roofline import collective_time, group_link, kernel_time, roofline_durations

H100, A100 = get_gpu("h100"), get_gpu("a100-80gb")


def test_large_bf16_gemm_is_compute_bound_near_peak():
    m = n = k = 8192
    flops, nbytes = 2.0 * m * n * k, 3 * m * n * 2
    t = kernel_time(flops, nbytes, "bfloat16", "gemm", H100)
    # 1.1 TFLOP at 75% of 989 TFLOP/s ~ 1.5 ms
    assert t == pytest.approx(flops / (0.75 * 989.4e12), rel=1e-6)
    assert kernel_time(flops, nbytes, "bfloat16", "gemm", A100) > 2.5 * t


def test_elementwise_is_memory_bound_and_tiny_kernels_hit_the_launch_floor():
    t = kernel_time(1e8, 8e8, "float32", "elementwise", H100)
    assert t == pytest.approx(8e8 / (0.8 * 3.35e12), rel=1e-6)
    assert kernel_time(10, 40, "float32", "elementwise", H100) == pytest.approx(2.5e-6)


def test_collectives_scale_with_bytes_and_leaving_the_node_costs_more():
    small = collective_time("all_reduce", 1 << 20, 8, 1, 8, H100)
    big = collective_time("all_reduce", 1 << 30, 8, 1, 8, H100)
    assert big > 100 * small
    inter = collective_time("all_reduce", 1 << 30, 2, 2, 8, H100)
    assert inter > 4 * big  # one 50 GB/s NIC vs 450 GB/s NVLink
    # ring all_gather moves (n-1)/n of the gathered buffer, all_reduce twice that
    ag = collective_time("all_gather", 1 << 30, 8, 1, 8, H100)
    assert big / ag == pytest.approx(2.0, rel=0.05)
    assert collective_time("all_reduce", 1 << 30, 1, 1, 8, H100) < 1e-5  # a group of one does nothing


def test_vectorised_helper_matches_scalar_functions():
    df = pd.DataFrame([
        dict(kind="kernel", op="aten::mm", dtypes='["bfloat16", "bfloat16"]', flops=2e12, bytes=1e8),
        dict(kind="collective", op="c10d::allreduce_", dtypes="[]", flops=0.0, bytes=0.0, collective="all_reduce",
             coll_bytes=1 << 28, group_size=8, nnodes=1, gpus_per_node=8),
    ])
    d = roofline_durations(df, H100)
    assert d[0] == pytest.approx(kernel_time(2e12, 1e8, "bfloat16", "gemm", H100))
    assert d[1] == pytest.approx(collective_time("all_reduce", 1 << 28, 8, 1, 8, H100))


def test_a_group_spanning_nodes_uses_the_nics_of_all_its_gpus_in_a_node():
    """Rail-optimised clusters: NCCL spreads its rings over the NICs of the group's GPUs in each node,
    so TP16 over two 8-GPU nodes moves data over 8 NICs per node; one GPU per node uses one NIC; a
    p2p pair uses one. The node's NVLink caps it. (Ring: 5 us per step between nodes, 5 us launch.)"""
    a100 = A100  # 25 GB/s HDR NIC per GPU, 300 GB/s NVLink
    size = 200e6
    tp16 = collective_time("all_reduce", size, 16, 2, 8, a100)
    dp_one_per_node = collective_time("all_reduce", size, 2, 2, 8, a100)
    assert tp16 == pytest.approx(5e-6 + 30 * 5e-6 + 2 * 15 / 16 * size / (0.8 * 8 * 25e9), rel=0.02)
    assert dp_one_per_node == pytest.approx(5e-6 + 2 * 5e-6 + 2 * 1 / 2 * size / (0.8 * 25e9), rel=0.02)
    four_per_node = collective_time("all_gather", size, 8, 2, 8, a100)
    assert four_per_node == pytest.approx(5e-6 + 7 * 5e-6 + 7 / 8 * size / (0.8 * 4 * 25e9), rel=0.02)
    assert collective_time("send", size, 2, 2, 8, a100) == pytest.approx(5e-6 + 5e-6 + size / (0.8 * 25e9), rel=0.02)
    fat_nics = with_overrides(a100, internode_bandwidth=100e9)
    capped = collective_time("all_reduce", size, 16, 2, 8, fat_nics)  # 8 x 100 GB/s > 300 GB/s NVLink
    assert capped == pytest.approx(5e-6 + 30 * 5e-6 + 2 * 15 / 16 * size / (0.8 * a100.nvlink_bandwidth), rel=0.02)


def test_a_group_wider_than_the_nvlink_bridge_crosses_pcie():
    """PCIe cards bridged in pairs (A100 80GB PCIe, H100 NVL): two GPUs talk over the bridge, four go
    over PCIe, as nccl-tests on such servers measure (vidur's pairwise-NVLink A100 node: 188 GB/s of bus
    bandwidth for a pair, 24 for four). An SXM part's NVSwitch joins the whole node."""
    pcie_card, sxm = get_gpu("a100-80gb-pcie"), get_gpu("a100-40gb")
    assert group_link(pcie_card, "all_reduce", 2, 1)[0] == pcie_card.nvlink_bandwidth
    assert group_link(pcie_card, "all_reduce", 4, 1)[0] == pcie_card.pcie_bandwidth
    assert group_link(get_gpu("h100-nvl"), "all_gather", 4, 1)[0] == get_gpu("h100-nvl").pcie_bandwidth
    assert group_link(sxm, "all_reduce", 8, 1)[0] == sxm.nvlink_bandwidth
    size = 200e6
    four = [collective_time("all_reduce", size, 4, 1, 4, spec) for spec in (pcie_card, sxm)]
    assert four[0] > 5 * four[1]
    # across nodes the NICs are capped by the link inside: four bridged cards per node feed their NICs over PCIe
    nics = 4 * pcie_card.internode_bandwidth
    assert group_link(pcie_card, "all_reduce", 8, 2)[0] == min(pcie_card.pcie_bandwidth, nics)
    assert group_link(sxm, "all_reduce", 16, 1)[0] == sxm.nvlink_bandwidth  # NVSwitch: the whole node
