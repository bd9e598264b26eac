"""The designed sweep: op signatures covering every family training uses, per dtype and device.

Why a designed sweep next to harvested trace shapes: traces say exactly what one workload needs,
but a predictor also has to interpolate between shapes nobody has traced yet. The sweep is a
coarse grid over the dimensions that matter per family (GEMM m/n/k and layouts, attention batch/
heads/sequence/head-dim, element counts for memory-bound ops).

Order matters because the sweep runs under a time budget: `designed_sweep` interleaves the
families round-robin (cheap, coarse points first), so even a tiny budget measures every family
and a bigger one refines all of them.

Backward ops take the forward's outputs (mean/rstd, logsumexp, ...); their shapes and dtypes are
derived by running the forward once on the device being calibrated (meta kernels disagree with
some devices, e.g. CPU LayerNorm keeps bf16 statistics), so no shape rule is written twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch

from emulator.core.ops import contiguous_strides
from pipelines.runners.replay import Signature

CPU_DTYPES = ("float32", "bfloat16")
GPU_DTYPES = ("bfloat16", "float16", "float32")


def device_dtypes(device: torch.device) -> tuple[str, ...]:
    """Floating dtypes the device runs training kernels in (fp16/bf16 only where supported)."""
    if device.type != "cuda":
        return CPU_DTYPES
    major, _ = torch.cuda.get_device_capability(device)
    return tuple(d for d in GPU_DTYPES if d != "bfloat16" or major >= 8)


def _sig(op, shapes, dtypes, strides=None, args=None) -> Signature:
    strides = strides or [contiguous_strides(s) for s in shapes]
    return Signature.make(op, shapes, dtypes, strides, args or {})


_DEVICE = [torch.device("cpu")]  # the device designed_sweep is building for


def _forward_outputs(sig: Signature):
    """Run `sig`'s forward once on the target device to learn its output shapes/dtypes."""
    from pipelines.runners.replay import bind, run_once

    try:
        with torch.no_grad():
            out = run_once(bind(sig, _DEVICE[0]))
    except Exception:  # noqa: BLE001 - the forward's own row will record why; no backward then
        return None
    outs = out if isinstance(out, tuple | list) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor)]


def _desc(t: torch.Tensor):
    return list(t.shape), str(t.dtype).removeprefix("torch."), list(t.stride())


# ---------------------------------------------------------------------------------------------
# families


def gemm(dims: list[int], dtypes) -> Iterator[Signature]:
    """mm in the four layouts training produces, addmm (Linear with bias) and bmm.

    Linear forward y = x W^T is mm([m,k], [k,n]) with the weight transposed (strides [1,k]);
    backward computes dX = dY W (plain layout) and dW = dY^T X (first operand transposed). A
    Conv1D-style layer (Hugging Face's GPT-2 stores its weight [in, out]) runs addmm on the plain
    layout, which cuBLAS serves with other kernels than the transposed one.
    """
    for (m, n, k), dt in itertools.product(itertools.product(dims, repeat=3), dtypes):
        d2 = [dt, dt]
        yield _sig("aten::mm", [[m, k], [k, n]], d2, [[k, 1], [1, k]])  # linear forward
        yield _sig("aten::mm", [[m, n], [n, k]], d2, [[n, 1], [k, 1]])  # grad input
        yield _sig("aten::mm", [[n, m], [m, k]], d2, [[1, n], [k, 1]])  # grad weight
        yield _sig("aten::mm", [[m, k], [k, n]], d2, [[k, 1], [n, 1]])  # plain
        yield _sig("aten::addmm", [[n], [m, k], [k, n]], [dt] * 3, [[1], [k, 1], [1, k]])
        yield _sig("aten::addmm", [[n], [m, k], [k, n]], [dt] * 3, [[1], [k, 1], [n, 1]])  # Conv1D
    for b, s, d, dt in itertools.product((4, 16), dims[:3], (64, 128), dtypes):
        yield _sig("aten::bmm", [[b, s, d], [b, d, s]], [dt, dt])  # scores
        yield _sig("aten::bmm", [[b, s, s], [b, s, d]], [dt, dt])  # weighted values


def attention(device: torch.device, configs, dtypes) -> Iterator[Signature]:
    """SDPA forward and backward with the op the device itself dispatches to (never a stand-in)."""
    cuda = device.type == "cuda"
    for (b, h, s, d), causal, dt in itertools.product(configs, (True, False), dtypes):
        qkv = [[b, h, s, d]] * 3
        if cuda and dt in ("bfloat16", "float16"):
            fwd = _sig("aten::_scaled_dot_product_flash_attention", qkv, [dt] * 3, args={"is_causal": causal})
            bwd_op = "aten::_scaled_dot_product_flash_attention_backward"
        elif cuda:
            fwd = _sig("aten::_scaled_dot_product_efficient_attention", qkv, [dt] * 3,
                       args={"attn_bias": None, "compute_log_sumexp": True, "is_causal": causal})
            bwd_op = "aten::_scaled_dot_product_efficient_attention_backward"
        else:
            fwd = _sig("aten::_scaled_dot_product_flash_attention_for_cpu", qkv, [dt] * 3, args={"is_causal": causal})
            bwd_op = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
        yield fwd
        outs = _forward_outputs(fwd)
        if outs is None:
            continue
        o, lse = _desc(outs[0]), _desc(outs[1])
        # the RNG state the backward takes is what the forward returned (flash: rng_state, unused;
        # efficient: philox seed, offset); their shapes/dtypes differ by device and version
        seed, offset = (_desc(outs[2]), _desc(outs[3])) if len(outs) >= 4 else (([], "int64", []),) * 2
        shapes = [o[0], *qkv, o[0], lse[0]]
        dts = [o[1], dt, dt, dt, o[1], lse[1]]
        strides = [o[2], *[contiguous_strides(x) for x in qkv], o[2], lse[2]]
        if bwd_op.endswith("flash_attention_backward"):
            # cum_seq_q/k are undefined for dense batches; philox seed/offset are int64 scalars
            args = {"cum_seq_q": None, "cum_seq_k": None, "max_q": s, "max_k": s, "dropout_p": 0.0,
                    "is_causal": causal}
            shapes += [seed[0], offset[0]]
            dts += [seed[1], offset[1]]
            strides += [seed[2], offset[2]]
            yield _sig(bwd_op, shapes, dts, strides, args)
        elif bwd_op.endswith("efficient_attention_backward"):
            shapes = [o[0], *qkv, o[0], lse[0], seed[0], offset[0]]
            dts = [o[1], dt, dt, dt, o[1], lse[1], seed[1], offset[1]]
            strides = [o[2], *[contiguous_strides(x) for x in qkv], o[2], lse[2], seed[2], offset[2]]
            yield _sig(bwd_op, shapes, dts, strides, {"attn_bias": None, "dropout_p": 0.0,
                                                      "grad_input_mask": [True, True, True, False],
                                                      "is_causal": causal})
        else:
            yield _sig(bwd_op, shapes, dts, strides, {"dropout_p": 0.0, "is_causal": causal})


def elementwise(rows: list[int], hidden: list[int], dtypes) -> Iterator[Signature]:
    for r, h, dt in itertools.product(rows, hidden, dtypes):
        x = [r, h]
        yield _sig("aten::add", [x, x], [dt, dt])
        yield _sig("aten::mul", [x, x], [dt, dt])
        yield _sig("aten::gelu", [x], [dt], args={"approximate": "tanh"})
        yield _sig("aten::gelu_backward", [x, x], [dt, dt], args={"approximate": "tanh"})
        yield _sig("aten::silu", [x], [dt])
        yield _sig("aten::silu_backward", [x, x], [dt, dt])
        yield _sig("aten::mul", [x, [h]], [dt, dt])  # broadcast (RMSNorm weight, RoPE)
        yield _sig("aten::native_dropout", [x], [dt], args={"p": 0.1, "train": True})


def norms(rows: list[int], hidden: list[int], dtypes) -> Iterator[Signature]:
    for r, h, dt in itertools.product(rows, hidden, dtypes):
        x, w = [r, h], [h]
        ln = _sig("aten::native_layer_norm", [x, w, w], [dt] * 3, args={"normalized_shape": [h], "eps": 1e-5})
        yield ln
        outs = _forward_outputs(ln)
        if outs is None:
            continue
        _, mean, rstd = (_desc(t) for t in outs)
        yield _sig("aten::native_layer_norm_backward", [x, x, mean[0], rstd[0], w, w],
                   [dt, dt, mean[1], rstd[1], dt, dt], None,
                   {"normalized_shape": [h], "output_mask": [True, True, True]})
        rms = _sig("aten::_fused_rms_norm", [x, w], [dt, dt], args={"normalized_shape": [h], "eps": 1e-6})
        yield rms
        outs = _forward_outputs(rms)
        if outs is None:
            continue
        _, r_std = (_desc(t) for t in outs)
        yield _sig("aten::_fused_rms_norm_backward", [x, x, r_std[0], w], [dt, dt, r_std[1], dt], None,
                   {"normalized_shape": [h], "output_mask": [True, True]})


def softmax_loss(rows: list[int], cols: list[int], dtypes) -> Iterator[Signature]:
    for r, c, dt in itertools.product(rows, cols, dtypes):
        x = [r, c]
        yield _sig("aten::_softmax", [x], [dt], args={"dim": -1, "half_to_float": False})
        yield _sig("aten::_softmax_backward_data", [x, x], [dt, dt], args={"dim": -1, "input_dtype": dt})
        yield _sig("aten::_log_softmax", [x], [dt], args={"dim": 1, "half_to_float": False})
        yield _sig("aten::_log_softmax_backward_data", [x, x], [dt, dt], args={"dim": 1, "input_dtype": dt})
        nll = {"weight": None, "reduction": 1, "ignore_index": -100}
        yield _sig("aten::nll_loss_forward", [x, [r]], [dt, "int64"], args=nll)
        yield _sig("aten::nll_loss_backward", [[], x, [r], []], [dt, dt, "int64", dt], args=nll)


def embedding(vocab: list[int], tokens: list[int], dims: list[int], dtypes) -> Iterator[Signature]:
    for v, t, d, dt in itertools.product(vocab, tokens, dims, dtypes):
        yield _sig("aten::embedding", [[v, d], [t]], [dt, "int64"])
        yield _sig("aten::embedding_dense_backward", [[t, d], [t]], [dt, "int64"],
                   args={"num_weights": v, "padding_idx": -1, "scale_grad_by_freq": False})


def optimizer(n_tensors: list[int], numels: list[int], dtypes) -> Iterator[Signature]:
    """Fused AdamW and the foreach ops of the multi-tensor AdamW path (per list of parameters)."""
    for n, e, dt in itertools.product(n_tensors, numels, ("float32",) + tuple(d for d in dtypes if d != "float32")):
        p = [[e]] * n
        hp = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.01, "eps": 1e-8, "amsgrad": False,
              "maximize": False, "grad_scale": None, "found_inf": None}
        yield _sig("aten::_fused_adamw_", p * 4 + [[]] * n, [dt] * (4 * n) + ["float32"] * n,
                   args={**hp, "list_lengths": [n, n, n, n, 0, n]})
        yield _sig("aten::_foreach_lerp_", p * 2, [dt] * (2 * n), args={"list_lengths": [n, n], "weight": 0.1})
        yield _sig("aten::_foreach_addcmul_", p * 3, [dt] * (3 * n),
                   args={"list_lengths": [n, n, n], "value": 0.001})
        yield _sig("aten::_foreach_mul_", p, [dt] * n, args={"list_lengths": [n], "scalar": 0.9})
        yield _sig("aten::_foreach_sqrt", p, [dt] * n, args={"list_lengths": [n]})


def copies(rows: list[int], hidden: list[int], dtypes) -> Iterator[Signature]:
    for r, h in itertools.product(rows, hidden):
        x = [r, h]
        for a, b in itertools.permutations(dtypes, 2):
            yield _sig("aten::_to_copy", [x], [a], args={"dtype": b})
        for dt in dtypes:
            yield _sig("aten::copy_", [x, x], [dt, dt], [[h, 1], [1, r]])  # transpose-copy (contiguous())
            yield _sig("aten::cat", [x, x], [dt, dt], args={"list_lengths": [2], "dim": -1})
            yield _sig("aten::fill_", [x], [dt], args={"value": 0.0})


def memcpy_sizes(device: torch.device, sizes: list[int]) -> Iterator[Signature]:
    """Host↔device copies (pinned/non-blocking and pageable) and device-to-device copies, by bytes.

    Named as the emulator records them: `memcpy::h2d|d2h|d2d` with the copied tensor's shape.
    """
    cases = ((("h2d", True), ("h2d", False), ("d2h", False), ("d2h", True), ("d2d", False))
             if device.type == "cuda" else (("d2d", False),))
    for n, (d, nb) in itertools.product(sizes, cases):
        yield Signature.make(f"memcpy::{d}", [[n]], ["uint8"], [[1]], {"non_blocking": nb}, kind="memcpy")


# ---------------------------------------------------------------------------------------------


def _grids(device: torch.device) -> dict:
    if device.type == "cuda":
        return dict(gemm=[256, 1024, 4096, 8192, 2048, 512, 16384],
                    attn=[(4, 16, 1024, 128), (1, 32, 4096, 128), (8, 16, 512, 64), (2, 32, 2048, 128),
                          (1, 8, 8192, 128), (16, 12, 1024, 64)],
                    rows=[2048, 8192, 32768], hidden=[1024, 4096, 8192],
                    norm_rows=[2048, 8192, 32768], norm_hidden=[1024, 4096, 8192],
                    sm_rows=[2048, 8192], sm_cols=[1024, 32000, 128256],
                    vocab=[32000, 128256], tokens=[4096, 32768], emb_dims=[2048, 4096],
                    n_tensors=[16, 64], numels=[2**16, 2**20, 2**24],
                    memcpy=[2**10, 2**16, 2**20, 2**24, 2**28])
    # CPU: enough attention configurations (x causal) that each element size keeps MIN_SEEN_ROWS training rows
    # per op after the held-out shape groups leave (maya_models.kernels): with nine (18 per dtype and op),
    # every SDPA call on the CPU was the roofline's, at a third to a quarter of its measured time. The same for the
    # norms: with the elementwise grid's four shapes, their fp32 rows numbered 14 after the held-out groups left,
    # and every CPU LayerNorm was the roofline's; softmax/loss gets sizes between its corners for the same reason
    return dict(gemm=[64, 256, 512, 1024], attn=[(1, 4, 128, 64), (2, 8, 256, 64), (1, 8, 512, 64), (4, 8, 128, 32),
                                                 (2, 4, 512, 32), (1, 12, 256, 64), (2, 8, 1024, 16), (4, 4, 256, 16),
                                                 (1, 2, 2048, 64), (8, 4, 128, 32), (2, 8, 512, 32), (4, 8, 256, 32),
                                                 (1, 16, 256, 64), (2, 2, 1024, 64), (4, 12, 128, 64), (8, 8, 64, 64)],
                rows=[256, 2048], hidden=[256, 1024], norm_rows=[256, 1024, 2048, 4096], norm_hidden=[256, 512, 1024],
                sm_rows=[256, 512, 1024], sm_cols=[1024, 4096, 8192],
                vocab=[8192, 32000], tokens=[512, 4096], emb_dims=[256, 768],
                n_tensors=[4, 16], numels=[2**12, 2**16], memcpy=[2**12, 2**16, 2**20, 2**24])


def designed_sweep(device: torch.device, dtypes: tuple[str, ...] | None = None) -> list[Signature]:
    """Every designed signature for `device`, families interleaved round-robin (see module doc)."""
    dtypes = dtypes or device_dtypes(device)
    _DEVICE[0] = device
    g = _grids(device)
    families = [
        gemm(g["gemm"], dtypes),
        attention(device, g["attn"], dtypes),
        elementwise(g["rows"], g["hidden"], dtypes),
        norms(g["norm_rows"], g["norm_hidden"], dtypes),
        softmax_loss(g["sm_rows"], g["sm_cols"], dtypes),
        embedding(g["vocab"], g["tokens"], g["emb_dims"], dtypes),
        optimizer(g["n_tensors"], g["numels"], dtypes),
        copies(g["rows"], g["hidden"], dtypes),
        memcpy_sizes(device, g["memcpy"]),
    ]
    out, seen = [], set()
    for group in itertools.zip_longest(*families):
        for sig in group:
            if sig is not None and sig.key not in seen:
                seen.add(sig.key)
                out.append(sig)
    return out
