"""The op signature shared by traces and measurements, and the work each op does.

An op signature is the tuple of trace columns `(op, shapes, dtypes, strides, args)`
(plus `out_shapes`/`out_dtypes` when known). The emulator records it for every device op;
the benchmark runners and the reference import write measurements in exactly the same
columns, so `maya_models.features` computes features with one function for both.

Conventions (a contract; keep them stable):
- `op` is the ATen/c10d overload packet name with a `::` separator: `aten::mm`,
  `aten::_scaled_dot_product_flash_attention_backward`, `c10d::allreduce_`. Overload suffixes
  (`.default`, `.Tensor`) are dropped.
- `shapes`/`dtypes`/`strides` list every tensor input in argument order, tensors inside lists
  flattened in place (foreach ops, `cat`). dtype names are torch's without the `torch.` prefix
  (`bfloat16`, `float32`).
- `args` is a JSON object of the non-tensor arguments by schema name (`{"is_causal": true}`);
  for ops with tensor lists it also holds `"list_lengths"`.
- A GEMM `y[m,n] = x[m,k] @ W[n,k]^T` (an `nn.Linear` forward) is `aten::mm` with shapes
  `[[m,k],[k,n]]` and strides `[[k,1],[1,k]]`: the transpose is visible only in the strides.
- Collective sizes (`coll_bytes`) follow nccl-tests: all_reduce and broadcast the buffer,
  all_gather the gathered output, reduce_scatter the pre-scatter input, all_to_all the send
  buffer, send/recv the message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "float32": 4, "float": 4, "tf32": 4, "bfloat16": 2, "float16": 2, "half": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "int64": 8,
    "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
}

# Ops that launch no kernel: metadata-only views and allocation without initialisation.
VIEW_OPS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::as_strided", "aten::alias", "aten::detach",
    "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::split",
    "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::narrow", "aten::view_as",
    "aten::_reshape_alias", "aten::lift_fresh", "aten::empty", "aten::empty_strided",
    "aten::empty_like", "aten::new_empty", "aten::new_empty_strided", "aten::resize_",
    "aten::set_", "aten::_local_scalar_dense", "aten::is_same_size", "aten::unflatten",
    "aten::flatten", "aten::diagonal", "aten::real", "aten::view_as_real", "aten::view_as_complex",
    "aten::_has_compatible_shallow_copy_type", "aten::is_pinned", "aten::sym_size",
    "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset", "aten::record_stream",
    "prim::device", "aten::_to_copy_view", "aten::unsafe_split", "aten::expand_as",
    "aten::_nested_tensor_from_mask_left_aligned",
})

GEMM_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::matmul",
    "aten::_scaled_mm", "aten::mv", "aten::addmv", "aten::dot", "aten::linear", "aten::_addmm_activation",
})
ATTENTION_FWD_OPS = frozenset({
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward", "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
})
ATTENTION_BWD_OPS = frozenset(op + "_backward" for op in ATTENTION_FWD_OPS)
NORM_OPS = frozenset({
    "aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::_fused_rms_norm",
    "aten::_fused_rms_norm_backward", "aten::rms_norm", "aten::native_batch_norm",
    "aten::native_batch_norm_backward", "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_functional", "aten::native_group_norm",
    "aten::native_group_norm_backward", "aten::cudnn_batch_norm", "aten::cudnn_batch_norm_backward",
})
SOFTMAX_LOSS_OPS = frozenset({
    "aten::_softmax", "aten::_softmax_backward_data", "aten::_log_softmax",
    "aten::_log_softmax_backward_data", "aten::nll_loss_forward", "aten::nll_loss_backward",
    "aten::nll_loss2d_forward", "aten::nll_loss2d_backward", "aten::_safe_softmax",
    "aten::cross_entropy_loss", "aten::mse_loss", "aten::mse_loss_backward",
    "aten::_masked_softmax", "aten::_masked_softmax_backward",
})
NLL_LOSS_FORWARD = frozenset({"aten::nll_loss_forward", "aten::nll_loss2d_forward"})
NLL_LOSS_BACKWARD = frozenset({"aten::nll_loss_backward", "aten::nll_loss2d_backward"})
EMBEDDING_OPS = frozenset({
    "aten::embedding", "aten::embedding_dense_backward", "aten::embedding_backward",
    "aten::index_select", "aten::_embedding_bag", "aten::_embedding_bag_backward",
})
# copies that move data between host and device when their operands live on different sides (memcpy rows)
HOST_DEVICE_COPY_OPS = frozenset({"aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"})
COPY_OPS = frozenset({
    "aten::_to_copy", "aten::copy_", "aten::clone", "aten::contiguous", "aten::cat",
    "aten::stack", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::index",
    "aten::index_put_", "aten::_index_put_impl_", "aten::constant_pad_nd", "aten::gather",
    "aten::scatter", "aten::scatter_add", "aten::scatter_add_", "aten::split_with_sizes_copy",
    "aten::narrow_copy", "aten::repeat", "aten::masked_select", "aten::nonzero",
    "aten::slice_backward", "aten::select_backward", "aten::_unsafe_index",
})
# FSDP2's custom ops: copies between the sharded parameters and the all-gather / reduce-scatter buffers
FSDP_COPY_OPS = frozenset({"fsdp::all_gather_copy_in", "fsdp::split_with_sizes_copy", "fsdp::chunk_cat"})
MEMSET_OPS = frozenset({"aten::zero_", "aten::fill_", "aten::zeros", "aten::ones", "aten::full",
                        "aten::zeros_like", "aten::ones_like", "aten::full_like", "aten::new_zeros",
                        "aten::new_ones", "aten::new_full", "aten::scalar_tensor"})
CONV_OPS = frozenset({"aten::convolution", "aten::convolution_backward", "aten::cudnn_convolution",
                      "aten::_convolution", "aten::conv2d", "aten::conv1d"})

FAMILIES = ("gemm", "attention_fwd", "attention_bwd", "conv", "norm", "softmax_loss", "embedding",
            "optimizer", "copy", "memset", "elementwise", "generated", "collective", "p2p", "memcpy", "other")


def canonical_op(name: str) -> str:
    """`aten.mm.default` / `aten::mm.default` / `torch.ops.aten.mm` -> `aten::mm`."""
    n = name.removeprefix("torch.ops.")
    if "::" in n:
        ns, rest = n.split("::", 1)
        base = rest.split(".", 1)[0]
    else:
        parts = n.split(".")
        ns, base = parts[0], (parts[1] if len(parts) > 1 else "")
    return f"{ns}::{base}"


def op_family(op: str) -> str:
    """Predictor family of an op (the grouping the kernel predictors are trained per)."""
    if op.startswith(("c10d::", "_c10d_functional::", "c10d_functional::")):
        if any(s in op for s in ("send", "recv")):
            return "p2p"
        return "collective"
    if op in GEMM_OPS:
        return "gemm"
    if op in ATTENTION_FWD_OPS or op in ("aten::flex_attention",):
        return "attention_fwd"
    if op in ATTENTION_BWD_OPS or op in ("aten::flex_attention_backward",):
        return "attention_bwd"
    if op in CONV_OPS:
        return "conv"
    if op in NORM_OPS:
        return "norm"
    if op in SOFTMAX_LOSS_OPS:
        return "softmax_loss"
    if op in EMBEDDING_OPS:
        return "embedding"
    if op.startswith(("aten::_fused_adam", "aten::_fused_sgd", "aten::_foreach_")):
        return "optimizer"
    if op in COPY_OPS or op in FSDP_COPY_OPS:
        return "copy"
    if op in MEMSET_OPS:
        return "memset"
    if op.startswith("memcpy::"):
        return "memcpy"
    if op.startswith(("triton::", "cpp::")):  # kernels Inductor generated (emulator.capture.compile): on the row
        return "generated"
    if op.startswith("aten::"):
        return "elementwise"
    return "other"


# Generated kernels that a learned family of ATen kernels times. An Inductor pointwise kernel that loads each
# of its buffers once reads its inputs and writes its outputs in one pass, as an ATen elementwise kernel does:
# KernelBench's single-op problems (ReLU, GELU, sigmoid, ... on [4096, 393216] fp32) ran as fast compiled as
# eager on an H100 (`python -m pipelines.validation.generated_kernels`). A pointwise stencil (pooling: 8 or 16
# loads of one input per output) and the reductions stay the roofline's, on bytes that count each pass a
# looped reduction makes over its rows (`emulator.capture.compile.reread_pointers`).
GENERATED_TIMED_AS = {"triton::pointwise": "elementwise"}


def timing_family(op: str, args=None, shapes=None) -> str:
    """The family whose measurements time `op`: its own (`op_family`), or, for a generated kernel, the family
    of ATen kernels that does the same work (`GENERATED_TIMED_AS`) when its body loads no more often than it
    has tensor arguments (`args`' "loads" against `shapes`); other generated kernels stay `generated`."""
    fam = op_family(op)
    if fam != "generated" or op not in GENERATED_TIMED_AS:
        return fam
    loads = parse_args(args).get("loads")
    if loads is not None and shapes is not None and int(loads) > len(shapes):
        return fam
    return GENERATED_TIMED_AS[op]


def is_view_op(op: str) -> bool:
    """True for ops that launch no device kernel (views, uninitialised allocation)."""
    return op in VIEW_OPS


def numel(shape: Sequence[int]) -> int:
    return math.prod(int(s) for s in shape) if shape is not None else 0


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a row-major contiguous tensor of `shape` (a size-0 dim counts as 1)."""
    out, acc = [], 1
    for d in reversed(list(shape)):
        out.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(out))


def dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES.get(str(dtype).removeprefix("torch."), 4)


def tensor_bytes(shapes: Sequence[Sequence[int]] | None, dtypes: Sequence[str] | None) -> int:
    if not shapes:
        return 0
    dts = list(dtypes or [])
    return sum(numel(s) * dtype_bytes(dts[i] if i < len(dts) else "float32") for i, s in enumerate(shapes))


def as_list(v) -> list:
    """A list column's value as a Python list: lists, tuples, numpy arrays (anything with `tolist`) and JSON
    strings are read; None, NaN and anything unreadable give []."""
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        v = v.tolist()
    if isinstance(v, str):
        if not v:
            return []
        try:
            v = json.loads(v)
        except ValueError:
            return []
    if isinstance(v, tuple):
        v = list(v)
    if not isinstance(v, list):
        return []
    return [x.tolist() if hasattr(x, "tolist") and not isinstance(x, (str, bytes)) else x for x in v]


def as_number(v, default: float = 0.0) -> float:
    """A numeric column's value as a float; None, NaN and anything unreadable give `default`."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(f) else f


def parse_args(args) -> dict:
    if args is None or args == "":
        return {}
    if isinstance(args, dict):
        return args
    try:
        out = json.loads(args)
    except (TypeError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def gemm_dims(op: str, shapes: Sequence[Sequence[int]]) -> tuple[int, int, int, int] | None:
    """(batch, m, n, k) of a GEMM-family op from its input shapes, or None if unreadable."""
    sh = [list(s) for s in (shapes or [])]
    try:
        if op in ("aten::mm", "aten::_scaled_mm"):
            (m, k), (_, n) = sh[0][-2:], sh[1][-2:]
            return 1, m, n, k
        if op in ("aten::addmm", "aten::_addmm_activation"):
            (m, k), (_, n) = sh[1], sh[2]
            return 1, m, n, k
        if op == "aten::bmm":
            (b, m, k), (_, _, n) = sh[0], sh[1]
            return b, m, n, k
        if op in ("aten::baddbmm", "aten::addbmm"):
            (b, m, k), (_, _, n) = sh[1], sh[2]
            return b, m, n, k
        if op == "aten::linear":
            x, w = sh[0], sh[1]
            return 1, numel(x[:-1]), w[0], w[1]
        if op == "aten::matmul":
            a, b = sh[0], sh[1]
            batch = numel(a[:-2]) if len(a) > 2 else 1
            return batch, (a[-2] if len(a) > 1 else 1), (b[-1] if len(b) > 1 else 1), a[-1]
        if op in ("aten::mv", "aten::addmv"):
            mat = sh[0] if op == "aten::mv" else sh[1]
            return 1, mat[0], 1, mat[1]
        if op == "aten::dot":
            return 1, 1, 1, sh[0][0]
    except (IndexError, ValueError, TypeError):
        return None
    return None


def attention_dims(op: str, shapes: Sequence[Sequence[int]]) -> tuple[int, int, int, int, int, int] | None:
    """(batch, q_heads, kv_heads, seq_q, seq_k, head_dim) for SDPA-family ops ([b, h, s, d] layout)."""
    sh = [list(s) for s in (shapes or [])]
    # SDPA backward ops take grad_out first; FlexAttention's backward takes query first
    offset = 1 if op.endswith("_backward") and op != "aten::flex_attention_backward" else 0
    if op in ("aten::_flash_attention_forward", "aten::_efficient_attention_forward",
              "aten::_flash_attention_backward", "aten::_efficient_attention_backward"):
        # these take [b, s, h, d]
        try:
            q, k = sh[offset], sh[offset + 1]
            return q[0], q[2], k[2], q[1], k[1], q[3]
        except (IndexError, ValueError):
            return None
    try:
        q, k = sh[offset], sh[offset + 1]
        if len(q) != 4 or len(k) != 4:
            return None
        return q[0], q[1], k[1], q[2], k[2], q[3]
    except (IndexError, ValueError):
        return None


def flops_and_bytes(op: str, shapes, dtypes, out_shapes=None, out_dtypes=None, args=None) -> tuple[float, float]:
    """FLOPs and DRAM bytes of one op as the GPU would do it (ideal: each tensor moved once).

    These feed the roofline fallback, MFU and predictor features; they are model
    quantities, never stored as measurements.
    """
    shapes = [list(s) for s in (shapes or [])]
    dtypes = [str(d).removeprefix("torch.") for d in (dtypes or [])]
    out_shapes = [list(s) for s in (out_shapes or [])]
    out_dtypes = [str(d).removeprefix("torch.") for d in (out_dtypes or [])]
    a = parse_args(args)
    fam = op_family(op)
    in_bytes = tensor_bytes(shapes, dtypes)
    out_bytes = tensor_bytes(out_shapes, out_dtypes)
    if fam == "gemm":
        dims = gemm_dims(op, shapes)
        if dims is None:
            return 0.0, float(in_bytes + out_bytes)
        b, m, n, k = dims
        flops = 2.0 * b * m * n * k
        esize = dtype_bytes(dtypes[0] if dtypes else "float32") if op not in ("aten::addmm", "aten::baddbmm") \
            else dtype_bytes(dtypes[1] if len(dtypes) > 1 else "float32")
        moved = b * (m * k + k * n + m * n) * esize
        if op == "aten::_scaled_mm":
            # fp8 operands, an output in `out_dtype` (bf16/fp32 for training, so not the operands' byte), and the
            # scales (one float per tensor, or per row of A and column of B for rowwise scaling)
            out_esize = dtype_bytes(out_dtypes[0]) if out_dtypes else esize
            moved = b * (m * k + k * n) * esize + b * m * n * out_esize + tensor_bytes(shapes[2:4], dtypes[2:4])
        return flops, float(max(moved, 1))
    if fam in ("attention_fwd", "attention_bwd"):
        dims = attention_dims(op, shapes)
        if dims is None:
            return 0.0, float(in_bytes + out_bytes)
        b, hq, _hk, sq, sk, d = dims
        pairs = sq * sk
        if a.get("is_causal"):
            pairs = sq * sk - (sq * (sq - 1)) / 2 if sq == sk else pairs / 2
        fwd = 4.0 * b * hq * pairs * d
        flops = fwd if fam == "attention_fwd" else 2.5 * fwd
        return flops, float(in_bytes + out_bytes)
    if fam == "collective" or fam == "p2p":
        return 0.0, float(in_bytes)
    if fam == "optimizer":
        # fused/foreach Adam(W): ~15 flops per parameter element; every list is read and
        # the in-place ones written back.
        n_elem = sum(numel(s) for s in shapes)
        lists = a.get("list_lengths") or []
        per_param = n_elem / max(len(lists), 1) if lists else n_elem
        flops = (15.0 if "adam" in op else 2.0) * per_param
        writes = out_bytes if out_bytes else in_bytes / max(len(lists), 1) * max(len(lists) - 1, 1)
        return flops, float(in_bytes + writes)
    if op in NLL_LOSS_FORWARD or op in NLL_LOSS_BACKWARD:
        # The input (the log-probabilities, [N, C] or [N, C, ...]) is read at the one class each target
        # names: a gather of N values, not the whole tensor. The backward zero-fills its [N, C] output and
        # writes those N values; its `self` argument gives only the shape.
        first = 1 if op in NLL_LOSS_BACKWARD else 0  # the backward takes grad_output first
        picked = numel(shapes[first + 1]) if len(shapes) > first + 1 else 0  # the targets
        esize = dtype_bytes(dtypes[first]) if len(dtypes) > first and dtypes[first] else 4
        small = tensor_bytes(shapes[first + 1:], dtypes[first + 1:])  # targets, weights, total_weight
        return float(picked), float(picked * esize + small + out_bytes)  # the backward's output is [N, C]
    if fam in ("norm", "softmax_loss"):
        n_out = sum(numel(s) for s in out_shapes) or (numel(shapes[0]) if shapes else 0)
        return 5.0 * n_out, float(in_bytes + out_bytes)
    if fam == "embedding":
        # a gather reads only the looked-up rows (= output size) plus the indices, not the whole table;
        # embedding_dense_backward scatters grad rows into a zeroed table it writes once.
        idx_bytes = sum(tensor_bytes([s], [d]) for s, d in zip(shapes, dtypes, strict=False)
                        if d in ("int64", "int32"))
        if op == "aten::embedding_dense_backward":
            if not out_bytes and shapes and shapes[0]:  # a benchmark row without outputs: the table its args size
                out_bytes = tensor_bytes([[int(as_number(a.get("num_weights"))), shapes[0][-1]]], dtypes[:1])
            return 0.0, float(2 * tensor_bytes(shapes[:1], dtypes[:1]) + idx_bytes + out_bytes)
        return 0.0, float(2 * out_bytes + idx_bytes) if out_bytes else float(in_bytes)
    if fam in ("copy", "memset", "memcpy"):
        if fam == "memset":
            return 0.0, float(out_bytes or in_bytes)
        if op == "fsdp::all_gather_copy_in":  # reads the shards into its slice of the output; the rest is untouched
            return 0.0, float(2 * in_bytes)
        return 0.0, float(in_bytes + out_bytes)
    if fam == "conv":
        return 0.0, float(in_bytes + out_bytes)
    if fam == "generated" and "read_bytes" in a:  # a CPU kernel's traffic counted from its loops (cpp_kernels)
        return as_number(a.get("step_elems")), as_number(a["read_bytes"]) + as_number(a.get("write_bytes"))
    n_out = sum(numel(s) for s in out_shapes) or (numel(shapes[0]) if shapes else 0)
    return float(n_out), float(in_bytes + out_bytes)


_COLLECTIVE_NAMES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "all_gather_into_tensor": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather", "allgather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all", "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "barrier": "barrier", "send": "send", "recv": "recv", "recv_any_source": "recv",
    "monitored_barrier": "barrier", "wait_tensor": "wait",
}


def collective_name(op: str) -> str:
    """`c10d::allgather_`, `_c10d_functional::all_gather_into_tensor` -> `all_gather`."""
    base = op.split("::", 1)[-1].rstrip("_")
    return _COLLECTIVE_NAMES.get(base, _COLLECTIVE_NAMES.get(base + "_", base))
