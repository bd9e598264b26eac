"""Predictor accuracy on held-out shapes, beside the roofline-only baseline, and on the unseen H200.

    python -m maya_models.evaluate [--gpu h100 --gpu a100-80gb] [--holdout ../shared/data/holdout] [--no-h200]

For each GPU a kernel and a collective predictor are trained (not registered) on the training
shape groups of the warehouse (or, if the warehouse has none, the committed reference) and scored on
the held-out groups: median APE, p90 APE, MAPE, and the same for the datasheet roofline. The
unseen-GPU check trains cross-GPU models for h200 with no H200 row and scores them on the held-out
H200 slice (`--holdout`, default ../shared/data/holdout or $MAYA_HOLDOUT); it is skipped with a
message when that folder is absent. The holdout is read here and nowhere else, never for training.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from emulator.core.hardware import get_gpu
from maya_models.features import collective_columns, featurize
from maya_models.metrics import error_stats

TARGETS = {  # (gpu, row label) -> median APE target in percent, from the project brief
    ("h100", "gemm bf16"): 5.0, ("h100", "attention_fwd"): 8.0, ("h100", "norm"): 10.0,
    ("h100", "elementwise"): 10.0, ("h100", "nccl"): 8.0, ("a100-80gb", "nccl"): 8.0,
    ("h200", "gemm bf16"): 12.0, ("h200", "nccl"): 12.0, ("cpu", "all kernels"): 10.0,
}
H200_DIR = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/h200_sxm"


def _data(root=None) -> pd.DataFrame:
    from maya_models.train import training_rows
    from maya_models.warehouse import measurement_files

    if measurement_files(root):
        return training_rows(root)
    from maya_models.reference import load_reference

    print("(warehouse empty: evaluating on the committed reference measurements)")
    return training_rows(data=load_reference())


def _roofline(df: pd.DataFrame) -> np.ndarray:
    out = np.empty(len(df))
    df = df.reset_index(drop=True)
    for g, idx in df.groupby("gpu").groups.items():
        out[np.asarray(idx)] = featurize(df.loc[idx], get_gpu(g))["roofline_s"].to_numpy()
    return out


def _row(gpu: str, label: str, pred, roof, true) -> dict:
    s, b = error_stats(pred, true), error_stats(roof, true)
    return {"gpu": gpu, "rows": label, "n": s["n"], "median": s["median_ape"], "p90": s["p90_ape"],
            "mape": s["mape"], "roof_median": b["median_ape"], "roof_p90": b["p90_ape"], "roof_mape": b["mape"],
            "target": TARGETS.get((gpu, label))}


def kernel_rows(gpu: str, predictor, df: pd.DataFrame) -> list[dict]:
    from maya_models.train import predict_as_measured

    df = df.reset_index(drop=True)
    pred, roof, true = predict_as_measured(predictor, df), _roofline(df), df["duration_s"].to_numpy()
    out = []
    for fam, idx in df.groupby("family").groups.items():
        i = np.asarray(idx)
        out.append(_row(gpu, fam, pred[i], roof[i], true[i]))
    bf16 = ((df["family"] == "gemm") & (df["dtypes"].map(lambda d: str(list(d)[0]) if len(d) else "") == "bfloat16")
            ).to_numpy()
    if bf16.any():
        out.append(_row(gpu, "gemm bf16", pred[bf16], roof[bf16], true[bf16]))
    if gpu == "cpu":
        out.append(_row(gpu, "all kernels", pred, roof, true))
    return out


def collective_rows(gpu: str, predictor, df: pd.DataFrame) -> list[dict]:
    from emulator.core.roofline import roofline_durations
    from maya_models.train import predict_as_measured

    df = df.reset_index(drop=True)
    cols = collective_columns(df)
    pred, true = predict_as_measured(predictor, df), df["duration_s"].to_numpy()
    roof = np.empty(len(df))
    with_coll = pd.concat([df, cols[["collective"]]], axis=1)
    for g, idx in df.groupby("gpu").groups.items():
        roof[np.asarray(idx)] = roofline_durations(with_coll.loc[idx], get_gpu(g))
    out = [_row(gpu, f"nccl {c}", pred[m], roof[m], true[m]) for c in sorted(cols["collective"].unique())
           for m in [(cols["collective"] == c).to_numpy()]]
    nccl = (cols["collective"] != "send").to_numpy()
    if nccl.any():
        out.append(_row(gpu, "nccl", pred[nccl], roof[nccl], true[nccl]))
    return out


def evaluate_gpu(gpu: str, data: pd.DataFrame) -> list[dict]:
    from maya_models.train import (
        InsufficientDataError,
        collective_eval_set,
        kernel_eval_set,
        train_collective_predictor,
        train_kernel_predictor,
    )

    gpu = get_gpu(gpu).key
    out = []
    try:
        k = train_kernel_predictor(gpu, data=data, register=False, return_predictor=True)
        out += kernel_rows(gpu, k["predictor"], kernel_eval_set(gpu, data=data))
    except InsufficientDataError as e:
        print(f"{gpu} kernels: skipped: {e}")
    try:
        c = train_collective_predictor(gpu, data=data, register=False, return_predictor=True)
        out += collective_rows(gpu, c["predictor"], collective_eval_set(gpu, data=data))
    except InsufficientDataError as e:
        print(f"{gpu} collectives: skipped: {e}")
    return out


def load_h200_holdout(holdout: Path, gemm_rows: int = 6000) -> pd.DataFrame:
    """The held-out H200 slice in the measurement schema: bf16 GEMMs (both frameworks), causal bf16
    prefill attention and NCCL (half)."""
    from emulator.core.ops import contiguous_strides
    from maya_models.reference.curate import AIC_COMMIT, NCCL_OPS, _aic_timing, _coll, _mm, _row

    rows = []
    for fw in ("trtllm/1.3.0rc20", "vllm/0.24.0"):
        path = f"{H200_DIR}/gemm/{fw}/gemm_perf.parquet"
        df = pd.read_parquet(holdout / path)
        df = df[df["gemm_dtype"] == "bfloat16"]
        df = df.sample(min(gemm_rows // 2, len(df)), random_state=0)
        for r in df.itertuples(index=False):
            rows.append(_row(**_mm(int(r.m), int(r.n), int(r.k), "bfloat16"), duration_s=r.latency * 1e-3,
                             gpu="h200", source="holdout", provenance=f"ai-dynamo/aiconfigurator@{AIC_COMMIT}:{path}",
                             device_name=r.device, software=fw, **_aic_timing("h200")))
    path = f"{H200_DIR}/attention/trtllm/1.3.0rc20/context_attention_perf.parquet"
    df = pd.read_parquet(holdout / path)
    keep = (df["attn_dtype"] == "bfloat16") & (df["kv_cache_dtype"] == "bfloat16") & (df["window_size"] == 0)
    df = df[keep]
    for r in df.sample(min(gemm_rows // 2, len(df)), random_state=0).itertuples(index=False):
        b, s, hq, hk, d = int(r.batch_size), int(r.isl), int(r.num_heads), int(r.num_key_value_heads), int(r.head_dim)
        q, kv = [b, hq, s, d], [b, hk, s, d]
        rows.append(_row(op="aten::_scaled_dot_product_flash_attention", shapes=[q, kv, kv], dtypes=["bfloat16"] * 3,
                         strides=[list(contiguous_strides(x)) for x in (q, kv, kv)],
                         args={"dropout_p": 0.0, "is_causal": True},
                         out_shapes=[q, [b, hq, s]], out_dtypes=["bfloat16", "float32"], duration_s=r.latency * 1e-3,
                         gpu="h200", source="holdout", provenance=path, device_name=r.device, software="trtllm",
                         implementation="trtllm_fmha", **_aic_timing("h200")))
    path = f"{H200_DIR}/comm/nccl/2.29.2/nccl_perf.parquet"
    df = pd.read_parquet(holdout / path)
    for r in df[df["nccl_dtype"] == "half"].itertuples(index=False):
        op, shapes_of = NCCL_OPS[r.op_name]
        n, g = int(r.message_size), int(r.num_gpus)
        shapes = shapes_of(n, g)
        rows.append(_row(op=op, shapes=shapes, dtypes=["float16"] * len(shapes), strides=[[1] for _ in shapes],
                         args={}, out_shapes=None, out_dtypes=None, duration_s=r.latency * 1e-3, gpu="h200",
                         source="holdout", provenance=path, device_name=r.device, software="NCCL 2.29.2",
                         kind="collective", coll=_coll(2 * n, g, 1, g), timing="nccl_tests"))
    return pd.DataFrame(rows)


def evaluate_h200(data: pd.DataFrame, holdout: Path) -> list[dict]:
    from maya_models.train import train_collective_predictor, train_kernel_predictor

    if not (holdout / H200_DIR).is_dir():
        print(f"h200: skipped: no held-out H200 slice at {holdout} (set --holdout or MAYA_HOLDOUT)")
        return []
    data = data[data["gpu"] != "h200"]
    ho = load_h200_holdout(holdout)
    k = train_kernel_predictor("h200", data=data, register=False, return_predictor=True)
    c = train_collective_predictor("h200", data=data, register=False, return_predictor=True)
    kern = ho[ho["kind"] == "kernel"]
    return kernel_rows("h200", k["predictor"], kern) + collective_rows("h200", c["predictor"],
                                                                        ho[ho["kind"] == "collective"])


def print_table(rows: list[dict]) -> None:
    print(f"{'gpu':<11}{'rows (held-out)':<22}{'n':>6}  {'median':>7}{'p90':>8}{'MAPE':>8}   |  roofline: "
          f"{'median':>7}{'p90':>8}{'MAPE':>8}   target")
    for r in rows:
        tgt = r["target"]
        mark = "" if tgt is None else (f"<= {tgt:.0f}%  " + ("ok" if r["median"] <= tgt else "MISSED"))
        print(f"{r['gpu']:<11}{r['rows']:<22}{r['n']:>6}  {r['median']:>6.1f}%{r['p90']:>7.1f}%{r['mape']:>7.1f}%"
              f"   |            {r['roof_median']:>6.1f}%{r['roof_p90']:>7.1f}%{r['roof_mape']:>7.1f}%   {mark}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m maya_models.evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="append", help="GPUs to evaluate (default: h100, a100-80gb, and cpu if measured)")
    p.add_argument("--holdout", type=Path, default=Path(os.environ.get("MAYA_HOLDOUT", "../shared/data/holdout")))
    p.add_argument("--no-h200", action="store_true", help="skip the unseen-GPU check")
    a = p.parse_args(argv)
    data = _data()
    gpus = a.gpu or (["h100", "a100-80gb"] + (["cpu"] if (data["gpu"] == "cpu").any() else []))
    if not a.gpu and not (data["gpu"] == "cpu").any():
        print("cpu: skipped: no CPU measurements in the warehouse yet (run `make calibrate GPU=cpu`)")
    rows = []
    for g in gpus:
        rows += evaluate_gpu(g, data)
    if not a.no_h200:
        rows += evaluate_h200(data, a.holdout)
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
