"""GPU variants: a `[gpu]` table describes the part a team rents as a known part plus what differs."""

import json
import re

import pytest

from emulator.bench.synthetic import ddp_rank, write_job
from emulator.core.hardware import get_gpu
from emulator.core.variants import GPUVariantError, read_gpu_spec_file, variant_from_table
from emulator.pipeline import predict_from_trace
from emulator.simulate.cluster import ClusterFileError, read_cluster_file


@pytest.fixture
def out8(tmp_path):
    return write_job(tmp_path / "out", {r: ddp_rank(r, 8, async_op=False).table() for r in range(8)},
                     nnodes=1, nproc_per_node=8)


def test_shipped_variants_are_timed_by_the_h100_predictors():
    for key in ("h100-96gb", "h800"):
        spec = get_gpu(key)
        assert spec.model_key == "h100" and spec.base == "h100"
    assert get_gpu("h100-96gb").memory_bytes > get_gpu("h100").memory_bytes
    assert get_gpu("h800").nvlink_bandwidth < get_gpu("h100").nvlink_bandwidth


def test_unknown_gpu_field_is_named_with_the_allowed_ones(tmp_path):
    with pytest.raises(GPUVariantError, match=r"unknown GPU field\(s\) \['memroy_GiB'\]; allowed: base"):
        variant_from_table({"base": "h100", "memroy_GiB": 96})
    with pytest.raises(GPUVariantError, match="`base`"):
        variant_from_table({"memory_GiB": 96})
    with pytest.raises(GPUVariantError, match="power_limit_w 900 is above h100's 700 W"):
        variant_from_table({"base": "h100", "power_limit_w": 900})
    f = tmp_path / "cluster.toml"
    f.write_text('[gpu]\nbase = "h100"\nhbm_bw = 3\n')
    with pytest.raises(ClusterFileError, match=r"\[gpu\]: unknown GPU field\(s\) \['hbm_bw'\]"):
        read_cluster_file(f)


def test_power_limit_slows_compute_and_more_nvlink_speeds_collectives(out8, tmp_path):
    stock = predict_from_trace(out8, gpu="h100", roofline_only=True)
    capped_file = tmp_path / "capped.toml"
    capped_file.write_text('[gpu]\nbase = "h100-96gb"\nname = "H100 SXM 96GB 500W"\npower_limit_w = 500\n')
    capped = predict_from_trace(out8, gpu_spec=capped_file, roofline_only=True)
    assert capped.gpu == "h100-sxm-96gb-500w" and capped.gpu_name == "H100 SXM 96GB 500W"
    assert capped.gpu_variant["base"] == "h100" and capped.gpu_variant["power_limit_w"] == 500
    assert capped.memory_capacity_bytes > stock.memory_capacity_bytes
    assert capped.breakdown_s["compute"] > stock.breakdown_s["compute"] * 1.02
    assert capped.estimator["adjusted_share"] > 0
    assert "power^(1/3)" in capped.estimator["conditions"]["variant"]["assumption"]
    h800 = predict_from_trace(out8, gpu="h800", roofline_only=True)
    assert h800.breakdown_s["communication"] > 1.5 * stock.breakdown_s["communication"]
    assert h800.breakdown_s["compute"] == pytest.approx(stock.breakdown_s["compute"], rel=1e-6)
    assert "H800" in h800.gpu_name and h800.estimator["conditions"]["variant"]["nvlink_bandwidth_GBps"] == 200


def test_a_variant_in_the_cluster_file_sets_price_and_memory(out8, tmp_path):
    f = tmp_path / "cluster.json"
    f.write_text(json.dumps({"gpu": {"base": "h100", "name": "H100 rented", "memory_GiB": 94,
                                     "price_per_gpu_hour": 1.5}}))
    pred = predict_from_trace(out8, cluster=f, roofline_only=True)
    assert pred.gpu == "h100-rented" and pred.price_per_gpu_hour == 1.5
    assert pred.memory_capacity_bytes == 94 * 2**30
    assert read_gpu_spec_file(f).key == "h100-rented"  # a cluster file's [gpu] table reads as a spec file too


def test_a_cluster_of_bridged_pairs_slows_an_eight_gpu_all_reduce(out8, tmp_path):
    """`nvlink_domain = 2` in the cluster file: GPUs bridged in pairs, so the 8-GPU data-parallel
    all-reduce of this job crosses PCIe; a value that is not a GPU count is refused before anything runs."""
    stock = predict_from_trace(out8, gpu="h100", roofline_only=True)
    f = tmp_path / "bridged.toml"
    f.write_text('gpu = "h100"\nnvlink_domain = 2\n')
    bridged = predict_from_trace(out8, cluster=f, roofline_only=True)
    assert bridged.cluster["nvlink_domain"] == 2 and stock.cluster["nvlink_domain"] is None
    assert bridged.breakdown_s["communication"] > 3 * stock.breakdown_s["communication"]
    f.write_text('gpu = "h100"\nnvlink_domain = "pairs"\n')
    with pytest.raises(ClusterFileError, match="nvlink_domain must be a whole number"):
        predict_from_trace(out8, cluster=f, roofline_only=True)


def test_the_readme_cluster_example_loads_and_sets_each_gpus_nic(tmp_path):
    """The README's cluster file is what users copy: every key must be known, and its network figure is a
    GPU's own NIC (the collective model multiplies it by the group's GPUs in a node)."""
    from pathlib import Path

    from emulator.simulate.cluster import build_cluster

    readme = (Path(__file__).resolve().parents[4] / "README.md").read_text()
    block = re.search(r"### The cluster file.*?```toml\n(.*?)```", readme, re.S).group(1)
    f = tmp_path / "cluster.toml"
    f.write_text(block)
    settings = read_cluster_file(f)
    cluster = build_cluster(settings["gpu"], settings["nnodes"], settings["gpus_per_node"], settings)
    assert cluster.spec.internode_bandwidth == settings["internode_bandwidth_GBps"] * 1e9
    assert 12.5 <= settings["internode_bandwidth_GBps"] <= 100  # one NIC of 100-800 Gb/s, not a node's sum


@pytest.mark.parametrize("line, says", [
    ('internode_bandwidth_GBps = "fast"', "internode_bandwidth_GBps must be a number > 0, got 'fast'"),
    ("nvlink_bandwidth_GBps = 0", "nvlink_bandwidth_GBps must be a number > 0, got 0"),
    ("nnodes = 0", "nnodes must be a whole number >= 1, got 0"),
    ("gpus_per_node = 2.5", "gpus_per_node must be a whole number >= 1, got 2.5"),
    ("price_per_gpu_hour = -1", "price_per_gpu_hour must be a number >= 0, got -1"),
    ("host_gap_scale = true", "host_gap_scale must be a number >= 0, got True"),
    ('internode_collectives = "fitted"', "internode_collectives must be one of"),
    ("gpu = 100", "gpu must be a part's name"),
])
def test_a_cluster_value_of_the_wrong_kind_is_named_before_anything_runs(out8, tmp_path, line, says):
    f = tmp_path / "cluster.toml"
    f.write_text(line + "\n")
    with pytest.raises(ClusterFileError, match=re.escape(says)):
        predict_from_trace(out8, cluster=f, roofline_only=True)
    assert not (out8 / "prediction.json").exists()
