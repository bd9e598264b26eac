"""NeuSight's per-op labels become measured times per op family (evaluation data for the error budget)."""

from __future__ import annotations

import pandas as pd
import pytest

from maya_models.reference import reference_datasets
from pipelines.validation import label_ops

_COLUMNS = "op,target,meta,input_shapes,fw_latency,bw_latency,acc_latency,Name\n"
_BLOCK = ("{'nn_module_stack': OrderedDict([('transformer', <class 'x.GPT2Model'>), "
          "('transformer.h.0', <class 'x.GPT2Block'>)])}")
_LN = ("{'nn_module_stack': OrderedDict([('transformer.h.0', <class 'x.GPT2Block'>), "
       "('transformer.h.0.ln_1', <class 'torch.nn.modules.normalization.LayerNorm'>)])}")
_HEAD = "{'nn_module_stack': OrderedDict([('lm_head', <class 'torch.nn.modules.linear.Linear'>)])}"


def _clone(tmp_path, layers=36):
    folder = tmp_path / label_ops.LABELS / "NVIDIA_H100_80GB_HBM3"
    folder.mkdir(parents=True)
    rows = [
        ("call_module", "transformer.h.0.ln_1", _LN, "[[1, 8, 16]]", 0.02, 0.03, 0.01, "transformer_h_0_ln_1"),
        ("call_function", "<built-in method addmm of type object at 0x1>", _BLOCK, "[[48], [8, 16], [16, 48]]",
         0.2, 0.5, 0.0, "addmm"),
        ("call_method", "view", _BLOCK, "[[8, 48], [1]]", 0.008, 0.0, 0.0, "view_2"),  # no kernel
        ("call_function", "<built-in function add>", _BLOCK, "[[1], [1]]", 0.007, 0.0, 0.0, "add_4"),  # Python ints
        ("call_module", "lm_head", _HEAD, "[[1, 8, 16]]", 1.0, 2.0, 0.1, "lm_head"),
    ]
    text = _COLUMNS + "".join(",".join(f'"{v}"' if isinstance(v, str) else str(v) for v in r) + "\n" for r in rows)
    (folder / "gpt2_large-train-1024-1.csv").write_text(text)
    (folder / "gpt2_large-train-1024-1.json").write_text(f'{{"num_layer": {layers}, "e2e_latency": 1.0}}')
    (folder / "gpt2_large-train-1024-4-dp4.json").write_text('{"e2e_latency": 1.0}')  # 4 GPUs: no per-op label
    return tmp_path


def test_block_nodes_count_once_per_layer_and_kernelless_nodes_are_left_out(tmp_path):
    out = tmp_path / "ops.parquet"
    df = label_ops.curate(_clone(tmp_path / "clone"), out)
    assert sorted(df["node"]) == ["addmm", "lm_head", "transformer_h_0_ln_1"]
    assert set(df["evaluation_only"]) == {True} and df["provenance"].str.contains(label_ops.NEUSIGHT).all()
    by_case = label_ops.families_by_case(out)
    fams = by_case["neusight-h100-gpt2_large-train-1024-1"]
    assert fams["gemm"] == pytest.approx((0.2 + 0.5) * 36e-3 + (1.0 + 2.0) * 1e-3)
    assert fams["norm"] == pytest.approx((0.02 + 0.03) * 36e-3)
    # the parameters' gradient accumulation is an elementwise add, per layer for the block's parameters
    assert fams["elementwise"] == pytest.approx(0.01 * 36e-3 + 0.1e-3)
    assert by_case.get("neusight-h100-gpt2_large-train-1024-4-dp4", {}) == {}


def test_the_committed_labels_cover_neusights_single_gpu_runs_and_stay_out_of_training():
    df = pd.read_parquet(label_ops.label_ops_path())
    assert sorted(set(df["case"])) == [
        "neusight-a100-80gb-pcie-gpt2_large-train-1024-1", "neusight-a100-80gb-pcie-gpt2_large-train-1024-4",
        "neusight-h100-gpt2_large-train-1024-1", "neusight-h100-gpt2_large-train-1024-4"]
    assert df["evaluation_only"].all()
    assert label_ops.label_ops_path().stem not in reference_datasets()  # what the predictors are trained from
