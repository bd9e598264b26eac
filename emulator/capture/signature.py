"""An op call's signature as the trace stores it: tensors in schema order, the rest as JSON by name.

Replayable: a benchmark runner can rebuild the call from `(op, shapes, dtypes, strides, args)`
with the op's schema: every non-tensor argument that was passed is in `args` by schema name,
optional tensors that were None are JSON null, and Tensor[] arguments contribute their
elements in place to shapes/dtypes/strides plus their length to `args["list_lengths"]`.
"""

from __future__ import annotations

import math
import re

import torch

# "<torch._C.Generator object at 0x7f...>": an object's address is no part of the call; kept, it makes every
# call a signature of its own (the in-training rows of a data loader's `randint` came out one row per call)
_ADDRESS = re.compile(r" object at 0x[0-9a-fA-F]+")


def bind(func, args: tuple, kwargs: dict) -> list[tuple[str, object, object]]:
    """[(name, type, value)] for every argument of `func`'s schema that was given or defaulted."""
    out = []
    schema = func._schema
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            value = args[i]
        elif a.name in kwargs:
            value = kwargs[a.name]
        elif a.has_default_value():
            continue
        else:
            value = None
        out.append((a.name, a.type, value))
    return out


def _json_value(v):
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return _json_value(v.node.hint if hasattr(v.node, "hint") else str(v))
    if isinstance(v, torch.dtype):
        return str(v).removeprefix("torch.")
    if isinstance(v, torch.device):
        return v.type  # the index is which local GPU, not what the op does (keeps ranks' signatures equal)
    if isinstance(v, (torch.memory_format, torch.layout)):
        return str(v).removeprefix("torch.")
    if isinstance(v, torch.Stream):
        return int(v.stream_id)
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, torch.ScriptObject):
        return None
    if isinstance(v, torch.Generator):
        return f"generator:{v.device.type}"  # which generator draws the numbers is not what the op costs
    return _ADDRESS.sub("", str(v))


def describe_call(func, args: tuple, kwargs: dict, tensors: bool = True):
    """(bound, shapes, dtypes, strides, args_json_dict) of one call, tensors flattened in schema order.

    `tensors=False`: only the args dict (shapes/dtypes/strides stay empty), for callers that have the rest."""
    shapes: list[list[int]] = []
    dtypes: list[str] = []
    strides: list[list[int]] = []
    jargs: dict = {}
    list_lengths: list[int] = []
    bound: dict = {}
    for name, typ, value in bind(func, args, kwargs):
        bound[name] = value
        if isinstance(value, torch.Tensor):
            if tensors:
                _add_tensor(value, shapes, dtypes, strides)
        elif isinstance(value, (list, tuple)) and value and any(isinstance(x, (torch.Tensor, list, tuple))
                                                                for x in value):
            flat = _flatten_tensors(value)
            if flat or _is_tensor_list_type(typ):
                list_lengths.append(len(flat))
                for t in flat if tensors else ():
                    _add_tensor(t, shapes, dtypes, strides)
            else:
                jargs[name] = _json_value(value)
        elif value is None and _is_tensor_type(typ):
            jargs[name] = None
        elif isinstance(value, torch.ScriptObject):
            continue
        elif isinstance(value, (list, tuple)) and not value and _is_tensor_list_type(typ):
            list_lengths.append(0)
        else:
            jargs[name] = _json_value(value)
    if list_lengths:
        jargs["list_lengths"] = list_lengths
    return bound, shapes, dtypes, strides, jargs


def outputs(out) -> tuple[list[list[int]], list[str], list[torch.Tensor]]:
    tensors = _flatten_tensors(out if isinstance(out, (list, tuple)) else [out])
    return [list(t.shape) for t in tensors], [str(t.dtype).removeprefix("torch.") for t in tensors], tensors


def _add_tensor(t: torch.Tensor, shapes, dtypes, strides) -> None:
    shapes.append([int(s) for s in t.shape])
    dtypes.append(str(t.dtype).removeprefix("torch."))
    try:
        strides.append([int(s) for s in t.stride()])
    except RuntimeError:  # sparse / nested: no strides
        strides.append([])


def _flatten_tensors(value) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for x in value:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out.extend(_flatten_tensors(x))
    return out


def _is_tensor_type(typ) -> bool:
    s = str(typ)
    return s.startswith("Tensor") or s.startswith("Optional[Tensor")


def _is_tensor_list_type(typ) -> bool:
    s = str(typ)
    return "List[Tensor]" in s or "List[Optional[Tensor]]" in s or "Tensor[]" in s or "Tensor?[]" in s
