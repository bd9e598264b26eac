"""The GEMM predictors against NeuSight's per-node times of models the GPU table does not use (evaluation only).

NeuSight timed every node of one block of several Hugging Face models alone on the GPU, forward and backward
(`scripts/asplos/label/<GPU>/<model>-<train|inf>-<seq>-<batch>.csv`; CUDA events, the mean of the best 5 of 25
calls, fp32 with TF32 off). Its GEMM nodes come in the two layouts training runs: `nn.Linear` (BERT-large,
OPT-1.3B and every model's head: `x W^T`) and Hugging Face's `Conv1D` (the GPT-2 architecture, here GPT-3 XL
and 2.7B: `addmm(bias, x, W)` with W stored [in, out]). Their backward is two GEMMs in other layouts again
(the input's gradient and the weight's, `x^T g` or `g^T x`) plus the bias gradient's sum, which NeuSight timed
together: the kernel sweeps maya learns from (`neusight_kernels`) hold the Linear forward layout only. So
this check says, per layout and pass, how far the learned GEMMs are from real ones of shapes and layouts
that no training row has. GPT-2-large's graphs are left out: they are the labels of the GPU table's rows
(`label_ops`).

    python -m pipelines.validation.graph_gemms --curate NEUSIGHT_ROOT   # write the evaluation parquet
    python -m pipelines.validation.graph_gemms [--gpu h100 ...]          # learned vs measured, per layout
    python -m pipelines.validation.graph_gemms --same-shape NEUSIGHT_ROOT  # graph nodes vs NeuSight's own rows

`--same-shape` sets each graph node's forward time beside NeuSight's isolated `nn.Linear` measurement of the
same (m, k, n) on the same GPU (`data/dataset/test/linear.csv`, the rows the fp32 GEMM trees learn from),
per GPU, layout and model, GPT-2-large included: where the two measurements of one shape disagree, no
predictor trained on the rows can match the graph.

NEUSIGHT_ROOT is a checkout of NeuSight, or the shared reference copy of it (both hold `scripts/asplos/label`).
The predictions are the registered kernel predictors' for trace rows (what a training step is timed with).
The backward's measured time includes the bias gradient's sum, a memory-bound reduction of [tokens, out],
so a backward reading close to +0% is slightly long, not exact.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from maya_models.reference import reference_dir
from pipelines.validation.holdout import NEUSIGHT_GPUS
from pipelines.validation.label_ops import LABELS, NEUSIGHT

GRAPH_GEMMS_NAME = "evaluation/neusight_graph_gemms.parquet"  # under the reference folder
_GRAPH = re.compile(r"^(?P<model>[a-z0-9_]+)-(?:train|inf)-\d+-\d+\.csv$")
LEFT_OUT = {"gpt2_large"}  # the GPU table's own programs
F32 = "float32"


def graph_gemms_path() -> Path:
    return reference_dir() / GRAPH_GEMMS_NAME


def _node(kind: str, target: str, meta: str, shapes: list, out_shape: str) -> tuple[str, int, int, int] | None:
    """(layout, m, k, n) of a GEMM node, or None."""
    if kind == "call_function" and "addmm" in target and len(shapes) == 3:
        (n,), (m, k), _ = shapes
        return "conv1d", int(m), int(k), int(n)
    if kind == "call_module" and shapes and re.findall(r"<class '[\w.]*\.(\w+)'>", meta)[-1:] == ["Linear"]:
        x = shapes[0]
        return "linear", int(np.prod(x[:-1])), int(x[-1]), int(ast.literal_eval(out_shape)[-1])
    return None


def _graph_nodes(root: Path, left_out: set[str] = frozenset()):
    """(gpu, label CSV path, model, CSV row, (layout, m, k, n)) of every GEMM node of every NeuSight graph of a
    known GPU, the models in `left_out` skipped."""
    for gpu_dir, gpu in sorted(NEUSIGHT_GPUS.items()):
        for path in sorted((root / LABELS / gpu_dir).glob("*.csv")):
            hit = _GRAPH.match(path.name)
            if not hit or hit["model"] in left_out:
                continue
            for r in pd.read_csv(path).itertuples(index=False):
                shapes = ast.literal_eval(r.input_shapes) if isinstance(r.input_shapes, str) else []
                node = _node(r.op, str(r.target), str(r.meta), shapes, str(r.output_shape))
                if node is not None:
                    yield gpu, path, hit["model"], r, node


def curate(root: Path, out: Path | None = None) -> pd.DataFrame:
    """One row per GEMM node of every NeuSight graph of a known GPU, the GPU table's models left out."""
    out = out or graph_gemms_path()
    rows = [{"gpu": gpu, "graph": path.stem, "node": r.Name, "layout": layout, "m": m, "k": k, "n": n,
             "fw_s": r.fw_latency / 1e3, "bw_s": r.bw_latency / 1e3,
             "provenance": f"{NEUSIGHT}:{path.relative_to(root)}", "evaluation_only": True}
            for gpu, path, _, r, (layout, m, k, n) in _graph_nodes(root, LEFT_OUT)]
    if not rows:
        raise FileNotFoundError(f"no NeuSight graph CSVs under {root / LABELS}")
    df = pd.DataFrame(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out, index=False, compression="zstd")
    return df


LINEAR_ROWS = "scripts/asplos/data/dataset/test/linear.csv"  # NeuSight's fp32 nn.Linear sweep, every GPU
NEUSIGHT_DEVICE = {"h100": "NVIDIA H100 80GB HBM3", "a100-80gb-pcie": "NVIDIA A100 80GB PCIe",
                   "a100-40gb": "NVIDIA A100-SXM4-40GB"}


def same_shape(root: Path) -> pd.DataFrame:
    """Per GPU, layout and model: GEMM nodes whose shape NeuSight's Linear sweep also timed, and the median of
    graph forward time / sweep time (evaluation data read to explain an error; nothing trains on it)."""
    rows = pd.read_csv(root / LINEAR_ROWS)
    rows = rows.assign(m=rows["B"] * rows["M"]).groupby(["Device", "m", "K", "N"])["Latency"].min()
    out = [{"gpu": gpu, "layout": layout, "model": model, "ratio": r.fw_latency / rows[key]}
           for gpu, _, model, r, (layout, m, k, n) in _graph_nodes(root)
           if (key := (NEUSIGHT_DEVICE.get(gpu), m, k, n)) in rows.index]
    df = pd.DataFrame(out)
    if df.empty:
        raise FileNotFoundError(f"no graph node of {root / LABELS} has a row in {root / LINEAR_ROWS}")
    return df.groupby(["gpu", "layout", "model"])["ratio"].agg(nodes="size", median="median").reset_index()


def _mm(a: list[int], b: list[int], sa: list[int], sb: list[int]) -> dict:
    return {"kind": "kernel", "op": "aten::mm", "shapes": [a, b], "dtypes": [F32, F32], "strides": [sa, sb],
            "args": "{}", "out_shapes": [[a[0], b[1]]], "out_dtypes": [F32]}


def trace_rows(layout: str, m: int, k: int, n: int) -> tuple[dict, list[dict]]:
    """The forward kernel and the two backward GEMMs of one node, as the emulator records them."""
    if layout == "conv1d":  # W [k, n] contiguous
        weight, weight_t = [n, 1], [1, n]
        backward = [_mm([m, n], [n, k], [n, 1], weight_t),  # grad_x = g W^T
                    _mm([k, m], [m, n], [1, k], [n, 1])]  # grad_W = x^T g
    else:  # nn.Linear: W [n, k] contiguous, the forward reads W^T
        weight = [1, k]
        backward = [_mm([m, n], [n, k], [n, 1], [k, 1]),  # grad_x = g W
                    _mm([n, m], [m, k], [1, n], [k, 1])]  # grad_W = g^T x
    forward = {"kind": "kernel", "op": "aten::addmm", "shapes": [[n], [m, k], [k, n]], "dtypes": [F32] * 3,
               "strides": [[1], [k, 1], weight], "args": json.dumps({"alpha": 1, "beta": 1}),
               "out_shapes": [[m, n]], "out_dtypes": [F32]}
    return forward, backward


MIN_NODE_S = 1e-4  # nodes shorter than this are the timer's and the launch's, not the GEMM's


def compare(gpu: str, path: Path | None = None) -> pd.DataFrame:
    """Per node of `gpu` (forward at least MIN_NODE_S): measured and learned forward and backward seconds
    (`bw_s` 0 in inference graphs)."""
    from emulator.core.hardware import get_gpu
    from emulator.estimate import load_predictors

    df = pd.read_parquet(path or graph_gemms_path())
    df = df[(df["gpu"] == gpu) & (df["fw_s"] >= MIN_NODE_S)].reset_index(drop=True)
    if df.empty:
        return df
    kernels, _ = load_predictors(get_gpu(gpu))
    fw, bw = [], []
    for r in df.itertuples(index=False):
        f, b = trace_rows(r.layout, r.m, r.k, r.n)
        fw.append(f)
        bw.extend(b)
    df["fw_pred_s"] = kernels.predict(pd.DataFrame(fw))["duration_s"].to_numpy()
    df["bw_pred_s"] = kernels.predict(pd.DataFrame(bw))["duration_s"].to_numpy().reshape(-1, 2).sum(axis=1)
    return df


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--curate", type=Path, metavar="NEUSIGHT_ROOT", help=f"a checkout of {NEUSIGHT} (or its copy)")
    p.add_argument("--same-shape", type=Path, metavar="NEUSIGHT_ROOT",
                   help="graph nodes' forward time over NeuSight's Linear row of the same shape")
    p.add_argument("--gpu", nargs="*", default=sorted(set(NEUSIGHT_GPUS.values()) - {"a100-40gb"}))
    a = p.parse_args(argv)
    if a.same_shape:
        print(f"{'gpu':16s} {'layout':8s} {'model':12s} {'nodes':>5s} {'graph / row':>12s}")
        for r in same_shape(a.same_shape).itertuples(index=False):
            print(f"{r.gpu:16s} {r.layout:8s} {r.model:12s} {r.nodes:5d} {r.median:12.2f}")
        return
    if a.curate:
        df = curate(a.curate)
        print(f"{len(df)} GEMM nodes of {df['graph'].nunique()} graphs -> {graph_gemms_path()}")
        return
    print(f"{'gpu':16s} {'layout':8s} {'pass':9s} {'nodes':>5s} {'median signed':>14s} {'MAPE':>7s}")
    for gpu in a.gpu:
        df = compare(gpu)
        for layout, d in df.groupby("layout"):
            for part, col in (("forward", "fw"), ("backward", "bw")):
                timed = d[d[f"{col}_s"] >= MIN_NODE_S]
                err = timed[f"{col}_pred_s"] / timed[f"{col}_s"] - 1
                print(f"{gpu:16s} {layout:8s} {part:9s} {len(timed):5d} {100 * err.median():+13.1f}% "
                      f"{100 * err.abs().mean():6.1f}%")


if __name__ == "__main__":
    main()
