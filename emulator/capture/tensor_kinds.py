"""Tensor kinds the emulated device cannot hold: sparse, nested and quantized tensors.

Why a check of its own: a fake tensor is a dense (strided) tensor without data, and the fake mode
has no kernels for the other layouts, so such a tensor on the device used to fail deep inside
torch ("Cannot access storage of SparseTensorImpl", a meta-kernel assertion) or be listed as an
unsupported `memcpy::h2d`. Here the recorder asks before running a device op: a sparse, nested or
quantized input, an op that makes one (`to_sparse`, `quantize_per_tensor`, a sparse `layout=`)
and the `torch.nested` constructors with a device target raise `UnsupportedTensorKind`, naming the
kind and the line of the program that asked for it. CPU tensors of these kinds work as before.
"""

from __future__ import annotations

import functools
import os
import sys

import torch

_SKIP = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, sys.modules["emulator"]))
_LAYOUTS = {torch.sparse_coo: "sparse COO", torch.sparse_csr: "sparse CSR", torch.sparse_csc: "sparse CSC",
            torch.sparse_bsr: "sparse BSR", torch.sparse_bsc: "sparse BSC", torch.jagged: "nested (jagged)"}
# ops whose output is of another kind, by name prefix: (prefix, kind)
_MAKERS = (("aten::_to_sparse", "sparse"), ("aten::to_sparse", "sparse"), ("aten::_sparse_", "sparse"),
           ("aten::sparse_", "sparse"), ("aten::quantize_per_", "quantized"), ("aten::_nested_", "nested"))


class UnsupportedTensorKind(RuntimeError):
    """A sparse, nested or quantized tensor on the emulated device."""


def kind_of(x) -> str | None:
    """'sparse COO', 'nested', 'quantized', ... for a tensor of a kind the emulated device cannot hold."""
    if not isinstance(x, torch.Tensor):
        return None
    if x.is_nested:
        return "nested"
    if x.layout is not torch.strided:
        return _LAYOUTS.get(x.layout, str(x.layout))
    if x.is_quantized:
        return "quantized"
    return None


def check_call(op: str, flat: list, kwargs: dict) -> None:
    """Raise UnsupportedTensorKind if a device op takes or makes a tensor of such a kind."""
    for x in flat:
        kind = kind_of(x)
        if kind:
            refuse(kind)
    layout = kwargs.get("layout")
    if layout is not None and layout is not torch.strided:
        refuse(_LAYOUTS.get(layout, str(layout)))
    for prefix, kind in _MAKERS:
        if op.startswith(prefix):
            refuse(f"{kind} ({op})")


def refuse(kind: str) -> None:
    raise UnsupportedTensorKind(
        f"maya: a {kind} tensor on the emulated GPU at {program_line()}: the emulated device holds dense "
        "tensors only (keep this tensor on the CPU, or make it dense before moving it to the device)")


def program_line() -> str:
    """`file:line` of the innermost frame of the program (not torch's, not maya's)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(_SKIP) and not name.startswith("<"):
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return "an unknown line"


def install() -> None:
    """The `torch.nested` constructors refuse a device target (they fail inside the fake mode otherwise)."""
    import torch.nested as nested

    for name in ("nested_tensor", "as_nested_tensor", "nested_tensor_from_jagged"):
        original = getattr(nested, name, None)
        if original is None or getattr(original, "_maya", False):
            continue

        @functools.wraps(original)
        def constructor(*args, _original=original, **kwargs):
            device = kwargs.get("device")
            tensors = [t for a in args for t in (a if isinstance(a, (list, tuple)) else [a])]
            if (device is not None and torch.device(device).type == "cuda") or \
                    any(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors):
                refuse("nested")
            return _original(*args, **kwargs)

        constructor._maya = True
        setattr(nested, name, constructor)
