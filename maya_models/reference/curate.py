"""Curate the public GPU measurements in ../shared/data/reference into maya's measurement schema.

    python -m maya_models.reference.curate --shared ../shared/data/reference [--out warehouse/reference]

Each public table is converted into the ONE op signature the emulator records (emulator.core.ops):
a Linear `y[m,n] = x[m,k] W[n,k]^T` becomes `aten::mm` with shapes [[m,k],[k,n]] and strides
[[k,1],[1,k]], a causal prefill becomes the SDPA flash op with [b,h,s,d] shapes and is_causal,
an NCCL size becomes `coll_bytes` in the nccl-tests convention. Only rows that map onto an ATen
or c10d op a training step issues are kept; everything dropped is listed in PROVENANCE.md.
The output (`<out>/<dataset>.parquet`, zstd) is committed, so nothing downstream needs ../shared.
This module never reads the held-out slice (../shared/data/holdout).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from emulator.core.ops import contiguous_strides, op_family
from maya_models.reference import published
from maya_models.schema import signature_key
from maya_models.warehouse import to_measurement_table

AIC_COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
VIDUR_COMMIT = "7d47513363ec447a741ac5e47241580b47724fbf"
NEUSIGHT_COMMIT = "6945927d9afcca2b9daf021f8395e53edc5b4eef"
VTRAIN_COMMIT = "f8dda8473a48b373b1d25f51f52d685bff5150c5"
AIC = "aiconfigurator/aic-core/src/aiconfigurator_core/systems/data"
# aiconfigurator's collector locks application clocks at the part's maximum (`nvidia-smi -ac`): the rows
# ran at the maximum SM clock (the part's boost clock in emulator.core.hardware)
MS = 1e-3

# GEMM: one framework per GPU, the one closest to what PyTorch training runs (torch linear where there is one).
AIC_GEMM = {"h100": "h100_sxm/gemm/vllm/0.24.0", "a100-80gb": "a100_sxm/gemm/sglang/0.5.10",
            "l40s": "l40s/gemm/trtllm/1.3.0rc20", "b200": "b200_sxm/gemm/trtllm/1.3.0rc20"}
# attention: every table, each labelled with its kernel library (`implementation`): PyTorch's SDPA flash
# backend is FlashAttention-2, which the SGLang/vLLM-on-Ampere tables run; TRT-LLM's FMHA and vLLM's
# FlashAttention-3 on Hopper are other, faster kernels, kept with their label as a feature.
AIC_ATTN = [("h100", "h100_sxm/attention/trtllm/1.3.0rc20", "trtllm_fmha"),
            ("h100", "h100_sxm/attention/vllm/0.24.0", "fa3"),
            ("a100-80gb", "a100_sxm/attention/trtllm/1.0.0", "trtllm_fmha"),
            ("a100-80gb", "a100_sxm/attention/sglang/0.5.10", "fa2"),
            ("a100-80gb", "a100_sxm/attention/vllm/0.14.0", "fa2"),
            ("l40s", "l40s/attention/trtllm/1.3.0rc20", "trtllm_fmha")]
AIC_NCCL = {"h100": "h100_sxm/comm/nccl/2.29.2", "a100-80gb": "a100_sxm/comm/nccl/2.27.3",
            "l40s": "l40s/comm/nccl/2.27.3", "b200": "b200_sxm/comm/nccl/2.29.2"}
NCCL_OPS = {  # nccl-tests op -> (c10d op, input shapes given the total element count n and group size g)
    "all_reduce": ("c10d::allreduce_", lambda n, g: [[n]]),
    "all_gather": ("c10d::_allgather_base_", lambda n, g: [[n], [n // g]]),
    "reduce_scatter": ("c10d::_reduce_scatter_base_", lambda n, g: [[n // g], [n]]),
    "alltoall": ("c10d::alltoall_base_", lambda n, g: [[n], [n]]),
}
NEUSIGHT_GPUS = {"NVIDIA H100 80GB HBM3": "h100", "NVIDIA A100 80GB PCIe": "a100-80gb-pcie",
                 "NVIDIA A100-PCIE-40GB": "a100-40gb-pcie", "NVIDIA L4": "l4", "Tesla T4": "t4"}
VIDUR_NET = {"a100_dgx": "a100-80gb", "h100_dgx": "h100", "a100_pairwise_nvlink": "a100-80gb-pcie",
             "h100_pairwise_nvlink": "h100-nvl"}
# vidur's compute folders name no SKU. The `h100` rows are an H100 NVL: its residual add moves 3.3-3.5 TB/s on
# 64-256 MiB tensors (far past any L2), above the 3.35 TB/s an H100 SXM has (the NVL has 3.9), and vidur's
# H100 nodes include 4-GPU NVL VMs (docs/profiling.md). The `a100` rows are taken to be SXM4 80 GB.
VIDUR_COMPUTE = {"a100": "a100-80gb", "h100": "h100-nvl"}
VTRAIN = {"a100": "a100-80gb", "v100": "v100"}


def _row(op, shapes, dtypes, strides, args, out_shapes, out_dtypes, duration_s, gpu, source, provenance,
         device_name, software, timing, kind="kernel", coll=None, implementation=None, clock_mhz=None):
    args_json = json.dumps(args or {}, sort_keys=True)
    extra = ""
    row = {"kind": kind, "op": op, "family": op_family(op), "shapes": shapes, "dtypes": dtypes,
           "strides": strides, "args": args_json, "out_shapes": out_shapes, "out_dtypes": out_dtypes,
           "duration_s": float(duration_s), "status": "ok", "gpu": gpu, "source": source,
           "provenance": provenance, "device_name": device_name, "software": software,
           "run_id": f"reference-{source}", "timing": timing, "implementation": implementation,
           "clock_mhz": clock_mhz}
    if coll:
        row.update(coll)
        extra = f"{coll['coll_bytes']}/{coll['group_size']}/{coll['nnodes']}/{coll['gpus_per_node']}"
    row["signature"] = signature_key(op, shapes, dtypes, strides, args_json, extra)
    return row


def _mm(m, n, k, dtype):
    """A Linear forward y[m,n] = x[m,k] W[n,k]^T as the emulator records it."""
    return dict(op="aten::mm", shapes=[[m, k], [k, n]], dtypes=[dtype, dtype], strides=[[k, 1], [1, k]],
                args={}, out_shapes=[[m, n]], out_dtypes=[dtype])


def aiconfigurator_gemm(shared: Path) -> pd.DataFrame:
    rows = []
    for gpu, sub in AIC_GEMM.items():
        path = f"{AIC}/{sub}/gemm_perf.parquet"
        df = pd.read_parquet(shared / path)
        fw = f"{df['framework'].iloc[0]} {df['version'].iloc[0]}"
        for r in df[df["gemm_dtype"] == "bfloat16"].itertuples(index=False):
            sig = _mm(int(r.m), int(r.n), int(r.k), "bfloat16")
            rows.append(_row(**sig, duration_s=r.latency * MS, gpu=gpu, source="aiconfigurator",
                             provenance=f"ai-dynamo/aiconfigurator@{AIC_COMMIT}:{path} ({r.kernel_source})",
                             device_name=r.device, software=fw, **_aic_timing(gpu)))
        # per-tensor FP8 (includes the dynamic activation quantisation): every 3rd (m) value per (n, k)
        fp8 = df[df["gemm_dtype"] == "fp8"]
        ms = sorted(fp8["m"].unique())
        fp8 = fp8[fp8["m"].isin(ms[::3])]
        for r in fp8.itertuples(index=False):
            m, n, k = int(r.m), int(r.n), int(r.k)
            rows.append(_row(op="aten::_scaled_mm", shapes=[[m, k], [k, n], [], []],
                             dtypes=["float8_e4m3fn", "float8_e4m3fn", "float32", "float32"],
                             strides=[[k, 1], [1, k], [], []], args={"out_dtype": "bfloat16"},
                             out_shapes=[[m, n]], out_dtypes=["bfloat16"], duration_s=r.latency * MS, gpu=gpu,
                             source="aiconfigurator",
                             provenance=f"ai-dynamo/aiconfigurator@{AIC_COMMIT}:{path} ({r.kernel_source})",
                             device_name=r.device, software=fw, **_aic_timing(gpu)))
    return pd.DataFrame(rows)


def _aic_timing(gpu: str) -> dict:
    from emulator.core.hardware import get_gpu

    return {"timing": "isolated_graph_locked", "clock_mhz": float(get_gpu(gpu).clock_mhz)}


def aiconfigurator_attention(shared: Path) -> pd.DataFrame:
    rows = []
    for gpu, sub, impl in AIC_ATTN:
        path = f"{AIC}/{sub}/context_attention_perf.parquet"
        df = pd.read_parquet(shared / path)
        keep = (df["attn_dtype"] == "bfloat16") & (df["kv_cache_dtype"] == "bfloat16")
        if "window_size" in df:
            keep &= df["window_size"] == 0
        fw = f"{df['framework'].iloc[0]} {df['version'].iloc[0]}"
        for r in df[keep].itertuples(index=False):
            b, s, hq, hk, d = int(r.batch_size), int(r.isl), int(r.num_heads), int(r.num_key_value_heads), \
                int(r.head_dim)
            q, kv = [b, hq, s, d], [b, hk, s, d]
            rows.append(_row(op="aten::_scaled_dot_product_flash_attention", shapes=[q, kv, kv],
                             dtypes=["bfloat16"] * 3, strides=[list(contiguous_strides(x)) for x in (q, kv, kv)],
                             args={"dropout_p": 0.0, "is_causal": True}, out_shapes=[q, [b, hq, s]],
                             out_dtypes=["bfloat16", "float32"], duration_s=r.latency * MS, gpu=gpu,
                             source="aiconfigurator",
                             provenance=f"ai-dynamo/aiconfigurator@{AIC_COMMIT}:{path} ({r.kernel_source})",
                             device_name=r.device, software=fw, implementation=impl, **_aic_timing(gpu)))
    return pd.DataFrame(rows)


def _coll(coll_bytes, group_size, nnodes, gpus_per_node):
    return {"coll_bytes": int(coll_bytes), "group_size": int(group_size), "nnodes": int(nnodes),
            "gpus_per_node": int(gpus_per_node)}


def aiconfigurator_nccl(shared: Path) -> pd.DataFrame:
    rows = []
    for gpu, sub in AIC_NCCL.items():
        path = f"{AIC}/{sub}/nccl_perf.parquet"
        df = pd.read_parquet(shared / path)
        for r in df[df["nccl_dtype"] == "half"].itertuples(index=False):
            op, shapes_of = NCCL_OPS[r.op_name]
            n, g = int(r.message_size), int(r.num_gpus)
            shapes = shapes_of(n, g)
            rows.append(_row(op=op, shapes=shapes, dtypes=["float16"] * len(shapes),
                             strides=[[1] for _ in shapes], args={}, out_shapes=None, out_dtypes=None,
                             duration_s=r.latency * MS, gpu=gpu, source="aiconfigurator",
                             provenance=f"ai-dynamo/aiconfigurator@{AIC_COMMIT}:{path} (nccl-tests out-of-place)",
                             device_name=r.device, software=f"NCCL {r.version}", kind="collective",
                             coll=_coll(2 * n, g, 1, g), timing="nccl_tests"))
    return pd.DataFrame(rows)


# Models whose block adds attention, MLP and residual in one expression under vidur's "add" timer
# (`vidur/profiling/mlp/mlp_impl.py`, `GPTBlock._forward_without_post_attn_norm`: `attn_outputs +
# feed_forward_hidden_states + residual`): two add kernels, not one. Recorded as one aten::add they
# read as an add at half the bandwidth (phi-2's [4096, 2560] "add" took 78 us where Llama-2's one
# add of [4096, 4096] took 55 us), and the trees learned that narrow rows add slowly.
PARALLEL_RESIDUAL_MODELS = frozenset({"microsoft/phi-2"})


def _vidur_ops(r, model: str = "") -> list[tuple[str, dict]]:
    """(time column, signature) pairs of one vidur mlp.csv row; ops with no single ATen equivalent are skipped."""
    t, tp, e = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"]), int(r["n_embd"])
    nh, nkv, f = int(r["n_head"]), int(r["n_kv_head"]), int(r["n_expanded_embd"])
    hd = e // nh
    gated = bool(r["use_gated_mlp"])
    dt = "float16"
    out = [
        ("attn_pre_proj", _mm(t, (nh + 2 * nkv) * hd // tp, e, dt)),
        ("attn_post_proj", _mm(t, e, nh * hd // tp, dt)),
        ("mlp_up_proj", _mm(t, f * (2 if gated else 1) // tp, e, dt)),
        ("mlp_down_proj", _mm(t, e, f // tp, dt)),
    ]
    if model not in PARALLEL_RESIDUAL_MODELS:
        out.append(("add", dict(op="aten::add", shapes=[[t, e], [t, e]], dtypes=[dt, dt], strides=[[e, 1], [e, 1]],
                                args={"alpha": 1}, out_shapes=[[t, e]], out_dtypes=[dt])))
    if tp == 1:  # with TP the vocab-parallel embedding adds masking kernels
        v = int(r["vocab_size"])
        out.append(("emb", dict(op="aten::embedding", shapes=[[v, e], [t]], dtypes=[dt, "int64"],
                                strides=[[e, 1], [1]], args={}, out_shapes=[[t, e]], out_dtypes=[dt])))
    if gated:  # vLLM's fused RMSNorm kernel (one kernel, like torch's _fused_rms_norm)
        out.append(("input_layernorm", dict(op="aten::_fused_rms_norm", shapes=[[t, e], [e]], dtypes=[dt, dt],
                                            strides=[[e, 1], [1]], args={"normalized_shape": [e]},
                                            out_shapes=[[t, e], [t, 1]], out_dtypes=[dt, "float32"])))
    else:  # phi-2: LayerNorm and GELU
        out.append(("input_layernorm", dict(op="aten::native_layer_norm", shapes=[[t, e], [e], [e]],
                                            dtypes=[dt] * 3, strides=[[e, 1], [1], [1]],
                                            args={"normalized_shape": [e], "eps": 1e-5},
                                            out_shapes=[[t, e], [t, 1], [t, 1]],
                                            out_dtypes=[dt, "float32", "float32"])))
        out.append(("mlp_act", dict(op="aten::gelu", shapes=[[t, f // tp]], dtypes=[dt], strides=[[f // tp, 1]],
                                    args={"approximate": "tanh"}, out_shapes=[[t, f // tp]], out_dtypes=[dt])))
    return out


def vidur_compute(shared: Path) -> pd.DataFrame:
    rows = []
    for folder, gpu in VIDUR_COMPUTE.items():
        for path in sorted((shared / "vidur/data/profiling/compute" / folder).glob("*/*/mlp.csv")):
            rel = str(path.relative_to(shared))
            model = "/".join(path.parts[-3:-1])
            df = pd.read_csv(path)
            for r in df.to_dict("records"):
                for col, sig in _vidur_ops(r, model):
                    val = r.get(f"time_stats.{col}.median")
                    if val is None or not np.isfinite(val) or val <= 0:
                        continue
                    rows.append(_row(**sig, duration_s=val * MS, gpu=gpu, source="vidur",
                                     provenance=f"microsoft/vidur@{VIDUR_COMMIT}:{rel} ({model} {col})",
                                     device_name=None, software="sarathi-serve/vLLM fp16",
                                     timing="in_situ_forward"))
    return pd.DataFrame(rows)


def _log_subsample(values, n: int) -> set:
    """About n values spread evenly in log space (always the smallest and largest)."""
    v = np.array(sorted(set(values)), dtype=float)
    if len(v) <= n:
        return set(v.tolist())
    targets = np.geomspace(v[0], v[-1], n)
    return {float(v[np.abs(np.log(v) - math.log(t)).argmin()]) for t in targets}


def vidur_network(shared: Path) -> pd.DataFrame:
    rows = []
    for node, gpu in VIDUR_NET.items():
        for name in ("all_reduce", "send_recv"):
            rel = f"vidur/data/profiling/network/{node}/{name}.csv"
            df = pd.read_csv(shared / rel)
            for (nw, dpn), grp in df.groupby(["num_workers", "devices_per_node"]):
                keep = _log_subsample(grp["size"], 48)
                for r in grp[grp["size"].astype(float).isin(keep)].to_dict("records"):
                    size, nw_, dpn_ = int(r["size"]), int(nw), int(dpn)
                    if name == "all_reduce":
                        op, kind, coll = "c10d::allreduce_", "collective", _coll(size, nw_, nw_ // dpn_, dpn_)
                    else:
                        nn = 2 if dpn_ == 1 else 1
                        op, kind, coll = "c10d::send", "p2p", _coll(size, 2, nn, 2 // nn)
                    n = size // 2
                    rows.append(_row(op=op, shapes=[[n]], dtypes=["float16"], strides=[[1]], args={},
                                     out_shapes=None, out_dtypes=None,
                                     duration_s=r[f"time_stats.{name}.median"] * MS, gpu=gpu, source="vidur",
                                     provenance=f"microsoft/vidur@{VIDUR_COMMIT}:{rel} (median NCCL kernel)",
                                     device_name=node, software="torch.distributed NCCL", kind=kind, coll=coll,
                                     timing="in_situ_forward"))
    return pd.DataFrame(rows)


def _neusight_sig(kind: str, r) -> dict | None:
    f32 = "float32"
    if kind == "bmm":  # torch.bmm(A[B,M,N], X[B,N,K]): N is the reduction dimension
        b, m, n, k = int(r["B"]), int(r["M"]), int(r["N"]), int(r["K"])
        return dict(op="aten::bmm", shapes=[[b, m, n], [b, n, k]], dtypes=[f32, f32],
                    strides=[[m * n, n, 1], [n * k, k, 1]], args={}, out_shapes=[[b, m, k]], out_dtypes=[f32])
    if kind == "linear":  # [B,M,N] through Linear(N, K, bias): addmm(bias, x.view(B*M, N), W.t())
        b, m, n, k = int(r["B"]), int(r["M"]), int(r["N"]), int(r["K"])
        return dict(op="aten::addmm", shapes=[[k], [b * m, n], [n, k]], dtypes=[f32] * 3,
                    strides=[[1], [n, 1], [1, n]], args={"alpha": 1, "beta": 1}, out_shapes=[[b * m, k]],
                    out_dtypes=[f32])
    b, h = int(r["B"]), int(r["H"])
    x = dict(shapes=[[b, h]], dtypes=[f32], strides=[[h, 1]], out_shapes=[[b, h]], out_dtypes=[f32])
    name = r["OPName"]
    if kind == "ln":
        return dict(op="aten::native_layer_norm", shapes=[[b, h], [h], [h]], dtypes=[f32] * 3,
                    strides=[[h, 1], [1], [1]], args={"normalized_shape": [h], "eps": 1e-5},
                    out_shapes=[[b, h], [b, 1], [b, 1]], out_dtypes=[f32] * 3)
    if kind == "softmax":
        return dict(op="aten::_softmax", args={"dim": -1, "half_to_float": False}, **x)
    binary = {"add": "aten::add", "mul": "aten::mul", "pow": "aten::pow", "div": "aten::div"}
    unary = {"addu": "aten::add", "mulu": "aten::mul", "powu": "aten::pow", "divu": "aten::div",
             "relu": "aten::relu", "gelu": "aten::gelu", "tanh": "aten::tanh"}
    if name in binary:
        return dict(op=binary[name], shapes=[[b, h], [b, h]], dtypes=[f32, f32], strides=[[h, 1], [h, 1]],
                    args={}, out_shapes=[[b, h]], out_dtypes=[f32])
    if name in unary:  # tensor-scalar ops carry one tensor; the scalar is a non-tensor argument
        return dict(op=unary[name], args={}, **x)
    return None


def neusight_kernels(shared: Path) -> pd.DataFrame:
    base = "neusight/scripts/asplos/data/dataset"
    files = [("bmm", "test/bmm.csv"), ("linear", "test/linear.csv"),
             ("linear", "train/collect/linear/p2.1.0/NVIDIA A100-PCIE-40GB.csv"),
             ("elem", "test/elem.csv"), ("elem", "train/elem.csv"), ("ln", "test/ln.csv"), ("ln", "train/ln.csv"),
             ("softmax", "test/softmax.csv"), ("softmax", "train/softmax.csv")]
    rows = []
    for kind, sub in files:
        rel = f"{base}/{sub}"
        df = pd.read_csv(shared / rel)
        df = df[df["Device"].isin(NEUSIGHT_GPUS)]
        for r in df.to_dict("records"):
            sig = _neusight_sig(kind, r)
            if sig is None or not (r["Latency"] > 0):
                continue
            rows.append(_row(**sig, duration_s=r["Latency"] * MS, gpu=NEUSIGHT_GPUS[r["Device"]],
                             source="neusight",
                             provenance=f"sitar-lab/NeuSight@{NEUSIGHT_COMMIT}:{rel} ({r['Kernel Name']})"[:400],
                             device_name=r["Device"], software=f"torch {r['Torch Version']} {r['CUDA Version']}",
                             timing="isolated_events"))
    out = pd.DataFrame(rows)
    # the same shape measured in both the train and test sweeps: keep one row (the median time)
    med = out.groupby(["gpu", "signature"])["duration_s"].transform("median")
    out["duration_s"] = med
    return out.drop_duplicates(["gpu", "signature"]).reset_index(drop=True)


def vtrain_allreduce(shared: Path) -> pd.DataFrame:
    rows = []
    for folder, gpu in VTRAIN.items():
        for path in sorted((shared / "vtrain/trace" / folder).glob("AR_GPU*_1M_1024M_LUT")):
            g = int(path.name.split("_")[1].removeprefix("GPU"))
            rel = str(path.relative_to(shared))
            df = pd.read_csv(path)
            keep = _log_subsample(df["size(B)"], 40)
            for r in df[df["size(B)"].astype(float).isin(keep)].to_dict("records"):
                n = int(r["count"])
                rows.append(_row(op="c10d::allreduce_", shapes=[[n]], dtypes=["float32"], strides=[[1]], args={},
                                 out_shapes=None, out_dtypes=None, duration_s=r["time(ns)"] * 1e-9, gpu=gpu,
                                 source="vtrain",
                                 provenance=f"VIA-Research/vTrain@{VTRAIN_COMMIT}:{rel} (nccl-tests out-of-place)",
                                 device_name=f"{folder} 8-GPU node", software="nccl-tests all_reduce_perf",
                                 kind="collective", coll=_coll(int(r["size(B)"]), g, 1, g), timing="nccl_tests"))
    return pd.DataFrame(rows)


def _aic_a100_fa2_forward(shared: Path):
    """(s, d, causal) -> seconds of aiconfigurator's A100 SGLang FlashAttention-2 forward at the FlashAttention
    benchmark's shape (hidden 2048, batch 16k / s), or None when the table has no such row."""
    df = pd.read_parquet(shared / f"{AIC}/a100_sxm/attention/sglang/0.5.10/context_attention_perf.parquet")
    df = df[(df["attn_dtype"] == "bfloat16") & (df["num_heads"] == df["num_key_value_heads"])]

    def forward(s: int, d: int, causal: bool):
        if not causal:  # the table holds causal prefill only
            return None
        hit = df[(df["isl"] == s) & (df["head_dim"] == d) & (df["num_heads"] == published.HIDDEN // d)
                 & (df["batch_size"] == published.TOKENS // s)]
        return float(hit["latency"].median()) * MS if len(hit) else None

    return forward


def flashattention_bench(shared: Path) -> pd.DataFrame:
    return published.flashattention(_row, _aic_a100_fa2_forward(shared))


def mamf(shared: Path) -> pd.DataFrame:
    return published.mamf(_row)


DATASETS = {
    "aiconfigurator_gemm": aiconfigurator_gemm,
    "aiconfigurator_attention": aiconfigurator_attention,
    "aiconfigurator_nccl": aiconfigurator_nccl,
    "vidur_compute": vidur_compute,
    "vidur_network": vidur_network,
    "neusight_kernels": neusight_kernels,
    "vtrain_allreduce": vtrain_allreduce,
    "flashattention_bench": flashattention_bench,
    "mamf": mamf,
}


def curate(shared: Path, out: Path, only: list[str] | None = None) -> dict[str, int]:
    shared, out = Path(shared), Path(out)
    if "holdout" in shared.resolve().parts:
        raise ValueError("refusing to curate from a holdout folder; give ../shared/data/reference")
    if not (shared / "README.md").exists():
        raise FileNotFoundError(f"{shared}: not the shared reference folder (no README.md)")
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, fn in DATASETS.items():
        if only and name not in only:
            continue
        df = fn(shared)
        table = to_measurement_table(df)
        tmp = out / f".{name}.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd", compression_level=19)
        tmp.replace(out / f"{name}.parquet")
        counts[name] = table.num_rows
        print(f"{name}: {table.num_rows} rows, {(out / f'{name}.parquet').stat().st_size / 2**20:.2f} MiB")
    return counts


def main(argv=None) -> None:
    from maya_models.reference import reference_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=Path("../shared/data/reference"))
    p.add_argument("--out", type=Path, default=reference_dir())
    p.add_argument("--only", nargs="*", choices=sorted(DATASETS))
    a = p.parse_args(argv)
    curate(a.shared, a.out, a.only)


if __name__ == "__main__":
    main()
