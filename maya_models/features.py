"""Features of an op signature on a device: ONE function for trace rows and measurement rows alike.

`featurize(df, spec)` turns the signature columns (`op, shapes, dtypes, strides, args, out_shapes,
out_dtypes`; list columns may be Python lists, numpy arrays or JSON strings) plus the target
GPU's datasheet numbers into a numeric frame. FLOPs and bytes are recomputed from the signature
with `emulator.core.ops.flops_and_bytes` (never taken from the input), so a trace row and a
measurement of the same signature get identical features by construction.

Why these features: kernel time is mostly a roofline (flops / peak, bytes / bandwidth) bent by
effects the roofline ignores: tile and wave quantisation on the SMs, transposed operands,
L2 residency, launch floors for tiny kernels. The hardware columns (peak for the dtype, HBM
bandwidth, SMs, L2, clock) let one cross-GPU model predict a part it has never seen.
Collective rows additionally get size / group / topology features (`collective_features`).
"""

from __future__ import annotations

import json
import math
import zlib

import numpy as np
import pandas as pd

from emulator.core.hardware import GPUSpec
from emulator.core.ops import (
    as_list,
    as_number,
    attention_dims,
    collective_name,
    contiguous_strides,
    dtype_bytes,
    flops_and_bytes,
    gemm_dims,
    numel,
    timing_family,
)
from emulator.core.roofline import collective_time, group_link, kernel_time, ring_factor, ring_steps, row_dtype

TILE = 128  # a typical tensor-core GEMM CTA tile edge


def _args_json(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "{}"
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return str(v) or "{}"


def op_code(op: str) -> float:
    """A stable number per op name (trees split on it inside a family)."""
    return float(zlib.crc32(op.encode()) % 100_003)


def _transposed(stride, shape) -> float:
    """1 when the last two dims are column-major (a transposed view), else 0."""
    if len(stride) < 2 or len(shape) < 2:
        return 0.0
    return 1.0 if stride[-2] == 1 and stride[-1] != 1 and shape[-2] != 1 else 0.0


def _strided(strides, shapes) -> float:
    """1 when some tensor input is not laid out row-major contiguous (a transposed or sliced view): copying or
    reading it walks memory with a stride, which on every device costs more per byte than a contiguous stream.
    A size-1 dim's stride is free, as in `torch.Tensor.is_contiguous`."""
    for st, sh in zip(strides, shapes, strict=False):
        if st is not None and sh is not None and len(st) == len(sh) and any(
                int(size) != 1 and int(s) != c for size, s, c in zip(sh, st, contiguous_strides(sh), strict=True)):
            return 1.0
    return 0.0


def _hardware(spec: GPUSpec, dtype: str, family: str) -> dict:
    tensor = family in ("gemm", "conv", "attention_fwd", "attention_bwd")
    peak = spec.peak_for(dtype) if tensor else spec.peak_flops["float32"]
    return {
        "hw_peak_flops": peak, "hw_fp32_flops": spec.peak_flops["float32"], "hw_hbm_bw": spec.hbm_bandwidth,
        "hw_sms": float(spec.sm_count), "hw_l2_bytes": float(spec.l2_bytes), "hw_clock_mhz": float(spec.clock_mhz),
        "hw_capability": spec.capability[0] + spec.capability[1] / 10, "hw_is_cpu": float(spec.is_cpu),
        "hw_ridge": peak / spec.hbm_bandwidth,
    }


def _row_features(op, shapes, dtypes, strides, args, out_shapes, out_dtypes, spec: GPUSpec) -> dict:
    fam = timing_family(op, args, shapes)
    dtype = row_dtype(op, dtypes)
    flops, nbytes = flops_and_bytes(op, shapes, dtypes, out_shapes, out_dtypes, args)
    f = {
        "op_code": op_code(op), "dtype_bytes": float(dtype_bytes(dtype)), "is_fp32": float(dtype == "float32"),
        "is_fp8": float(dtype.startswith("float8")), "n_inputs": float(len(shapes)),
        "strided": _strided(strides, shapes),
        "flops": flops, "bytes": nbytes, "log_flops": math.log10(flops + 1), "log_bytes": math.log10(nbytes + 1),
        "intensity": flops / max(nbytes, 1.0),
    }
    hw = _hardware(spec, dtype, fam)
    f.update(hw)
    roof = kernel_time(flops, nbytes, dtype, fam, spec)
    f["roofline_s"] = roof
    f["log_roofline"] = math.log10(roof)
    f["t_compute"] = flops / hw["hw_peak_flops"]
    f["t_memory"] = nbytes / spec.hbm_bandwidth
    f["compute_bound"] = float(f["t_compute"] > f["t_memory"])
    f["bytes_over_l2"] = nbytes / max(spec.l2_bytes, 1)
    # shape features common to every family: size of the first input and its innermost dimension
    first = [int(s) for s in shapes[0]] if shapes else []
    f["numel0"] = float(numel(first)) if first else 0.0
    f["inner"] = float(first[-1]) if first else 0.0
    f["outer"] = f["numel0"] / f["inner"] if f["inner"] else 0.0
    f["out_numel"] = float(sum(numel(s) for s in out_shapes)) if out_shapes else f["numel0"]
    f["log_numel0"] = math.log10(f["numel0"] + 1)
    f["waves_elem"] = f["numel0"] / (spec.sm_count * 2048 * 4)  # 2048 threads/SM, 4 elements per thread
    # embedding / index_select read only the gathered rows of the table, not all of it
    if fam == "embedding" and len(shapes) > 1 and shapes[0]:
        gathered = numel(shapes[1]) * int(shapes[0][-1]) * dtype_bytes(dtype)
        f["log_gather_ratio"] = math.log10((gathered + 1) / (nbytes + 1))
    else:
        f["log_gather_ratio"] = 0.0
    a = json.loads(args) if args else {}
    # GEMM geometry
    g = gemm_dims(op, shapes) if fam == "gemm" else None
    b, m, n, k = g if g else (0, 0, 0, 0)
    f.update(batch=float(b), m=float(m), n=float(n), k=float(k),
             log_m=math.log2(m + 1), log_n=math.log2(n + 1), log_k=math.log2(k + 1))
    if g:
        tiles = b * math.ceil(m / TILE) * math.ceil(n / TILE)
        waves = tiles / spec.sm_count
        f.update(tiles=float(tiles), waves=waves, wave_eff=tiles / (math.ceil(waves) * spec.sm_count),
                 k_per_tile=k / TILE, m_mod_tile=float(m % TILE), n_mod_tile=float(n % TILE),
                 k_mod_64=float(k % 64), mn_aspect=math.log2((m + 1) / (n + 1)))
        mat = 1 if op in ("aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation") else 0
        sa = strides[mat] if len(strides) > mat else []
        sb = strides[mat + 1] if len(strides) > mat + 1 else []
        f["a_transposed"] = _transposed(sa, shapes[mat]) if len(shapes) > mat else 0.0
        f["b_transposed"] = _transposed(sb, shapes[mat + 1]) if len(shapes) > mat + 1 else 0.0
        f["has_bias"] = float(mat == 1)
    else:
        f.update(tiles=0.0, waves=0.0, wave_eff=0.0, k_per_tile=0.0, m_mod_tile=0.0, n_mod_tile=0.0,
                 k_mod_64=0.0, mn_aspect=0.0, a_transposed=0.0, b_transposed=0.0, has_bias=0.0)
    # attention geometry
    at = attention_dims(op, shapes) if fam in ("attention_fwd", "attention_bwd") else None
    ab, hq, hk, sq, sk, d = at if at else (0, 0, 0, 0, 0, 0)
    f.update(att_batch=float(ab), att_heads=float(hq), att_kv_heads=float(hk), att_seq_q=float(sq),
             att_seq_k=float(sk), att_head_dim=float(d), att_causal=float(bool(a.get("is_causal"))),
             att_gqa=hq / hk if hk else 0.0,
             att_blocks=float(ab * hq * math.ceil(sq / TILE)) / spec.sm_count if at else 0.0)
    f.update(_generated_body(op, a) if fam == "generated" else _NO_BODY)
    return f


_NO_BODY = {"gen_reduction": 0.0, "gen_loads": 0.0, "gen_stores": 0.0, "gen_transcendental": 0.0,
            "gen_transcendental_share": 0.0}


def _generated_body(op: str, a: dict) -> dict:
    """What a generated kernel's source says (emulator.capture.compile, emulator.capture.cpp_kernels): reduction or
    not, its load, store and transcendental sites, and on a CPU the share of its computed elements that pass through
    a transcendental call (an exp or an erf costs many times an add). Two kernels of one size and traffic differ by
    these; their tensor arguments do not show them."""
    steps = as_number(a.get("step_elems"))
    return {"gen_reduction": float(op.endswith("reduction")), "gen_loads": as_number(a.get("loads")),
            "gen_stores": as_number(a.get("stores")), "gen_transcendental": as_number(a.get("transcendental")),
            "gen_transcendental_share": as_number(a.get("transcendental_elems")) / steps if steps > 0 else 0.0}


# The conditions a row was timed under (maya_models.schema TIMINGS, IMPLEMENTATIONS), as features: a
# predictor learns how far a profiler trace of a running program sits from an isolated microbenchmark,
# and another kernel library from PyTorch's own, from the rows that have both. A trace row is in situ
# (what a training step runs) and PyTorch's own kernel.
IMPLEMENTATION_CODES = {None: 0.0, "": 0.0, "fa2": 0.0, "trtllm_fmha": 1.0, "fa3": 2.0}


def condition_features(df: pd.DataFrame) -> pd.DataFrame:
    """`in_situ` and `impl_code` of every row (trace rows: 1 and 0)."""
    from maya_models.schema import IN_SITU_TIMINGS

    n = len(df)
    timing = df["timing"].tolist() if "timing" in df.columns else [None] * n
    impl = df["implementation"].tolist() if "implementation" in df.columns else [None] * n
    return pd.DataFrame({
        "in_situ": [1.0 if t is None or (isinstance(t, float) and math.isnan(t)) or t in IN_SITU_TIMINGS else 0.0
                    for t in timing],
        "impl_code": [IMPLEMENTATION_CODES.get(i if isinstance(i, str) else None, 0.0) for i in impl],
    }, index=df.index)


def featurize(df: pd.DataFrame, spec: GPUSpec) -> pd.DataFrame:
    """Numeric features of every row of `df` (op-signature columns, and the timing conditions when given)
    on `spec`; index preserved."""
    cols = df.columns
    get = {c: (df[c].tolist() if c in cols else [None] * len(df)) for c in
           ("op", "shapes", "dtypes", "strides", "args", "out_shapes", "out_dtypes")}
    rows = []
    for i in range(len(df)):
        op = str(get["op"][i])
        rows.append(_row_features(op, as_list(get["shapes"][i]), [str(d) for d in as_list(get["dtypes"][i])],
                                  as_list(get["strides"][i]), _args_json(get["args"][i]),
                                  as_list(get["out_shapes"][i]), [str(d) for d in as_list(get["out_dtypes"][i])],
                                  spec))
    out = pd.concat([pd.DataFrame(rows, index=df.index), condition_features(df)], axis=1)
    return out.astype(np.float64)


# -- collectives ------------------------------------------------------------------------------------

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send")


def row_collective(op: str, given=None) -> str:
    name = given if isinstance(given, str) and given else collective_name(op)
    return "send" if name == "recv" else name


def collective_columns(df: pd.DataFrame) -> pd.DataFrame:
    """collective, coll_bytes, group_size, nnodes, gpus_per_node, level for every row (defaults filled)."""
    n = len(df)
    ops = df["op"].astype(str).tolist()
    given = df["collective"].tolist() if "collective" in df.columns else [None] * n
    cb = df["coll_bytes"].tolist() if "coll_bytes" in df.columns else [None] * n
    gs = df["group_size"].tolist() if "group_size" in df.columns else [None] * n
    nn = df["nnodes"].tolist() if "nnodes" in df.columns else [None] * n
    gp = df["gpus_per_node"].tolist() if "gpus_per_node" in df.columns else [None] * n
    out = pd.DataFrame({
        "collective": [row_collective(o, c) for o, c in zip(ops, given, strict=True)],
        "coll_bytes": [as_number(v, 0.0) for v in cb],
        "group_size": [max(int(as_number(v, 1)), 1) for v in gs],
        "nnodes": [max(int(as_number(v, 1)), 1) for v in nn],
    }, index=df.index)
    # group members per node: traces may give the node's GPU count (8) for a 2-GPU group inside it;
    # measurements record the members, so take the smaller of the two
    out["gpus_per_node"] = [max(min(int(as_number(v, 1 << 30)), math.ceil(g / max(k, 1))), 1) for v, g, k in
                            zip(gp, out["group_size"], out["nnodes"], strict=True)]
    out.loc[out["collective"] == "send", "group_size"] = out.loc[out["collective"] == "send", "group_size"].clip(2)
    out["level"] = np.where(out["nnodes"] > 1, "inter", "intra")
    return out


def collective_features(df: pd.DataFrame, spec: GPUSpec) -> pd.DataFrame:
    """Numeric features of collective/p2p rows: size, group, topology, link and the analytic time."""
    c = collective_columns(df)
    rows = []
    for r in c.itertuples(index=False):
        bw, lat = group_link(spec, r.collective, r.group_size, r.nnodes)
        analytic = collective_time(r.collective, r.coll_bytes, r.group_size, r.nnodes, r.gpus_per_node, spec)
        rows.append({
            "coll_code": float(COLLECTIVES.index(r.collective)) if r.collective in COLLECTIVES else -1.0,
            "log_bytes": math.log2(r.coll_bytes + 1), "group_size": float(r.group_size), "nnodes": float(r.nnodes),
            "gpus_per_node": float(r.gpus_per_node), "steps": ring_steps(r.collective, r.group_size),
            "factor": ring_factor(r.collective, r.group_size),
            "log_wire_s": math.log10(ring_factor(r.collective, r.group_size) * r.coll_bytes / bw + 1e-9),
            "hw_link_bw": bw, "hw_link_latency": lat, "hw_nvlink": float(spec.nvlink_bandwidth > 0),
            "hw_sms": float(spec.sm_count), "hw_clock_mhz": float(spec.clock_mhz),
            "log_analytic": math.log10(analytic),
        })
    return pd.DataFrame(rows, index=df.index).astype(np.float64)
