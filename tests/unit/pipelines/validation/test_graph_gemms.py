"""The GEMM check against NeuSight's per-node times of models outside the GPU table reads each node's layout."""

from __future__ import annotations

import pandas as pd

from emulator.core.ops import flops_and_bytes
from maya_models.reference import reference_datasets
from pipelines.validation import graph_gemms, label_ops

_COLUMNS = "op,target,meta,input_shapes,output_shape,fw_latency,bw_latency,acc_latency,Name\n"
_CONV1D = "{'nn_module_stack': OrderedDict([('transformer.h.0.attn.c_attn', <class 'x.pytorch_utils.Conv1D'>)])}"
_LINEAR = "{'nn_module_stack': OrderedDict([('model.fc1', <class 'torch.nn.modules.linear.Linear'>)])}"


def _root(tmp_path):
    folder = tmp_path / label_ops.LABELS / "NVIDIA_H100_80GB_HBM3"
    folder.mkdir(parents=True)

    def write(name, rows):
        text = _COLUMNS + "".join(",".join(f'"{v}"' if isinstance(v, str) else str(v) for v in r) + "\n"
                                  for r in rows)
        (folder / name).write_text(text)

    addmm = ("call_function", "<built-in method addmm of type object at 0x1>", _CONV1D,
             "[[96], [64, 32], [32, 96]]", "(64, 96)", 0.2, 0.5, 0.0, "addmm")
    fc1 = ("call_module", "model.fc1", _LINEAR, "[[2, 32, 32]]", "(2, 32, 128)", 0.3, 0.7, 0.0, "model_fc1")
    view = ("call_method", "view", _CONV1D, "[[64, 96], [1]]", "(1, 64, 96)", 0.008, 0.0, 0.0, "view_2")
    write("gpt3_xl-train-2048-1.csv", [addmm, view])
    write("opt_13-inf-2048-2.csv", [fc1])
    write("gpt2_large-train-1024-1.csv", [addmm])  # the GPU table's own program: left out
    return tmp_path


def test_conv1d_and_linear_nodes_are_curated_with_their_sizes_and_the_tables_model_left_out(tmp_path):
    df = graph_gemms.curate(_root(tmp_path / "root"), tmp_path / "g.parquet")
    got = {(r.graph, r.layout, r.m, r.k, r.n) for r in df.itertuples()}
    assert got == {("gpt3_xl-train-2048-1", "conv1d", 64, 32, 96), ("opt_13-inf-2048-2", "linear", 64, 32, 128)}
    assert df["evaluation_only"].all() and df["provenance"].str.contains(label_ops.NEUSIGHT).all()


def test_each_layout_records_the_strides_of_its_weight_and_backward_gemms_of_the_same_work():
    for layout, weight_stride in (("conv1d", [128, 1]), ("linear", [1, 64])):
        forward, backward = graph_gemms.trace_rows(layout, m=256, k=64, n=128)
        assert forward["strides"][2] == weight_stride  # Conv1D reads W [in, out] as stored; Linear reads W^T
        flops = [flops_and_bytes(r["op"], r["shapes"], r["dtypes"], r["out_shapes"], r["out_dtypes"])[0]
                 for r in (forward, *backward)]
        assert flops[1] == flops[2] == 2 * 256 * 64 * 128  # grad_x and grad_W: the forward's work each
        assert [b["out_shapes"][0] for b in backward] == ([[256, 64], [64, 128]] if layout == "conv1d"
                                                           else [[256, 64], [128, 64]])


def test_the_committed_graph_nodes_are_evaluation_data():
    df = pd.read_parquet(graph_gemms.graph_gemms_path())
    assert set(df["gpu"]) == {"h100", "a100-80gb-pcie"} and not df["graph"].str.startswith("gpt2_large").any()
    assert graph_gemms.graph_gemms_path().stem not in reference_datasets()  # not what the predictors train on


def test_graph_nodes_are_set_beside_neusights_linear_row_of_the_same_shape_per_model(tmp_path):
    root = _root(tmp_path / "root")
    sweep = root / graph_gemms.LINEAR_ROWS
    sweep.parent.mkdir(parents=True)
    # the Conv1D node [64 x 32] x [32 x 96] timed 0.2 ms in its graph; the sweep has that shape at 0.25 ms
    # (and once more, slower: the fastest row stands) and the Linear node's shape [64 x 32 -> 128] at 0.3 ms
    sweep.write_text("Latency,Device,B,M,N,K\n0.25,NVIDIA H100 80GB HBM3,1,64,96,32\n"
                     "0.40,NVIDIA H100 80GB HBM3,1,64,96,32\n0.3,NVIDIA H100 80GB HBM3,2,32,128,32\n"
                     "0.1,NVIDIA L4,1,64,96,32\n")
    got = {(r.layout, r.model): (r.nodes, round(r.median, 3)) for r in graph_gemms.same_shape(root).itertuples()}
    assert got == {("conv1d", "gpt3_xl"): (1, 0.8), ("conv1d", "gpt2_large"): (1, 0.8), ("linear", "opt_13"): (1, 1.0)}
