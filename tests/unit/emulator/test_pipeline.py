"""`maya simulate OUT`: re-targeting a saved trace, cluster files, and the errors a user can act on."""

import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from emulator.bench.synthetic import TraceBuilder, ddp_rank, host_bound_tables, write_job
from emulator.cli import app, simulate_command
from emulator.pipeline import predict_from_trace
from emulator.report.table import print_prediction


@pytest.fixture
def out16(tmp_path):
    return write_job(tmp_path / "out", {r: ddp_rank(r, 16, async_op=False).table() for r in range(16)},
                     nnodes=2, nproc_per_node=8)


def test_resimulating_on_another_gpu_changes_the_time(out16):
    h100 = predict_from_trace(out16, roofline_only=True)
    a100 = predict_from_trace(out16, gpu="a100-80gb", roofline_only=True)
    assert h100.gpu == "h100" and a100.gpu == "a100-80gb"
    assert a100.iteration_time_s > 2 * h100.iteration_time_s
    assert a100.cost_per_iteration_usd != h100.cost_per_iteration_usd


def test_cluster_file_changes_internode_collective_time(out16, tmp_path):
    slow = tmp_path / "slow.toml"
    slow.write_text("internode_bandwidth_GBps = 5\n")
    base = predict_from_trace(out16, roofline_only=True)
    slow_net = predict_from_trace(out16, cluster=slow, roofline_only=True)
    assert slow_net.cluster["internode_bandwidth_GBps"] == 5
    assert slow_net.breakdown_s["communication"] > 5 * base.breakdown_s["communication"]
    assert slow_net.breakdown_s["compute"] == pytest.approx(base.breakdown_s["compute"])
    # the same 16 ranks on one 16-GPU node never touch the network
    one_node = tmp_path / "one.json"
    one_node.write_text(json.dumps({"nnodes": 1, "gpus_per_node": 16, "internode_bandwidth_GBps": 5}))
    inside = predict_from_trace(out16, cluster=one_node, roofline_only=True)
    assert inside.breakdown_s["communication"] < base.breakdown_s["communication"]


def test_bad_cluster_file_and_layout_are_clear_errors(out16, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"internode_bandwith_GBps": 5}))
    c = Console(record=True, width=200)
    assert simulate_command(out16, cluster=bad, roofline_only=True, console=c) is None
    assert "unknown keys ['internode_bandwith_GBps']" in c.export_text()
    assert simulate_command(out16, nnodes=3, roofline_only=True, console=c) is None
    assert "16 ranks but --nnodes 3" in c.export_text()
    bad.write_text(json.dumps({"internode_collectives": "fast"}))
    assert simulate_command(out16, cluster=bad, roofline_only=True, console=c) is None
    assert "internode_collectives must be one of ['model', 'learned']" in c.export_text()
    bad.write_text(json.dumps({"internode_collectives": "learned"}))
    assert simulate_command(out16, cluster=bad, roofline_only=True, console=c).cluster["internode_collectives"] \
        == "learned"


def test_no_predictors_tells_how_to_get_them(out16, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("MAYA_MODEL_CACHE", str(tmp_path / "empty-cache"))
    c = Console(record=True, width=200)
    r = simulate_command(out16, console=c)
    text = c.export_text()
    assert r is None
    assert "no predictors registered for GPU 'h100'" in text and "make calibrate GPU=h100" in text
    assert not (out16 / "prediction.json").exists()


def test_cli_simulate_and_hang_exit_codes(tmp_path):
    runner = CliRunner()
    good = write_job(tmp_path / "good", {r: ddp_rank(r, 2).table() for r in range(2)})
    res = runner.invoke(app, ["simulate", str(good), "--roofline-only", "--gpu", "a100", "--no-timeline"])
    assert res.exit_code == 0, res.output
    assert "iteration time" in res.output and not (good / "timeline.json").exists()
    assert json.loads((good / "prediction.json").read_text())["gpu"] == "a100-80gb"
    tables = {}
    for r in range(2):
        b = TraceBuilder(r)
        for _ in range(2 - r):
            b.collective("c10d::allreduce_", "0", [0, 1], 1024)
        tables[r] = b.table()
    hung = write_job(tmp_path / "hung", tables)
    res = runner.invoke(app, ["simulate", str(hung), "--roofline-only"])
    assert res.exit_code == 4  # Exit.HANG
    assert "would hang" in res.output and "never by ranks [1]" in res.output
    pred = json.loads((hung / "prediction.json").read_text())
    assert pred["iteration_time_s"] is None and pred["hang"]["issues"][0]["missing"] == [1]


def test_host_gap_scale_models_a_faster_host(tmp_path):
    out = write_job(tmp_path / "out", host_bound_tables([1e-3, 1e-3]))
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps({"host_gap_scale": 0.1}))
    base = predict_from_trace(out, roofline_only=True)
    quick = predict_from_trace(out, cluster=fast, roofline_only=True)
    assert base.iteration_time_s == pytest.approx(11e-3, rel=0.05)  # 11 host gaps of 1 ms
    assert quick.iteration_time_s == pytest.approx(base.iteration_time_s / 10, rel=0.2)
    assert quick.breakdown_s["host"] < base.breakdown_s["host"] / 5


def test_host_gaps_scale_by_the_measured_host_speed_of_the_target_nodes(tmp_path, monkeypatch):
    """The same host-speed workload measured here (emulation) and on the GPU nodes (hardware inventory
    of a calibration run): host gaps scale by the ratio, and the prediction says where it came from."""
    from emulator.core.hostspeed import WORKLOAD

    monkeypatch.setenv("MAYA_WAREHOUSE", str(tmp_path / "wh"))
    monkeypatch.setenv("MAYA_REFERENCE", str(tmp_path / "no-reference"))
    here = {"workload": WORKLOAD, "s_per_op": 20e-6}
    out = write_job(tmp_path / "out", host_bound_tables([1e-3, 1e-3]), host_speed=here)
    unmeasured = predict_from_trace(out, roofline_only=True)
    assert unmeasured.host_speed["scale"] == 1.0 and "no host-speed measurement of any GPU node" in \
        unmeasured.host_speed["source"]
    inventory = tmp_path / "wh" / "hardware" / "gpu=h100" / "run1.json"
    inventory.parent.mkdir(parents=True)
    inventory.write_text(json.dumps({"gpu": "h100", "cpu": {"model": "Xeon", "host_speed": {
        "workload": WORKLOAD, "s_per_op": 5e-6}}}))
    measured = predict_from_trace(out, roofline_only=True)
    assert measured.host_speed["scale"] == pytest.approx(0.25)
    assert measured.host_speed["source"].startswith("measured: Xeon of the h100 node")
    assert measured.breakdown_s["host"] == pytest.approx(unmeasured.breakdown_s["host"] / 4, rel=0.05)
    # a cluster file's explicit scale still wins; another workload version is not compared
    explicit = tmp_path / "c.json"
    explicit.write_text(json.dumps({"host_gap_scale": 0.5}))
    assert predict_from_trace(out, cluster=explicit, roofline_only=True).host_speed["scale"] == 0.5
    inventory.write_text(json.dumps({"gpu": "h100", "cpu": {"host_speed": {"workload": "old", "s_per_op": 5e-6}}}))
    assert predict_from_trace(out, roofline_only=True).host_speed["scale"] == 1.0


def test_host_speed_workload_measures_this_cpu():
    from emulator.core import hostspeed

    m = hostspeed.measure(repeats=2, steps=3)
    assert m["workload"] == hostspeed.WORKLOAD and m["ops_per_step"] > 50
    assert 0 < m["s_per_op"] < 1e-2 and m["s_per_step"] == pytest.approx(m["s_per_op"] * m["ops_per_step"])


def test_committed_inventory_of_a_gpu_node_gives_its_host_speed(tmp_path, monkeypatch):
    """A fresh clone scales host gaps for h200 by the node inventory committed under warehouse/reference."""
    from emulator.core.hostspeed import WORKLOAD
    from emulator.hosttime import host_gap_scale

    monkeypatch.setenv("MAYA_WAREHOUSE", str(tmp_path / "empty"))
    got = host_gap_scale({"workload": WORKLOAD, "s_per_op": 2 * 12.9e-6}, "h200")
    assert got["scale"] == pytest.approx(0.5, rel=0.01)
    assert "node-check-h200-20261129" in got["source"]


def test_a_target_whose_nodes_were_never_measured_takes_another_gpu_nodes_host_as_a_labelled_proxy(
        tmp_path, monkeypatch):
    """No a100 node was measured: the newest measured GPU node (the committed h200 one, unless the
    warehouse has its own) stands in, and prediction.json says it is a proxy and for what."""
    from emulator.core.hostspeed import WORKLOAD
    from emulator.hosttime import host_gap_scale

    monkeypatch.setenv("MAYA_WAREHOUSE", str(tmp_path / "wh"))
    here = {"workload": WORKLOAD, "s_per_op": 2 * 12.9e-6}
    got = host_gap_scale(here, "a100-80gb")
    assert got["scale"] == pytest.approx(0.5, rel=0.01)
    assert got["source"].startswith("proxy (no host-speed measurement of a100-80gb nodes")
    assert "of the h200 node (inventory node-check-h200-20261129)" in got["source"]
    own = tmp_path / "wh" / "hardware" / "gpu=l40s" / "run1.json"
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps({"cpu": {"model": "EPYC", "host_speed": {"workload": WORKLOAD, "s_per_op": 6.45e-6}}}))
    got = host_gap_scale(here, "a100-80gb")
    assert got["scale"] == pytest.approx(0.25, rel=0.01) and "EPYC of the l40s node" in got["source"]
    assert host_gap_scale(here, "cpu")["scale"] == 1.0  # the cpu target is this machine: never a proxy


def test_repeated_iterations_take_the_median_gap_of_each_position():
    from emulator.hosttime import same_position_medians

    ops = ["aten::mm", "aten::add"] * 4
    iters = [0, 0, 1, 1, 2, 2, 3, 3]
    gaps = [1.0, 2.0, 1.2, 2.4, 9.0, 2.2, 1.1, 2.1]  # a slow moment at iteration 2's first gap
    out = same_position_medians(iters, ops, gaps)
    assert out[0::2] == pytest.approx([1.15] * 4) and out[1::2] == pytest.approx([2.15] * 4)
    assert same_position_medians([0, 1], ["a", "b"], [1.0, 5.0]) == [1.0, 5.0]  # no repeated sequence


def test_each_rank_reads_its_gaps_against_the_median_of_its_probes():
    from emulator.hosttime import rank_scale

    host = {"scale": 0.5, "target_s_per_op": 10e-6}
    assert rank_scale(host, [20e-6, 40e-6, 18e-6]) == pytest.approx(0.5)  # median 20 us; the slow probe ignored
    assert rank_scale(host, []) == 0.5 and rank_scale({"scale": 0.3}, [20e-6]) == 0.3


def test_a_rank_whose_probes_moved_brackets_its_scale_by_the_slowest_and_fastest_probe():
    from emulator.hosttime import probe_band

    low, high = probe_band([20e-6, 40e-6, 16e-6])  # median 20 us
    assert low == pytest.approx(0.5) and high == pytest.approx(1.25)
    assert probe_band([20e-6]) == (1.0, 1.0) and probe_band([]) == (1.0, 1.0)  # no evidence of a spread


def test_a_host_bound_prediction_carries_the_range_its_host_speed_probes_allow(tmp_path):
    """Host gaps recorded while this machine's probes read 16-40 us an op (median 20): the host-bound step is
    read at the median, and its range at the slowest and fastest probe: half and 1.25x the host time.
    A step the device sets carries no range; the printed answer says where the range comes from."""
    from emulator.core.hostspeed import WORKLOAD

    here = {"workload": WORKLOAD, "s_per_op": 20e-6}
    out = write_job(tmp_path / "out", host_bound_tables([1e-3]), nproc_per_node=1, host_speed=here,
                    host_speed_by_rank={"0": [20e-6, 40e-6, 16e-6]})
    pred = predict_from_trace(out, roofline_only=True)
    assert pred.bound_by == "host"
    low, high = pred.iteration_time_band_s
    assert low == pytest.approx(pred.iteration_time_s * 0.5, rel=0.1)
    assert high == pytest.approx(pred.iteration_time_s * 1.25, rel=0.1)
    assert json.loads((out / "prediction.json").read_text())["iteration_time_band_s"] == [low, high]
    assert predict_from_trace(out, roofline_only=True).iteration_time_s == pred.iteration_time_s  # gaps restored
    console = Console(record=True, width=240)
    print_prediction(pred, console)
    assert "range from this machine's speed" in console.export_text()
    device = predict_from_trace(write_job(tmp_path / "dev", {0: ddp_rank(0, 1).table()}, host_speed=here,
                                          host_speed_by_rank={"0": [20e-6, 40e-6]}), roofline_only=True)
    assert device.bound_by != "host" and device.iteration_time_band_s is None
    unprobed = write_job(tmp_path / "old", host_bound_tables([1e-3]), nproc_per_node=1, host_speed=here)
    assert predict_from_trace(unprobed, roofline_only=True).iteration_time_band_s is None  # no probes, no range
