"""Curate per-op GPU kernel times from public PyTorch-profiler (Kineto / Chrome trace) files.

    python -m maya_models.reference.kineto --root RAW --out DIR      # per-source files, for analysis
    python -m maya_models.reference.kineto --root RAW --reference warehouse/reference

RAW holds the traces at the manifest's `local` paths (`kineto_sources.json`: repository, commit,
path and license of each; bring them with a clone of each repository at its commit). With
`--reference`, the committed datasets are written: `kineto_in_situ.parquet` (the inference traces'
rows without a concurrent NCCL kernel, trained on) and `evaluation/kineto_in_training.parquet`
(the training traces' rows, `evaluation_only`: they check the in-training correction).

For every GPU kernel the script finds the runtime call that launched it (same correlation id),
the innermost CPU op enclosing that runtime call on the launching thread, lifts it to the op a
TorchDispatchMode (maya's recorder) sees (the outermost non-CompositeImplicitAutograd aten op of the
enclosing aten chain; `--level innermost` keeps the innermost op), and, when that op is an
`aten::` op with readable shapes, emits one row per ATen op *call*: the op in maya's canonical form,
shapes/dtypes/strides from the op's "Input Dims"/"Input type"/"Input Strides" (tensor inputs only, in
argument order, tensor lists flattened), the non-tensor arguments by schema name (from "Concrete
Inputs" when the trace has them, named with torch's operator schemas), duration_s = the summed GPU
duration of the kernels the call launched, the kernels' names, the training phase and whether an NCCL
kernel ran concurrently (`overlapped_comm`).

Outputs per source (name from the manifest):
    <out>/<name>.calls.parquet   one row per op call (measurement columns + in-situ extras)
    <out>/<name>.parquet         one row per (gpu, signature, overlapped_comm): median over calls,
                                 measurement schema + extras (timing, phase, overlapped_comm, ...)
    <out>/<name>.stats.json      rows kept / dropped with reasons, trace metadata
Everything dropped is counted by reason; nothing is synthesised.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from emulator.core.hardware import gpu_key_from_device_name
from emulator.core.ops import canonical_op, op_family
from maya_models.schema import MEASUREMENT_SCHEMA, MEASUREMENT_SCHEMA_VERSION, signature_key

US = 1e-6

# profiler "Input type" strings of tensors -> torch dtype names
DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "long": "int64", "int64_t": "int64", "int": "int32", "short int": "int16",
    "short": "int16", "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32", "unsigned short": "uint16", "unsigned int": "uint32",
}
# c10::ScalarType codes (Concrete Inputs of dtype arguments) -> torch dtype names
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                7: "float64", 8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 15: "bfloat16",
                23: "float8_e5m2", 24: "float8_e4m3fn", 25: "float8_e5m2fnuz", 26: "float8_e4m3fnuz"}
MEMORY_FORMATS = {0: "contiguous_format", 1: "preserve_format", 2: "channels_last", 3: "channels_last_3d"}
LAYOUTS = {0: "strided", 1: "sparse_coo"}

CPU_CATS = {"cpu_op", "user_annotation", "Operator"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
KERNEL_CATS = {"kernel", "Kernel"}
MEM_CATS = {"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"}
GRAPH_LAUNCH = {"cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch"}


def is_nccl(name: str) -> bool:
    n = name.lower()
    return "nccl" in n or "cross_device_reduce" in n


def load_trace(path: Path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        d = json.load(f)
    if isinstance(d, list):
        d = {"traceEvents": d}
    return d


# --------------------------------------------------------------------------------------------
# schema lookup (names of non-tensor arguments)

_SCHEMAS: dict[str, list] = {}


def _schemas(op: str):
    if op not in _SCHEMAS:
        try:
            import torch

            _SCHEMAS[op] = list(torch._C._jit_get_schemas_for_operator(op))
        except Exception:  # torch missing or unknown op
            _SCHEMAS[op] = []
    return _SCHEMAS[op]


def _rec_kind(t: str) -> str:
    if t in DTYPES:
        return "tensor"
    if t == "TensorList":
        return "list"
    if t == "":
        return "none"
    return "scalar"  # Scalar, ScalarList, GenericList, Device, ...


def _sch_kind(typ: str) -> str:
    if typ == "Tensor":
        return "T"
    if typ == "Optional[Tensor]":
        return "OT"
    if typ in ("List[Tensor]", "List[Optional[Tensor]]"):
        return "L"
    return "N"


def resolve_schema(op: str, types: list[str]):
    """The overload of `op` whose argument list best matches the recorded input types (or None)."""
    best, best_score = None, -1e9
    for s in _schemas(op):
        args = s.arguments
        if len(args) != len(types):
            continue
        score = 0.0
        for a, t in zip(args, types, strict=False):
            rk, sk = _rec_kind(t), _sch_kind(str(a.type))
            if rk == "tensor":
                score += 2 if sk in ("T", "OT") else -100
            elif rk == "list":
                score += 2 if sk == "L" else -100
            elif rk == "none":
                score += 1 if sk in ("OT", "N") else (0 if sk == "L" else -5)
            else:  # scalar
                score += 1 if sk == "N" else (0 if sk == "T" else -100)  # T: wrapped python number
        if any(a.is_out for a in args):
            score -= 0.5
        if score > best_score:
            best, best_score = s, score
    return best if best_score > -50 else None


def _parse_value(raw: str, typ: str, name: str):
    """A Concrete Inputs string as the JSON value the emulator would record."""
    if raw == "" or raw is None:
        return None
    t = typ.removeprefix("Optional[").removesuffix("]") if typ.startswith("Optional[") else typ
    try:
        if t == "bool":
            return raw == "True"
        if t in ("int", "SymInt"):
            v = int(raw)
            if "dtype" in name:
                return SCALAR_TYPES.get(v, v)
            if name == "memory_format":
                return MEMORY_FORMATS.get(v, v)
            if name == "layout":
                return LAYOUTS.get(v, v)
            return v
        if t == "float":
            return float(raw)
        if t in ("number", "Scalar"):
            if raw in ("True", "False"):
                return raw == "True"
            return int(raw) if re.fullmatch(r"-?\d+", raw) else float(raw)
        if t.startswith("List[") or t.endswith("[]"):
            return json.loads(raw.replace("(", "[").replace(")", "]"))
        if t == "Device":
            return raw.split(":")[0]
        if t == "str":
            return raw
        return raw
    except (ValueError, json.JSONDecodeError):
        return raw


def _eq_default(value, default) -> bool:
    try:
        return value == default
    except Exception:
        return False


_OPAQUE = re.compile(r"CatArrayBatchedCopy\w*<[^<>]*OpaqueType<(\d+)u?>")
_TEMPLATE_T = re.compile(r"CatArrayBatchedCopy\w*<([^,<>]+),")
_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
          "uint8": 1, "bool": 1}


def list_dtype_from_kernels(kernel_names: list[str], dtype_by_size: dict[int, str]) -> str | None:
    """Element dtype of a cat's tensor list from its CatArrayBatchedCopy kernel: the template type, or for
    OpaqueType<N> (N bytes) the trace's most common tensor dtype of that size."""
    for k in kernel_names:
        m = _OPAQUE.search(k)
        if m:
            return dtype_by_size.get(int(m.group(1)))
        m = _TEMPLATE_T.search(k)
        if m and m.group(1).strip() in DTYPES:
            return DTYPES[m.group(1).strip()]
    return None


def signature_of(e: dict, list_dtype=None):
    """((op, shapes, dtypes, strides, args_dict, args_known, dtype_inferred), None) of one cpu_op event,
    or (None, reason) when its signature is unreadable."""
    a = e.get("args", {})
    op = canonical_op(e["name"])
    dims, types = a.get("Input Dims"), a.get("Input type")
    if dims is None or types is None:
        return None, "no Input Dims (record_shapes off)"
    strides_in = a.get("Input Strides")
    concrete = a.get("Concrete Inputs")
    shapes, dtypes, strides = [], [], []
    has_strides = strides_in is not None
    list_lengths = []
    for i, t in enumerate(types):
        k = _rec_kind(t)
        d = dims[i] if i < len(dims) else []
        st = strides_in[i] if has_strides and i < len(strides_in) else None
        if k == "tensor":
            shapes.append([int(x) for x in d])
            dtypes.append(DTYPES[t])
            strides.append([int(x) for x in st] if isinstance(st, list) else None)
        elif k == "list":
            if not d or not isinstance(d[0], list):
                if d == [] and has_strides:  # an empty list is readable
                    list_lengths.append(0)
                    continue
                return None, "tensor-list shapes not recorded"
            list_lengths.append(len(d))
            for j, sub in enumerate(d):
                shapes.append([int(x) for x in sub])
                dtypes.append(None)  # element dtypes are not recorded for lists
                s2 = st[j] if isinstance(st, list) and j < len(st) else None
                strides.append([int(x) for x in s2] if isinstance(s2, list) else None)
    if any(s is None for s in strides):
        strides_out = None if all(s is None for s in strides) else [s if s is not None else [] for s in strides]
    else:
        strides_out = strides
    if not has_strides:
        strides_out = None
    # non-tensor arguments by schema name
    sch = resolve_schema(op, list(types))
    args: dict = {}
    args_known = False
    if sch is not None and concrete is not None and len(concrete) == len(types):
        args_known = True
        vals = []  # (name, value, has_default, default, kwarg_only, is_tensor)
        for arg, t, raw in zip(sch.arguments, types, concrete, strict=False):
            rk, _sk = _rec_kind(t), _sch_kind(str(arg.type))
            hd = arg.has_default_value()
            dv = arg.default_value if hd else None
            if rk in ("tensor", "list"):
                vals.append((arg.name, None, False, None, arg.kwarg_only, True))
            else:
                v = _parse_value(raw, str(arg.type), arg.name) if rk != "none" else None
                vals.append((arg.name, v, hd, dv, arg.kwarg_only, False))
        # the dispatcher passes to Python neither trailing positional defaults nor kwarg-only defaults
        pos = [x for x in vals if not x[4]]
        last = -1
        for idx, x in enumerate(pos):
            if x[5] or not x[2] or not _eq_default(x[1], x[3]):
                last = idx
        for x in pos[: last + 1]:
            if not x[5]:
                args[x[0]] = x[1]
        for x in vals:
            if x[4] and not x[5] and not (x[2] and _eq_default(x[1], x[3])):
                args[x[0]] = x[1]
    if list_lengths:
        args["list_lengths"] = list_lengths
    inferred = False
    if list_lengths and any(d is None for d in dtypes):
        # element dtypes of lists are not in the trace; take the op's other tensors' dtype if unique
        known = {d for d in dtypes if d is not None}
        if len(known) == 1:
            dtypes = [d or next(iter(known)) for d in dtypes]
        elif not known and list_dtype is not None:
            dtypes = [list_dtype] * len(dtypes)
            inferred = True
        else:
            return None, "tensor-list element dtypes not recorded"
    return (op, shapes, dtypes, strides_out, args, args_known, inferred), None


def _meta_value(raw, arg):
    """A Concrete Inputs string as the Python value the op takes on the meta device (dtype, memory format and
    layout arguments as torch objects)."""
    import torch

    v = _parse_value(raw, str(arg.type), arg.name)
    if isinstance(v, str) and ("dtype" in arg.name or arg.name in ("memory_format", "layout")):
        return getattr(torch, v)
    return v


def infer_outputs(e: dict, shapes: list, dtypes: list, strides) -> tuple[list, list] | None:
    """(out_shapes, out_dtypes) of one cpu_op call, or None where they cannot be known.

    A trace records an op's inputs only, but the bytes its kernels move include the outputs: a row without
    them tells the predictor an elementwise kernel moved half or two thirds of what it did, and so ran at
    that fraction of its real bandwidth. The op's resolved overload is run on meta tensors of the recorded
    inputs (non-tensor arguments from "Concrete Inputs", defaults where the trace has none)."""
    import torch

    a = e.get("args", {})
    types, dims, concrete = a.get("Input type") or [], a.get("Input Dims") or [], a.get("Concrete Inputs")
    sch = resolve_schema(canonical_op(e["name"]), list(types))
    if sch is None:
        return None
    name, overload = sch.name.split("::")[-1], sch.overload_name or "default"
    fn = getattr(getattr(torch.ops.aten, name, None), overload, None)
    if fn is None:
        return None
    tensors = iter(range(len(shapes)))

    def meta(j):
        st = strides[j] if strides and strides[j] else None
        shape, dtype = shapes[j], getattr(torch, dtypes[j])
        if st is not None and len(st) == len(shape):
            return torch.empty_strided(shape, st, dtype=dtype, device="meta")
        return torch.empty(shape, dtype=dtype, device="meta")

    pos, kw = [], {}
    try:
        for i, (arg, t) in enumerate(zip(sch.arguments, types, strict=True)):
            kind = _rec_kind(t)
            if kind == "tensor":
                v = meta(next(tensors))
            elif kind == "list":
                v = [meta(next(tensors)) for _ in dims[i]]
            elif kind == "none":  # an absent optional, or a value the profiler did not record (a str)
                if arg.has_default_value() and not str(arg.type).startswith("Optional["):
                    continue
                v = None
            elif arg.name == "device":  # whatever the trace's device, the op runs on meta tensors
                v = "meta"
            elif concrete is not None and i < len(concrete) and concrete[i] not in ("", None):
                v = _meta_value(concrete[i], arg)
            elif arg.has_default_value():
                continue
            else:
                return None
            if arg.kwarg_only:
                kw[arg.name] = v
            else:
                pos.append(v)
        out = fn(*pos, **kw)
    except Exception:  # an op meta tensors cannot run, or arguments the trace recorded unreadably
        return None
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
    if not outs:
        return None
    return [list(o.shape) for o in outs], [str(o.dtype).removeprefix("torch.") for o in outs]


# --------------------------------------------------------------------------------------------
# interval helpers


def merge_intervals(iv):
    iv = sorted(iv)
    out = []
    for s, e in iv:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap_len(merged, starts, s, e) -> float:
    """Length of [s, e] covered by the merged, sorted intervals."""
    i = max(bisect.bisect_right(starts, s) - 1, 0)
    tot = 0.0
    while i < len(merged) and merged[i][0] < e:
        a, b = merged[i]
        lo, hi = max(a, s), min(b, e)
        if hi > lo:
            tot += hi - lo
        i += 1
    return tot


# --------------------------------------------------------------------------------------------


_CI: dict = {}
_CUSTOM_OP = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_.]*$")


def is_composite_implicit(e: dict) -> bool:
    """True when the op decomposes above the dispatcher's Python key (CompositeImplicitAutograd):
    a TorchDispatchMode (maya's recorder) never sees it, only the ops it calls."""
    op = canonical_op(e["name"])
    types = tuple((e.get("args") or {}).get("Input type") or ())
    key = (op, types)
    if key not in _CI:
        try:
            import torch

            has = torch._C._dispatch_has_kernel_for_dispatch_key
            sch = resolve_schema(op, list(types)) if types else None
            if sch is not None:
                full = f"{op}.{sch.overload_name}" if sch.overload_name else op
                _CI[key] = bool(has(full, "CompositeImplicitAutograd"))
            else:
                names = [f"{op}.{s.overload_name}" if s.overload_name else op for s in _schemas(op)]
                _CI[key] = bool(names) and all(has(n, "CompositeImplicitAutograd") for n in names)
        except Exception:
            _CI[key] = False
    return _CI[key]


def dispatch_level(cpu: list, parent: dict, ci: int) -> int:
    """The op a TorchDispatchMode records for a kernel launched inside cpu[ci]: the outermost
    non-CompositeImplicitAutograd `aten::` op of the unbroken chain of aten ops enclosing it."""
    if not cpu[ci]["name"].startswith("aten::") or cpu[ci].get("cat") == "user_annotation":
        return ci
    best, p = ci, parent.get(ci)
    while p is not None and cpu[p]["name"].startswith("aten::") and cpu[p].get("cat") != "user_annotation":
        if not is_composite_implicit(cpu[p]):
            best = p
        p = parent.get(p)
    if p is not None and cpu[p].get("cat") != "user_annotation" and _CUSTOM_OP.match(cpu[p]["name"]) \
            and not cpu[p]["name"].startswith(("autograd::", "torch::", "aten::")):
        return p  # an ATen call inside a custom dispatcher op (fbgemm::, c10d::): the recorder sees the outer op
    return best


def phase_of(chain: list[str], timing: str) -> str:
    """forward | backward | optimizer | zero_grad | other from the names of the enclosing events."""
    for n in chain:
        if n.startswith("autograd::engine::evaluate_function") or re.match(r"^[A-Za-z0-9_]+Backward\d*$", n) \
                or n == "## backward ##":
            return "backward"
    for n in chain:
        if n.startswith("Optimizer.step#") or n == "## optimizer ##":
            return "optimizer"
        if n.startswith("Optimizer.zero_grad#") or n == "## zero_grad ##":
            return "zero_grad"
    if timing == "in_inference":
        return "forward"
    for n in chain:
        if n.startswith("## forward") or n.endswith(".forward") or n.startswith("nn.Module:") \
                or n == "## forward ##":
            return "forward"
    return "other"


def extract(trace: dict, timing: str, level: str = "dispatch"):
    """(rows, stats) of one trace: one row per ATen op call that launched at least one kernel."""
    ev = [e for e in trace.get("traceEvents", []) if isinstance(e, dict)]
    drops = collections.Counter()
    kdrops = collections.Counter()
    devprops = {int(p.get("id", i)): p for i, p in enumerate(trace.get("deviceProperties", []) or [])}

    cpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in CPU_CATS]
    rt = [e for e in ev if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS]
    kern = [e for e in ev if e.get("ph") == "X" and e.get("cat") in KERNEL_CATS]
    mem = [e for e in ev if e.get("ph") == "X" and e.get("cat") in MEM_CATS]

    # nesting of CPU events per thread; runtime events are leaves
    parent = {}
    innermost = {}  # runtime event index -> cpu index
    by_thread = collections.defaultdict(list)
    for i, e in enumerate(cpu):
        by_thread[(e.get("pid"), e.get("tid"))].append(("c", i, float(e["ts"]), float(e.get("dur", 0))))
    for j, e in enumerate(rt):
        by_thread[(e.get("pid"), e.get("tid"))].append(("r", j, float(e["ts"]), float(e.get("dur", 0))))
    for items in by_thread.values():
        items.sort(key=lambda x: (x[2], 0 if x[0] == "c" else 1, -x[3]))
        stack = []  # (cpu index, end)
        for kind, idx, ts, dur in items:
            while stack and stack[-1][1] <= ts:
                stack.pop()
            top = stack[-1][0] if stack else None
            if kind == "c":
                parent[idx] = top
                stack.append((idx, ts + dur))
            else:
                innermost[idx] = top

    def chain(ci):
        out = []
        while ci is not None:
            out.append(cpu[ci]["name"])
            ci = parent.get(ci)
        return out

    rt_by_corr = {}
    for j, e in enumerate(rt):
        c = e.get("args", {}).get("correlation")
        if c is not None:
            rt_by_corr[c] = j

    # NCCL kernel intervals, and per-stream compute intervals
    nccl_iv = [(float(k["ts"]), float(k["ts"]) + float(k.get("dur", 0))) for k in kern if is_nccl(k["name"])]
    nccl_m = merge_intervals(nccl_iv)
    nccl_starts = [a for a, _ in nccl_m]
    stream_iv = collections.defaultdict(list)
    for k in kern:
        if not is_nccl(k["name"]):
            stream_iv[k.get("args", {}).get("stream")].append((float(k["ts"]), float(k["ts"]) + float(k.get("dur", 0))))
    other_stream = {}
    for s in stream_iv:
        iv = merge_intervals([x for s2, v in stream_iv.items() if s2 != s for x in v])
        other_stream[s] = (iv, [a for a, _ in iv])

    # group kernels by launching cpu op
    per_op = collections.defaultdict(list)
    launch_ops = collections.defaultdict(collections.Counter)
    mem_per_op = collections.defaultdict(float)
    for k in kern:
        a = k.get("args", {})
        j = rt_by_corr.get(a.get("correlation"))
        if j is None:
            kdrops["no runtime event with the kernel's correlation id"] += 1
            continue
        if rt[j]["name"] in GRAPH_LAUNCH:
            kdrops["launched by a CUDA-graph replay (cudaGraphLaunch)"] += 1
            continue
        ci = innermost.get(j)
        if ci is None:
            kdrops["runtime call not enclosed by any CPU op"] += 1
            continue
        top = dispatch_level(cpu, parent, ci) if level == "dispatch" else ci
        per_op[top].append(k)
        launch_ops[top][cpu[ci]["name"]] += 1
    for m in mem:
        j = rt_by_corr.get(m.get("args", {}).get("correlation"))
        ci = innermost.get(j) if j is not None else None
        if ci is not None:
            top = dispatch_level(cpu, parent, ci) if level == "dispatch" else ci
            mem_per_op[top] += float(m.get("dur", 0))

    # the trace's most common tensor dtype per element size (to read OpaqueType<N> kernels)
    size_counts = collections.defaultdict(collections.Counter)
    for e in cpu:
        for t in (e.get("args") or {}).get("Input type") or ():
            d = DTYPES.get(t)
            if d in _BYTES:
                size_counts[_BYTES[d]][d] += 1
    dtype_by_size = {n: c.most_common(1)[0][0] for n, c in size_counts.items()}

    rows = []
    for ci, ks in per_op.items():
        e = cpu[ci]
        name = e["name"]
        nk = len(ks)
        if e.get("cat") == "user_annotation" or not name.startswith("aten::"):
            if all(is_nccl(k["name"]) for k in ks):
                why = "NCCL kernel (collective, launched outside an ATen op)"
            else:
                ns = name.split("::")[0] if "::" in name else ("annotation" if e.get("cat") == "user_annotation"
                                                               else name.split(" ")[0][:40])
                why = f"launched inside a non-ATen op ({ns})"
            drops[why] += 1
            kdrops[why] += nk
            continue
        if any(is_nccl(k["name"]) for k in ks):
            drops["NCCL kernel under an ATen op"] += 1
            kdrops["NCCL kernel under an ATen op"] += nk
            continue
        sig, why = signature_of(e, list_dtype_from_kernels([k["name"] for k in ks], dtype_by_size))
        if sig is None:
            drops[why] += 1
            kdrops[why] += nk
            continue
        op, shapes, dtypes, strides, args, args_known, dtype_inferred = sig
        devs = {k.get("args", {}).get("device") for k in ks}
        dev = next(iter(devs)) if len(devs) == 1 else None
        props = devprops.get(int(dev)) if dev is not None else None
        if props is None and len(devprops) >= 1:
            names = {p.get("name") for p in devprops.values()}
            props = next(iter(devprops.values())) if len(names) == 1 else None
        if props is None:
            drops["GPU not named in the trace (no deviceProperties)"] += 1
            kdrops["GPU not named in the trace (no deviceProperties)"] += nk
            continue
        outputs = infer_outputs(e, shapes, dtypes, strides)
        if outputs is None:
            why = "output shapes not inferable (the op does not run on meta tensors of its recorded inputs)"
            drops[why] += 1
            kdrops[why] += nk
            continue
        ks.sort(key=lambda k: float(k["ts"]))
        dur = sum(float(k.get("dur", 0)) for k in ks)
        ov = 0.0
        ovo = 0.0
        for k in ks:
            s, t = float(k["ts"]), float(k["ts"]) + float(k.get("dur", 0))
            ov += overlap_len(nccl_m, nccl_starts, s, t)
            o = other_stream.get(k.get("args", {}).get("stream"))
            if o:
                ovo += overlap_len(o[0], o[1], s, t)
        ch = chain(ci)
        step = next((n for n in ch if n.startswith("ProfilerStep#")), None)
        rows.append({
            "op": op, "shapes": shapes, "dtypes": dtypes, "strides": strides, "args_dict": args,
            "out_shapes": outputs[0], "out_dtypes": outputs[1],
            "args_known": args_known, "dtype_inferred": dtype_inferred, "duration_us": dur, "n_kernels": nk,
            "kernel_names": [k["name"] for k in ks],
            "streams": sorted({int(k.get("args", {}).get("stream", -1)) for k in ks}),
            "gpu_start_us": float(ks[0]["ts"]), "gpu_end_us": max(float(k["ts"]) + float(k.get("dur", 0)) for k in ks),
            "memcpy_memset_us": mem_per_op.get(ci, 0.0),
            "overlapped_comm": ov > 0, "comm_overlap_frac": (ov / dur) if dur > 0 else 0.0,
            "overlapped_other_stream": ovo > 0,
            "phase": phase_of(ch, timing), "profiler_step": step, "cpu_tid": str(e.get("tid")),
            "device_name": props.get("name"), "device_mem": props.get("totalGlobalMem"),
            "external_id": e.get("args", {}).get("External id"),
            "launch_ops": json.dumps(dict(launch_ops[ci]), sort_keys=True),
        })
    stats = {
        "events": len(ev), "cpu_ops": len(cpu), "runtime_events": len(rt), "kernels": len(kern),
        "nccl_kernels": len(nccl_iv), "op_calls_with_kernels": len(per_op), "rows": len(rows),
        "kernels_in_rows": int(sum(r["n_kernels"] for r in rows)),
        "dropped_op_calls": dict(drops), "dropped_kernels": dict(kdrops),
        "kernel_us_total": float(sum(float(k.get("dur", 0)) for k in kern)),
        "kernel_us_in_rows": float(sum(r["duration_us"] for r in rows)),
    }
    return rows, stats


def gpu_key(device_name: str, mem_bytes) -> str | None:
    key = gpu_key_from_device_name(device_name or "")
    # Meta's OCP A100 modules ("A100-PG509-200") report 40 GB: the generic "a100" rule says 80 GB
    if key == "a100-80gb" and mem_bytes and float(mem_bytes) < 60e9:
        key = "a100-40gb"
    return key


def software_of(trace: dict) -> str | None:
    parts = []
    md = trace.get("metadata") or {}
    for p in (md.get("system", {}) or {}).get("pip_packages", []) if isinstance(md, dict) else []:
        if isinstance(p, str) and p.startswith("torch=="):
            parts.append(p.replace("==", " "))
    if trace.get("cuda_runtime_version"):
        v = int(trace["cuda_runtime_version"])
        parts.append(f"CUDA runtime {v // 1000}.{(v % 1000) // 10}")
    di = trace.get("distributedInfo") or {}
    if di.get("nccl_version"):
        parts.append(f"NCCL {di['nccl_version']}")
    return " / ".join(parts) or None


def to_frame(rows, src: dict, trace: dict, stats: dict) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["args"] = [json.dumps(a, sort_keys=True) for a in df.pop("args_dict")]
    df["kind"] = "kernel"
    df["family"] = [op_family(o) for o in df["op"]]
    df["duration_s"] = df["duration_us"] * US
    df["status"] = "ok"
    df["gpu"] = [gpu_key(n, m) for n, m in zip(df["device_name"], df["device_mem"], strict=False)]
    df["source"] = src["source"]
    df["run_id"] = f"insitu-{src['name']}"
    df["timing"] = src["timing"]
    df["software"] = software_of(trace)
    df["signature"] = [signature_key(o, s, d, st, a) for o, s, d, st, a in
                       zip(df["op"], df["shapes"], df["dtypes"], df["strides"], df["args"], strict=False)]
    df["provenance"] = (f"{src['repo']}@{src['commit']}:{src['path']} ({src['detail']}; Kineto per-op sum "
                        f"of kernel durations)")
    df["schema_version"] = MEASUREMENT_SCHEMA_VERSION
    df["repeats"] = 1
    return df


EXTRA = ["timing", "phase", "overlapped_comm", "comm_overlap_frac", "overlapped_other_stream", "n_kernels",
         "kernel_names", "memcpy_memset_us", "args_known", "dtype_inferred", "profiler_step", "cpu_tid", "streams",
         "gpu_start_us", "gpu_end_us", "external_id", "launch_ops"]


def measurement_table(df: pd.DataFrame, extra: list[str]) -> pa.Table:
    cols, fields = [], []
    for f in MEASUREMENT_SCHEMA:
        if f.name in df:
            col = pa.array(df[f.name].tolist(), type=f.type, from_pandas=True)
        else:
            col = pa.nulls(len(df), f.type)
        cols.append(col)
        fields.append(f)
    for name in extra:
        if name not in df or name in MEASUREMENT_SCHEMA.names:
            continue
        col = pa.array(df[name].tolist(), from_pandas=True)
        cols.append(col)
        fields.append(pa.field(name, col.type))
    t = pa.Table.from_arrays(cols, schema=pa.schema(fields))
    for f in MEASUREMENT_SCHEMA:
        if not f.nullable and t.column(f.name).null_count:
            raise ValueError(f"column {f.name} has nulls")
    return t


def aggregate(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (gpu, signature, overlapped_comm): median over the op calls (repeats)."""
    out = []
    for (_g, _s, _o), grp in df.groupby(["gpu", "signature", "overlapped_comm"], sort=False):
        d = grp["duration_s"].to_numpy()
        first = grp.iloc[0].to_dict()
        med = float(np.median(d))
        first.update({
            "duration_s": med, "duration_min_s": float(d.min()), "repeats": int(len(d)),
            "spread": float((np.percentile(d, 90) - np.percentile(d, 10)) / med) if med > 0 and len(d) > 1 else 0.0,
            "phase": grp["phase"].mode().iloc[0],
            "kernel_names": list(collections.Counter(tuple(k) for k in grp["kernel_names"]).most_common(1)[0][0]),
            "comm_overlap_frac": float(grp["comm_overlap_frac"].median()),
            "overlapped_other_stream": bool(grp["overlapped_other_stream"].any()),
            "n_kernels": int(grp["n_kernels"].median()),
            "memcpy_memset_us": float(grp["memcpy_memset_us"].median()),
            "phases": json.dumps(dict(collections.Counter(grp["phase"]))),
        })
        out.append(first)
    return pd.DataFrame(out)


def run_source(src: dict, root: Path, out: Path, level: str = "dispatch") -> dict:
    trace = load_trace(root / src["local"])
    rows, stats = extract(trace, src["timing"], level)
    stats["level"] = level
    df = to_frame(rows, src, trace, stats)
    stats["name"] = src["name"]
    if df.empty:
        stats["gpus"] = {}
        print(f"{src['name']}: 0 rows; dropped {stats['dropped_op_calls']}")
        return stats
    unknown = df["gpu"].isna()
    if unknown.any():
        stats["dropped_op_calls"]["GPU not in maya's table"] = int(unknown.sum())
        df = df[~unknown]
    stats["rows"] = int(len(df))
    stats["gpus"] = {k: int(v) for k, v in df["gpu"].value_counts().items()}
    stats["device_names"] = sorted(set(df["device_name"]))
    stats["families"] = {k: int(v) for k, v in df["family"].value_counts().items()}
    stats["phases"] = {k: int(v) for k, v in df["phase"].value_counts().items()}
    stats["overlapped_comm_rows"] = int(df["overlapped_comm"].sum())
    stats["software"] = software_of(trace)
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(measurement_table(df, EXTRA), out / f"{src['name']}.calls.parquet", compression="zstd")
    agg = aggregate(df)
    stats["signatures"] = int(len(agg))
    per_call = {"profiler_step", "cpu_tid", "gpu_start_us", "gpu_end_us", "external_id"}
    pq.write_table(measurement_table(agg, [c for c in EXTRA if c not in per_call] + ["phases"]),
                   out / f"{src['name']}.parquet", compression="zstd")
    (out / f"{src['name']}.stats.json").write_text(json.dumps(stats, indent=1, sort_keys=True))
    print(f"{src['name']}: {len(df)} calls -> {len(agg)} signatures; gpus {stats['gpus']}; "
          f"dropped {sum(stats['dropped_op_calls'].values())} op calls")
    return stats


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--manifest", type=Path, default=Path(__file__).with_name("kineto_sources.json"))
    p.add_argument("--root", type=Path, required=True, help="folder the manifest's `local` paths are under")
    p.add_argument("--out", type=Path, default=Path("kineto-out"), help="per-source files (calls, stats)")
    p.add_argument("--reference", type=Path, help="also write the committed datasets into this folder")
    p.add_argument("--only", nargs="*")
    p.add_argument("--level", choices=["dispatch", "innermost"], default="dispatch",
                   help="row per dispatch-level op (what maya's recorder sees; default) or per innermost "
                        "launching aten op")
    a = p.parse_args(argv)
    sources = json.loads(a.manifest.read_text())
    allstats = {}
    for src in sources:
        if a.only and src["name"] not in a.only:
            continue
        allstats[src["name"]] = run_source(src, a.root, a.out, a.level)
    (a.out / "all_stats.json").write_text(json.dumps(allstats, indent=1, sort_keys=True))
    if a.reference:
        write_reference(a.out, sources, a.reference)


def write_reference(per_source: Path, sources: list[dict], reference: Path) -> dict[str, int]:
    """The committed datasets from the per-source aggregates: inference rows to train on, training rows to
    evaluate with (measurement schema only)."""
    from maya_models.warehouse import to_measurement_table

    frames: dict[str, list] = {"kineto_in_situ": [], "evaluation/kineto_in_training": []}
    for src in sources:
        path = per_source / f"{src['name']}.parquet"
        if not path.exists():
            continue
        df = pq.read_table(path).to_pandas()
        if src["timing"] == "in_training":
            df["evaluation_only"] = True
            frames["evaluation/kineto_in_training"].append(df)
        else:
            frames["kineto_in_situ"].append(df[~df["overlapped_comm"].astype(bool)])
    counts = {}
    for name, parts in frames.items():
        if not parts:
            continue
        df = pd.concat(parts, ignore_index=True)
        df = df[[c for c in df.columns if c in {f.name for f in MEASUREMENT_SCHEMA}]]
        target = reference / f"{name}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        pq.write_table(to_measurement_table(df), tmp, compression="zstd", compression_level=19)
        tmp.replace(target)
        counts[name] = len(df)
        print(f"{target}: {len(df)} rows")
    return counts


if __name__ == "__main__":
    sys.exit(main())
