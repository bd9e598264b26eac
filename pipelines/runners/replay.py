"""Replay one recorded op signature on the local device and time it.

A trace row says which ATen op ran (`aten::mm`), its tensor inputs in schema order (shapes,
dtypes, strides; tensors of a `Tensor[]` flattened, with `args["list_lengths"]`) and every passed
non-tensor argument by schema name (`args`, None optional tensors as null). That is enough to
call the op again: look up `torch.ops.aten.<name>`, pick the overload whose schema binds exactly
those inputs, build random tensors with the recorded layout and time the call. The designed sweep
(`pipelines.runners.sweep`) produces signatures in the same form, so designed and harvested shapes
share one timing path and one row format.

What a replay cannot do honestly, it reports: an op the local device has no kernel for (flash
attention op names on a CPU) or an out-of-memory shape becomes a `failed` row with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import torch

from emulator.core.ops import canonical_op, contiguous_strides, op_family, parse_args
from maya_models.schema import signature_key


@dataclass(frozen=True)
class Signature:
    """An op signature exactly as traces and measurements store it (see emulator.core.ops)."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    strides: tuple[tuple[int, ...], ...] | None
    args: str = "{}"  # canonical JSON (sorted keys)
    kind: str = "kernel"
    out_shapes: tuple[tuple[int, ...], ...] | None = None
    out_dtypes: tuple[str, ...] | None = None
    origin: str = "sweep"  # sweep | trace:<folder name>

    @classmethod
    def make(cls, op: str, shapes, dtypes, strides=None, args=None, **kw) -> Signature:
        shapes_t = tuple(tuple(int(d) for d in s) for s in (shapes or []))
        strides_t = None if strides is None else tuple(  # no strides recorded (sparse...): contiguous
            tuple(int(d) for d in s) if s is not None and len(s) == len(shape) else contiguous_strides(shape)
            for shape, s in zip(shapes_t, strides, strict=False))
        return cls(op=canonical_op(op), shapes=shapes_t, dtypes=tuple(str(d).removeprefix("torch.") for d in dtypes),
                   strides=strides_t, args=canonical_args(args), **kw)

    @property
    def family(self) -> str:
        return op_family(self.op)

    @property
    def key(self) -> str:
        """The warehouse dedup key: `maya_models.schema.signature_key` over the stored columns."""
        return signature_key(self.op, _lists(self.shapes), list(self.dtypes), _lists(self.strides), self.args)

    def row_columns(self) -> dict:
        return {"kind": self.kind, "op": self.op, "family": self.family, "shapes": _lists(self.shapes),
                "dtypes": list(self.dtypes), "strides": _lists(self.strides), "args": self.args,
                "out_shapes": _lists(self.out_shapes), "out_dtypes": list(self.out_dtypes or []) or None,
                "signature": self.key}


def _lists(x):
    return None if x is None else [list(s) for s in x]


def canonical_args(args) -> str:
    """One JSON spelling per argument set, so equal signatures hash equally."""
    return json.dumps(parse_args(args) if not isinstance(args, dict) else args, sort_keys=True,
                      separators=(",", ":"), default=str)


class ReplayError(RuntimeError):
    """The signature cannot be replayed here; the message is the row's `error`."""


# ---------------------------------------------------------------------------------------------
# overload resolution


@dataclass
class Bound:
    """A resolved overload and the Python call arguments built for it."""

    overload: object
    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)


def _is_tensor(t) -> bool:
    return isinstance(t, torch.TensorType)


def _is_tensor_list(t) -> bool:
    return isinstance(t, torch.ListType) and isinstance(t.getElementType(), torch.TensorType | torch.OptionalType) \
        and "Tensor" in str(t.getElementType())


def _is_optional_tensor(t) -> bool:
    return isinstance(t, torch.OptionalType) and _is_tensor(t.getElementType())


def _overloads(op: str):
    ns, name = canonical_op(op).split("::", 1)
    try:
        packet = getattr(getattr(torch.ops, ns), name)
    except (AttributeError, RuntimeError) as e:
        raise ReplayError(f"no operator {op} in torch {torch.__version__}") from e
    names = packet.overloads()
    names.sort(key=lambda n: (n != "default", n))
    for n in names:
        ov = getattr(packet, n)
        schema = ov._schema
        # out= variants write into a caller tensor the trace never lists; they are not what ran
        if any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            continue
        yield ov


def _plan(schema, n_tensors: int, list_lengths: list[int], named: dict) -> list | None:
    """How each schema argument is filled: ('t', k) tensor, ('tl', [k..]) list, ('v', value), ('none',).

    Returns None when this overload cannot take the recorded inputs.
    """
    plan, ti, li = [], 0, 0
    names = {a.name for a in schema.arguments}
    if any(k not in names for k in named):
        return None
    for a in schema.arguments:
        t = a.type
        if _is_tensor_list(t):
            if li >= len(list_lengths):
                return None
            n = list_lengths[li]
            li += 1
            plan.append((a, ("tl", list(range(ti, ti + n)))))
            ti += n
        elif _is_tensor(t) or _is_optional_tensor(t):
            if a.name in named and named[a.name] is None:
                plan.append((a, ("none",)))
            elif a.name in named and not isinstance(named[a.name], dict | list):
                return None  # a scalar was passed where this overload wants a tensor
            elif ti < n_tensors:
                plan.append((a, ("t", ti)))
                ti += 1
            elif _is_optional_tensor(t):
                plan.append((a, ("none",)))
            else:
                return None
        else:
            if a.name in named:
                plan.append((a, ("v", named[a.name])))
            elif a.has_default_value():
                continue  # leave it to the default
            elif isinstance(t, torch.OptionalType):
                plan.append((a, ("v", None)))
            else:
                return None
    if ti != n_tensors or li != len(list_lengths):
        return None
    return plan


# ---------------------------------------------------------------------------------------------
# building inputs


_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32"}


def torch_dtype(name: str) -> torch.dtype:
    n = str(name).removeprefix("torch.")
    n = _DTYPE_ALIASES.get(n, n)
    dt = getattr(torch, n, None)
    if not isinstance(dt, torch.dtype):
        raise ReplayError(f"unknown dtype {name!r}")
    return dt


def _convert_value(schema_type, value, device: torch.device):
    """JSON value from a trace → the Python value the op expects."""
    if value is None:
        return None
    s = str(schema_type)
    if "ScalarType" in s:
        return torch_dtype(value) if isinstance(value, str) else value
    if "Device" in s:
        return device
    if "Layout" in s:
        return torch.strided
    if "MemoryFormat" in s:
        return getattr(torch, str(value).removeprefix("torch."), torch.preserve_format)
    if "Generator" in s:
        return None
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)  # non-finite floats are recorded as strings
    return value


def _index_bound(op: str, sig: Signature, k: int, named: dict) -> int:
    """Exclusive upper bound for the values of integer input `k` (indices must stay in range)."""
    shapes = sig.shapes
    if op == "aten::embedding_dense_backward":
        return int(named.get("num_weights", 1))
    if op in ("aten::embedding", "aten::_embedding_bag") and shapes:
        return max(shapes[0][0], 1)
    if op.startswith("aten::nll_loss") and shapes:
        src = shapes[1] if op.endswith("backward") and len(shapes) > 1 else shapes[0]
        return max(src[1] if len(src) > 1 else src[0], 1)
    if op in ("aten::index_select", "aten::gather", "aten::scatter", "aten::scatter_add", "aten::scatter_add_") \
            and shapes and shapes[0]:
        dim = int(named.get("dim", 0)) % len(shapes[0])
        return max(shapes[0][dim], 1)
    floats = [s for s, d in zip(shapes, sig.dtypes, strict=False) if "float" in d and len(s)]
    dims = [d for s in floats[:1] for d in s if d > 0]
    return min(dims) if dims else 2


def _storage_size(shape, stride) -> int:
    if any(d == 0 for d in shape):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(shape, stride, strict=True))


def make_tensor(shape, stride, dtype: torch.dtype, device: torch.device, high: int | None = None) -> torch.Tensor:
    """A tensor with the recorded layout (empty_strided) filled with values valid for the op."""
    stride = tuple(stride) if stride is not None else contiguous_strides(shape)
    t = torch.empty_strided(tuple(shape), stride, dtype=dtype, device=device)
    if _storage_size(shape, stride) == 0:
        return t
    base = t.as_strided((_storage_size(shape, stride),), (1,))  # fill the whole storage, overlaps included
    if dtype.is_floating_point:
        if dtype.itemsize == 1:  # float8: no RNG kernels; cast from a float32 fill
            base.copy_(torch.rand(base.shape, device=device))
        else:
            base.uniform_(-1.0, 1.0)
    elif dtype == torch.bool:
        base.copy_(torch.rand(base.shape, device=device) > 0.5)
    elif dtype.is_complex:
        base.copy_(torch.randn(base.shape, dtype=dtype, device=device))
    else:
        base.random_(0, max(int(high or 2), 1))
    return t


def bind(sig: Signature, device: torch.device) -> Bound:
    """Resolve the overload for `sig` and build its inputs on `device`."""
    named = parse_args(sig.args)
    list_lengths = [int(x) for x in named.pop("list_lengths", []) or []]
    named = {k: v for k, v in named.items() if not k.startswith("_")}
    n = len(sig.shapes)
    if len(sig.dtypes) != n or (sig.strides is not None and len(sig.strides) != n):
        raise ReplayError(f"{sig.op}: {n} shapes but {len(sig.dtypes)} dtypes / "
                          f"{len(sig.strides or [])} strides")
    tried = 0
    for ov in _overloads(sig.op):
        tried += 1
        plan = _plan(ov._schema, n, list_lengths, named)
        if plan is None:
            continue
        tensors = [make_tensor(sig.shapes[i], sig.strides[i] if sig.strides else None, torch_dtype(sig.dtypes[i]),
                               device, high=_index_bound(sig.op, sig, i, named)) for i in range(n)]
        out = Bound(overload=ov)
        by_name = False  # after a positional argument left to its default, pass the rest by name
        declared = [a.name for a in ov._schema.arguments]
        planned = {a.name for a, _ in plan}
        for a, how in plan:
            if how[0] == "t":
                val = tensors[how[1]]
            elif how[0] == "tl":
                val = [tensors[i] for i in how[1]]
            elif how[0] == "none":
                val = None
            else:
                val = _convert_value(getattr(a, "real_type", a.type), how[1], device)
            before = declared[:declared.index(a.name)]
            by_name = by_name or any(n not in planned for n in before)
            if a.kwarg_only or by_name:
                out.kwargs[a.name] = val
            else:
                out.args.append(val)
        return out
    if tried == 0:
        raise ReplayError(f"no callable overload of {sig.op}")
    raise ReplayError(f"no overload of {sig.op} takes {n} tensors (list_lengths {list_lengths}) "
                      f"and arguments {sorted(named)}")


def run_once(b: Bound):
    return b.overload(*b.args, **b.kwargs)


META = torch.device("meta")


def with_outputs(sig: Signature) -> Signature:
    """`sig` with the shapes and dtypes of what its op returns, worked out on the meta device, when it carries
    none (the designed sweep's signatures do not; a harvested one has its trace row's).

    A trace row has its outputs, and `flops_and_bytes` counts an op's output bytes: a measurement without them
    would be featurized as moving only its inputs while the trace row it times moves both (a softmax's roofline
    half of the trace row's). An op the meta device cannot run (a data-dependent output size) keeps none."""
    if sig.out_shapes is not None or sig.kind != "kernel":
        return sig
    try:
        result = run_once(bind(sig, META))
    except Exception:  # noqa: BLE001 - no meta kernel or a data-dependent size: the row stays as it was
        return sig
    outs = [t for t in (result if isinstance(result, (list, tuple)) else [result]) if isinstance(t, torch.Tensor)]
    if not outs:
        return sig
    return replace(sig, out_shapes=tuple(tuple(int(d) for d in t.shape) for t in outs),
                   out_dtypes=tuple(str(t.dtype).removeprefix("torch.") for t in outs))


def describe_error(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}"[:500]
