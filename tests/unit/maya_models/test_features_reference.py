"""The committed reference data and the one feature function shared by traces and measurements."""

import json

import numpy as np
import pandas as pd
import pytest

from emulator.core.hardware import get_gpu
from emulator.trace.schema import TRACE_SCHEMA
from maya_models.features import collective_features, featurize
from maya_models.reference import load_reference, reference_datasets, reference_dir
from maya_models.schema import MEASUREMENT_COLUMNS


def test_committed_reference_is_complete_and_compact():
    names = reference_datasets()
    assert {"aiconfigurator_gemm", "aiconfigurator_attention", "aiconfigurator_nccl", "vidur_compute",
            "vidur_network", "neusight_kernels", "vtrain_allreduce", "flashattention_bench", "mamf",
            "kineto_in_situ"} <= set(names)
    assert sum(p.stat().st_size for p in reference_dir().glob("*.parquet")) <= 15 * 2**20
    assert (reference_dir() / "PROVENANCE.md").exists()
    df = load_reference(["aiconfigurator_nccl", "vtrain_allreduce"])
    assert list(df.columns) == MEASUREMENT_COLUMNS
    assert (df["duration_s"] > 0).all() and (df["status"] == "ok").all()
    assert "h200" not in set(load_reference(["aiconfigurator_gemm"])["gpu"])  # the holdout part stays out


def test_reference_uses_the_emulator_op_signature():
    gemm = load_reference(["aiconfigurator_gemm"], gpu="h100")
    r = gemm[(gemm["op"] == "aten::mm")].iloc[0]
    (m, k), (k2, n) = r["shapes"]
    assert k == k2 and [list(s) for s in r["strides"]] == [[k, 1], [1, k]]  # Linear: W^T visible in strides
    nccl = load_reference(["aiconfigurator_nccl"], gpu="h100")
    ar = nccl[nccl["op"] == "c10d::allreduce_"].iloc[0]
    assert ar["coll_bytes"] == 2 * ar["shapes"][0][0]  # half elements -> bytes, nccl-tests convention
    ag = nccl[nccl["op"] == "c10d::_allgather_base_"].iloc[0]
    assert ag["coll_bytes"] == 2 * ag["shapes"][0][0] and ag["shapes"][1][0] * ag["group_size"] == ag["shapes"][0][0]
    neu = load_reference(["neusight_kernels"], gpu="t4")
    bmm = neu[neu["op"] == "aten::bmm"].iloc[0]
    assert bmm["shapes"][0][2] == bmm["shapes"][1][1]  # N is the reduction dim in NeuSight's bmm


def test_vidur_adds_are_one_add_kernel_each():
    # phi-2's "add" timer covers attention + MLP + residual (two kernels): it is not an aten::add row
    vidur = load_reference(["vidur_compute"], gpu="a100-80gb")
    adds = vidur[vidur["op"] == "aten::add"]
    assert len(adds) and not adds["provenance"].str.contains("phi-2").any()
    assert vidur["provenance"].str.contains("phi-2").any()  # its other ops stay
    numel = adds["shapes"].map(lambda s: int(s[0][0]) * int(s[0][1]))
    big = adds[numel > 2**23]
    bw = 3 * 2 * numel[big.index] / big["duration_s"]  # two fp16 reads and one write
    assert bw.min() > 1.0e12  # an A100-80GB add moves more than 1 TB/s on tensors past its L2


def _trace_row(meas: pd.Series) -> dict:
    """The same signature as the emulator writes it: list columns as JSON, plus trace-only columns."""
    row = {c: None for c in TRACE_SCHEMA.names}
    row.update(rank=3, seq=17, iteration=1, kind="kernel", op=meas["op"], stream=0, module="layers.0.mlp",
               phase="backward", flops=123.0, bytes=456.0)  # flops/bytes as recorded are not trusted features
    for c in ("shapes", "strides", "out_shapes"):
        row[c] = json.dumps([[int(x) for x in s] for s in meas[c]])
    for c in ("dtypes", "out_dtypes"):
        row[c] = json.dumps(list(meas[c]))
    row["args"] = meas["args"]
    return row


def test_trace_row_and_measurement_row_get_identical_features():
    meas = pd.concat([load_reference(["aiconfigurator_gemm"], gpu="h100").head(3),
                      load_reference(["aiconfigurator_attention"], gpu="h100").head(2),
                      load_reference(["neusight_kernels"], gpu="l4").head(3)], ignore_index=True)
    trace = pd.DataFrame([_trace_row(r) for _, r in meas.iterrows()])
    spec = get_gpu("h100")
    a, b = featurize(meas, spec), featurize(trace, spec)
    conditions = ["in_situ", "impl_code"]  # how a measurement was timed: a trace row is a training step's op
    pd.testing.assert_frame_equal(a.drop(columns=conditions), b.drop(columns=conditions))
    assert (b["in_situ"] == 1.0).all() and (b["impl_code"] == 0.0).all()
    assert (a["in_situ"] == 0.0).all()  # aiconfigurator and NeuSight time ops in isolation
    assert np.isfinite(a.values).all()


def test_features_see_transposes_and_hardware():
    x = pd.DataFrame([{"op": "aten::mm", "shapes": [[4096, 1024], [1024, 512]], "dtypes": ["bfloat16"] * 2,
                       "strides": [[1024, 1], [1, 1024]], "args": "{}", "out_shapes": [[4096, 512]],
                       "out_dtypes": ["bfloat16"]},
                      {"op": "aten::mm", "shapes": [[4096, 1024], [1024, 512]], "dtypes": ["bfloat16"] * 2,
                       "strides": [[1, 4096], [512, 1]], "args": "{}", "out_shapes": [[4096, 512]],
                       "out_dtypes": ["bfloat16"]}])
    h100, h200 = featurize(x, get_gpu("h100")), featurize(x, get_gpu("h200"))
    assert h100["b_transposed"].tolist() == [1.0, 0.0] and h100["a_transposed"].tolist() == [0.0, 1.0]
    assert h100["flops"].iloc[0] == 2 * 4096 * 1024 * 512
    assert h200["hw_hbm_bw"].iloc[0] > h100["hw_hbm_bw"].iloc[0]  # an unseen part differs only in its specs
    assert (h100["m"] == 4096).all() and (h100["tiles"] == 32 * 4).all()


def test_collective_features_know_topology():
    df = pd.DataFrame([{"kind": "collective", "op": "c10d::allreduce_", "coll_bytes": 2**20, "group_size": 8,
                        "nnodes": 1, "gpus_per_node": 8},
                       {"kind": "collective", "op": "c10d::allreduce_", "coll_bytes": 2**20, "group_size": 16,
                        "nnodes": 2, "gpus_per_node": 8}])
    f = collective_features(df, get_gpu("h100"))
    assert f["hw_link_bw"].iloc[0] > f["hw_link_bw"].iloc[1]  # NVLink inside, NIC between nodes
    assert f["steps"].tolist() == [14.0, 30.0]


def test_h200_evaluation_is_skipped_without_the_holdout(tmp_path, capsys):
    from maya_models.evaluate import evaluate_h200

    assert evaluate_h200(pd.DataFrame({"gpu": []}), tmp_path / "no-holdout") == []
    assert "h200: skipped" in capsys.readouterr().out


def test_flashattention_rows_are_pytorchs_kernel_and_backward_is_the_slower_half():
    fa = load_reference(["flashattention_bench"])
    assert set(fa["implementation"]) == {"fa2"} and set(fa["timing"]) == {"isolated_events"}
    fwd = fa[~fa["op"].str.endswith("_backward")]
    bwd = fa[fa["op"].str.endswith("_backward")]
    assert {"h100", "a100-80gb"} <= set(bwd["gpu"])

    def key(r):
        q = [int(x) for x in (r["shapes"][1] if r["op"].endswith("_backward") else r["shapes"][0])]
        return r["gpu"], tuple(q), "true" in r["args"]

    fwd_s = {key(r): r["duration_s"] for _, r in fwd.iterrows()}
    pairs = [(r["duration_s"], fwd_s[key(r)]) for _, r in bwd.iterrows() if key(r) in fwd_s]
    assert pairs and all(b > f for b, f in pairs)  # backward does 2.5x the forward's FLOPs


def test_sustained_rows_are_labelled_and_evaluation_rows_stay_apart():
    mamf = load_reference(["mamf"])
    assert set(mamf["timing"]) == {"sustained"} and {"h100", "a100-80gb"} <= set(mamf["gpu"])
    assert "kineto_in_training" not in reference_datasets()  # evaluation-only rows are not imported
    assert (reference_dir() / "evaluation" / "kineto_in_training.parquet").exists()



def test_h200_holdout_loads_into_the_measurement_schema(tmp_path):
    """`make evaluate`'s unseen-GPU check reads aiconfigurator's H200 tables; their rows carry the timing
    condition every measurement needs (the reference rows' own: CUDA-graph replay, nccl-tests)."""
    from maya_models.evaluate import H200_DIR, load_h200_holdout
    from maya_models.schema import TIMINGS

    base = tmp_path / H200_DIR
    meta = {"framework": "TRTLLM", "version": "1", "device": "NVIDIA H200", "kernel_source": "torch_flow"}
    tables = {
        "gemm/trtllm/1.3.0rc20/gemm_perf.parquet": [{**meta, "op_name": "gemm", "gemm_dtype": "bfloat16",
                                                    "m": 64, "n": 128, "k": 256, "latency": 0.01}],
        "gemm/vllm/0.24.0/gemm_perf.parquet": [{**meta, "op_name": "gemm", "gemm_dtype": "bfloat16",
                                               "m": 64, "n": 128, "k": 256, "latency": 0.011}],
        "attention/trtllm/1.3.0rc20/context_attention_perf.parquet": [
            {**meta, "op_name": "context_attention", "batch_size": 2, "isl": 128, "num_heads": 8,
             "num_key_value_heads": 8, "head_dim": 64, "window_size": 0, "beam_width": 1, "attn_dtype": "bfloat16",
             "kv_cache_dtype": "bfloat16", "step": 0, "latency": 0.02}],
        "comm/nccl/2.29.2/nccl_perf.parquet": [{**meta, "op_name": "all_reduce", "kernel_source": "NCCL",
                                                "nccl_dtype": "half", "num_gpus": 4, "message_size": 1 << 20,
                                                "latency": 0.05}],
    }
    for path, rows in tables.items():
        (base / path).parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(base / path)
    ho = load_h200_holdout(tmp_path)
    assert len(ho) == 4 and set(ho["gpu"]) == {"h200"}
    assert set(ho["timing"]) <= set(TIMINGS) and ho["timing"].notna().all()
    coll = ho[ho["kind"] == "collective"].iloc[0]
    assert coll["group_size"] == 4 and coll["duration_s"] == pytest.approx(5e-5)
