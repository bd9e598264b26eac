"""The labelled analytical fallback: sane magnitudes and the directions a user relies on."""

import pandas as pd
import pytest

from emulator.hardware import get_gpu
from emulator.roofline import collective_time, kernel_time, roofline_durations

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
    inter = collective_time("all_reduce", 1 << 30, 16, 2, 8, H100)
    assert inter > 4 * big  # 50 GB/s NIC vs 450 GB/s NVLink
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
