"""Training, the MLflow registry, the champion gate and the emulator-facing predict contract.

Uses a temp warehouse and a temp SQLite MLflow store, and small slices of the committed reference.
"""

import json

import mlflow
import numpy as np
import pandas as pd
import pytest

from maya_models.reference import load_reference


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("maya")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAYA_WAREHOUSE", str(root / "warehouse"))
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        yield root


@pytest.fixture(scope="module")
def data():
    parts = []
    for g, n in (("h100", 800), ("a100-80gb", 400)):
        gemm = load_reference(["aiconfigurator_gemm"], gpu=g)
        parts.append(gemm[gemm["op"] == "aten::mm"].sample(n, random_state=0))
    attn = load_reference(["aiconfigurator_attention"], gpu="h100").sample(200, random_state=0)
    nccl = load_reference(["aiconfigurator_nccl"])
    nccl = nccl[nccl["gpu"].isin(["h100", "a100-80gb"])]
    return pd.concat(parts + [attn, nccl], ignore_index=True)


@pytest.fixture(scope="module")
def trained(store, data):
    from maya_models.train import publish, train_collective_predictor, train_kernel_predictor

    k = train_kernel_predictor("h100", data=data, num_rounds=20)
    kp = publish("h100", kind="kernels", data=data)
    c = train_collective_predictor("h100", data=data, return_predictor=True)
    cp = publish("h100", kind="collectives", data=data)
    return {"kernels": k, "kernels_publish": kp, "collectives": c, "collectives_publish": cp}


def _trace_rows():
    mm = {"kind": "kernel", "op": "aten::mm", "shapes": json.dumps([[4096, 4096], [4096, 14336]]),
          "dtypes": json.dumps(["bfloat16", "bfloat16"]), "strides": json.dumps([[4096, 1], [1, 4096]]),
          "args": "{}", "out_shapes": json.dumps([[4096, 14336]]), "out_dtypes": json.dumps(["bfloat16"]),
          "flops": 2.0 * 4096 * 4096 * 14336, "bytes": 1.5e8, "rank": 0, "seq": 5}
    adam = {**mm, "op": "aten::_fused_adamw_", "shapes": json.dumps([[1024], [1024], [1024], [1024]]),
            "dtypes": json.dumps(["float32"] * 4), "strides": "[]", "out_shapes": "[]", "out_dtypes": "[]",
            "flops": None, "bytes": None}
    custom = {**mm, "op": "mylib::fused_thing", "shapes": "[]", "dtypes": "[]", "strides": "[]",
              "out_shapes": "[]", "out_dtypes": "[]", "flops": 0.0, "bytes": 4096.0}
    ar = {**mm, "kind": "collective", "op": "c10d::allreduce_", "shapes": json.dumps([[2**20]]),
          "dtypes": json.dumps(["bfloat16"]), "collective": "all_reduce", "coll_bytes": 2**21, "group_size": 8,
          "nnodes": 1, "gpus_per_node": 8}
    return pd.DataFrame([mm, adam, custom, ar])


def test_training_reports_held_out_metrics_and_registers(trained):
    k = trained["kernels"]
    assert k["mode"] == "own" and k["version"] == "1"
    assert set(k["metrics"]) == {"gemm", "attention_fwd"}
    g = k["metrics"]["gemm"]
    assert g["n"] > 0 and g["median_ape"] < g["roofline_median_ape"]  # learned beats the datasheet roofline
    assert trained["kernels_publish"]["promoted"] and trained["collectives_publish"]["promoted"]
    run = mlflow.get_run(k["run_id"])
    assert "gemm.median_ape" in run.data.metrics and run.data.params["gpu"] == "h100"
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(k["run_id"])}
    assert {"data_snapshot.json", "plots", "feature_importance.json"} <= arts


def test_champion_predict_contract(trained):
    model = mlflow.pyfunc.load_model("models:/maya-kernels-h100@champion")
    out = model.predict(_trace_rows())
    assert list(out.columns) == ["duration_s", "source", "adjustment_s"] and len(out) == 4
    assert np.isfinite(out["duration_s"]).all() and (out["duration_s"] > 0).all()
    assert out["source"].tolist() == ["learned", "fallback", "fallback", "fallback"]
    assert 1e-4 < out["duration_s"].iloc[0] < 5e-3  # a 4096x4096x14336 bf16 GEMM on H100 is ~0.7 ms
    coll = mlflow.pyfunc.load_model("models:/maya-collectives-h100@champion").predict(_trace_rows())
    assert coll["source"].tolist() == ["fallback", "fallback", "fallback", "learned"]
    assert np.isfinite(coll["duration_s"]).all() and (coll["duration_s"] > 0).all()


def test_collectives_extrapolate_with_the_prior(trained):
    p = trained["collectives"]["predictor"]
    rows = pd.DataFrame([{"kind": "collective", "op": "c10d::allreduce_", "coll_bytes": 2**28, "group_size": g,
                          "nnodes": n, "gpus_per_node": 8} for g, n in ((8, 1), (64, 8), (512, 64))])
    t = p.predict(rows)["duration_s"].to_numpy()
    assert np.all(np.isfinite(t)) and t[0] < t[1] < t[2]  # the NIC is slower than NVLink; more steps cost more
    assert t[0] > 2**28 * 2 * 7 / 8 / 450e9  # never faster than NVLink's wire time


def test_worse_challenger_is_not_promoted_and_rollback_works(trained, data, capsys):
    from maya_models.registry import champion_version, rollback, set_champion
    from maya_models.train import publish, train_kernel_predictor

    worse = train_kernel_predictor("h100", data=data, num_rounds=1, params={"eta": 0.01})
    assert worse["version"] == "2"
    r = publish("h100", kind="kernels", data=data)
    assert not r["promoted"] and r["challenger_score"] > r["champion_score"]
    assert champion_version("kernels", "h100") == "1"
    from maya_models.registry import main

    assert main(["list", "--gpu", "h100"]) == 0
    assert main(["rollback", "--gpu", "h100", "--kind", "collectives"]) == 1  # nothing earlier: says so, fails
    out = capsys.readouterr().out
    assert "maya-kernels-h100" in out and "champion" in out and "nothing earlier to roll back to" in out
    # forcing a version that was never registered names the ones that were, and moves nothing
    assert main(["promote", "--gpu", "h100", "--kind", "kernels", "--version", "99"]) == 1
    assert "maya-kernels-h100 has no version 99; registered: 1, 2" in capsys.readouterr().out
    assert champion_version("kernels", "h100") == "1"
    set_champion("kernels", "h100", "2")  # an operator forces it ...
    assert champion_version("kernels", "h100") == "2"
    assert rollback("kernels", "h100") == {"model": "maya-kernels-h100", "from": "2", "to": "1"}
    assert champion_version("kernels", "h100") == "1"
    # the alias moved outside maya (not in the history): rollback refuses instead of trusting the tag
    from maya_models.registry import RegistryError, client

    client().set_registered_model_alias("maya-kernels-h100", "champion", "2")
    client().set_registered_model_tag("maya-kernels-h100", "maya.champion_history", '["1"]')
    with pytest.raises(RegistryError, match="does not hold"):
        rollback("kernels", "h100")
    # the gate's evidence is on the challenger's run
    run = client().get_run(client().get_model_version("maya-kernels-h100", "2").run_id)
    assert run.data.metrics["gate.challenger_score"] == r["challenger_score"]
    assert run.data.tags["gate.promoted"] == "False" and "champion" in run.data.tags["gate.threshold"]


def test_tiny_partition_refused_and_unseen_gpu_goes_cross_gpu(store, data):
    from maya_models.train import InsufficientDataError, train_kernel_predictor

    tiny = data[data["gpu"] == "a100-80gb"].head(0)
    tiny = pd.concat([tiny, data[(data["gpu"] == "l40s")]])  # nothing
    few = data[(data["gpu"] == "h100") & (data["family"] == "gemm")].head(5).assign(gpu="l40s")
    with pytest.raises(InsufficientDataError, match="only 5 usable kernel measurements"):
        train_kernel_predictor("l40s", data=pd.concat([data, few]), register=False, num_rounds=5)
    meta = train_kernel_predictor("h200", data=data, register=False, num_rounds=5)
    assert meta["mode"] == "cross-gpu" and "no kernel measurements for h200" in meta["why"]
    assert meta["metrics"]["gemm"]["trained_on"] == "cross-gpu: a100-80gb, h100"


def test_a_cross_gpu_model_never_learns_a_gpu_from_cpu_timings(data):
    """A family measured only on the CPU (the local sweep's foreach optimizer ops) gets no cross-GPU
    model for an unmeasured GPU: the labelled roofline fallback times it, as it does on the H100."""
    from maya_models.train import train_kernel_predictor

    cpu_only = data[(data["gpu"] == "h100") & (data["family"] == "gemm")].head(60).assign(gpu="cpu")
    cpu_only = cpu_only.assign(family="optimizer", op="aten::_foreach_add_")
    meta = train_kernel_predictor("h200", data=pd.concat([data, cpu_only]), register=False, num_rounds=5)
    assert "optimizer" not in meta["metrics"]
    assert "cpu" not in meta["metrics"]["gemm"]["trained_on"]


def test_cpu_rows_measured_on_other_thread_counts_are_not_trained_on():
    from maya_models.train import training_rows

    rows = pd.DataFrame({"gpu": ["cpu", "cpu", "h100"], "signature": ["a", "b", "c"], "status": "ok",
                         "duration_s": [1e-3, 2e-3, 3e-4], "threads": [1, 2, None]})
    kept = training_rows(data=rows)
    # a 2-thread CPU timing would teach the model kernels twice as fast as a rank (one thread) runs them
    assert sorted(kept.signature) == ["a", "c"]


def test_a_cross_gpu_collective_model_tells_an_nvswitch_node_from_bridged_pcie_cards():
    """The committed network rows hold A100 SXM nodes (NVSwitch: four GPUs all-reduce at ~210 GB/s of
    bus bandwidth) and A100 PCIe cards bridged in pairs (four GPUs cross PCIe: ~24 GB/s), with the same
    chip. A part measured by neither (A100-SXM4-40GB) must be timed as the SXM node, and the bridged
    part's own model must keep its four-GPU groups on PCIe."""
    from maya_models.features import ring_factor
    from maya_models.train import train_collective_predictor

    rows = load_reference(["aiconfigurator_nccl", "vidur_network", "vtrain_allreduce"])
    size = 256e6
    ar = pd.DataFrame([{"kind": "collective", "op": "c10d::allreduce_", "collective": "all_reduce",
                        "coll_bytes": size, "group_size": 4, "nnodes": 1, "gpus_per_node": 4}])

    def busbw(gpu):
        p = train_collective_predictor(gpu, data=rows, register=False, return_predictor=True)["predictor"]
        return ring_factor("all_reduce", 4) * size / p.predict(ar)["duration_s"].iloc[0] / 1e9

    assert busbw("a100-40gb") > 150  # GB/s: an SXM node's NVLink
    assert busbw("a100-80gb-pcie") < 40  # PCIe between the bridged pairs


def test_past_a_groups_largest_measured_size_the_residual_is_the_edges():
    """Trees do not extrapolate: a size between a group's largest measured one and twice it keeps the
    residual learned at that edge, so the time grows as the alpha-beta prior does, whatever other
    collectives' larger sizes taught the shared booster."""
    from emulator.core.hardware import get_gpu
    from maya_models.collectives import _design
    from maya_models.features import collective_columns
    from maya_models.train import train_collective_predictor

    rows = load_reference(["vidur_network"])
    p = train_collective_predictor("h100-nvl", data=rows, register=False, return_predictor=True)["predictor"]
    hi = p.envelope["all_reduce|intra"]["bytes_by_group"]["4"][1]
    ar = pd.DataFrame([{"kind": "collective", "op": "c10d::allreduce_", "collective": "all_reduce",
                        "coll_bytes": b, "group_size": 4, "nnodes": 1, "gpus_per_node": 4}
                       for b in (hi, 1.3 * hi, 1.9 * hi)])
    prior = _design(collective_columns(ar), get_gpu("h100-nvl")) @ np.array(p.priors["all_reduce|intra"])
    ratio = p.predict(ar)["duration_s"].to_numpy() / prior
    assert ratio[1] == pytest.approx(ratio[0], rel=1e-6) and ratio[2] == pytest.approx(ratio[0], rel=1e-6)
