"""A per-signature cache in front of FakeTensorMode: the emulator's hot path.

Why: a training step repeats the same few hundred op signatures every iteration, and a fake
kernel's output depends only on its inputs' metadata. FakeTensorMode has its own cache, but a
hit still costs hundreds of microseconds of Python (entering the mode, a 17-field metadata
record per tensor, constant/sparse checks, output rebuilding through the dispatcher). Here the
key is built from exactly what can change a fake output: per tensor (shape, stride, dtype,
storage offset, device, requires_grad, conj/neg bits); per other argument its type and value;
plus the default dtype. The same key also caches everything the recorder derives from the call
(shapes/dtypes/strides, args JSON, flops/bytes), so a repeated op costs one dict lookup and
fresh meta tensors.

What is not cached (goes the slow, exact way every time): real (CPU) tensors, wrapper
subclasses, fake tensors carrying a constant, symbolic sizes, sparse layouts, unknown argument
types, outputs that are neither an input itself, a view of an input's storage, nor a fresh
storage, and ops that changed an input's metadata (`resize_`, `t_`, `set_`, ...).
"""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor

_SCALARS = (int, float, bool, str, type(None))
_HASHABLE = (torch.dtype, torch.device, torch.layout, torch.memory_format)


class Uncacheable(Exception):
    """This call's signature or output cannot be reproduced from metadata alone."""


def call_key(func, args: tuple, kwargs: dict, any_float: bool = False) -> tuple[tuple, list[FakeTensor]] | None:
    """(hashable key, the call's fake tensors in key order), or None when the call must go the slow way.

    `any_float`: float arguments enter the key by type only. Right for ops whose output metadata
    cannot depend on a float's value (the `_foreach_*` family: an optimizer's bias corrections
    change every step, and without this its biggest ops would never hit); such a key is good for
    the outputs, not for the row (whose args JSON has the values)."""
    parts: list = [func, torch.get_default_dtype()]
    tensors: list[FakeTensor] = []
    try:
        _add(parts, tensors, args, any_float)
        if kwargs:
            parts.append(tuple(kwargs))
            _add(parts, tensors, kwargs.values(), any_float)
    except Uncacheable:
        return None
    return tuple(parts), tensors


def _add(parts: list, tensors: list, values, any_float: bool) -> None:
    for v in values:
        t = type(v)
        if t is float and any_float:
            parts.append(float)
        elif t is FakeTensor:
            if v.constant is not None or v.layout is not torch.strided:
                raise Uncacheable
            parts.append((tuple(v.shape), v.stride(), v.dtype, v.storage_offset(), v.fake_device, v.requires_grad,
                           v.is_conj(), v.is_neg()))
            tensors.append(v)
        elif t in _SCALARS:
            parts.append((t, v))  # type too: 1, 1.0 and True hash equal but give different dtypes
        elif t is list or t is tuple:
            parts.append((t, len(v)))
            _add(parts, tensors, v, any_float)
        elif t in _HASHABLE:
            parts.append(v)
        else:
            raise Uncacheable  # real tensors, SymInts, generators, script objects, ...


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def output_spec(out, inputs: list[FakeTensor]):
    """How to rebuild `out` from the inputs: a nested spec, or raise Uncacheable.

    A plain recursive function, not a closure: a self-referencing closure is a reference cycle
    that would keep the inputs alive until the next GC and so shift the emulated frees."""
    return _spec(out, inputs, [_storage(t) for t in inputs], set())


def _spec(o, inputs: list, in_storages: list[int], seen_new: set[int]):
    t = type(o)
    if t is FakeTensor:
        for i, x in enumerate(inputs):
            if o is x:
                return ("same", i)
        if o.requires_grad or o.layout is not torch.strided or o.constant is not None or o.is_conj() or o.is_neg():
            raise Uncacheable
        meta = (tuple(o.shape), tuple(o.stride()), o.dtype, o.storage_offset(), o.fake_device)
        st = _storage(o)
        if st in in_storages:
            return ("view", in_storages.index(st), *meta)
        if st in seen_new or o.storage_offset() != 0:
            raise Uncacheable
        seen_new.add(st)
        probe = torch.empty_strided(meta[0], meta[1], dtype=meta[2], device="meta")
        if probe.untyped_storage().nbytes() != o.untyped_storage().nbytes():
            raise Uncacheable  # an output over a larger buffer than its shape needs
        return ("new", *meta)
    if t is tuple or t is list:
        return (t, [_spec(x, inputs, in_storages, seen_new) for x in o])
    if t in _SCALARS:
        return ("value", o)
    raise Uncacheable


def rebuild(spec, inputs: list[FakeTensor], fake_mode, new: list[FakeTensor]):
    """A fresh output equal (in metadata and aliasing) to what the fake kernel returned for this key.

    Outputs with a fresh storage are appended to `new` (the only ones the allocator must see)."""
    kind = spec[0]
    if kind == "new":
        _, shape, stride, dtype, _offset, device = spec
        t = new_fake(fake_mode, torch.empty_strided(shape, stride, dtype=dtype, device="meta"), device)
        new.append(t)
        return t
    if kind == "same":
        return inputs[spec[1]]
    if kind == "view":
        _, idx, shape, stride, dtype, offset, device = spec
        # a plain meta tensor over the base's (meta) storage: no fake tensor is touched, so no mode is needed
        empty = torch.empty((0,), dtype=dtype, device="meta")
        empty.set_(inputs[idx].untyped_storage(), offset, shape, stride)
        return new_fake(fake_mode, empty, device)
    if kind == "value":
        return spec[1]
    container, items = spec
    return container([rebuild(s, inputs, fake_mode, new) for s in items])


def new_fake(fake_mode, elem: torch.Tensor, device: torch.device) -> FakeTensor:
    """`FakeTensor(fake_mode, elem, device)` for an already normalised device, without its Python overhead.

    The first call per mode builds one the ordinary way and keeps its attribute dict (constant,
    memo slots, ...) as the template, so later tensors get exactly the same state."""
    template = getattr(fake_mode, "_maya_fake_template", None)
    if template is None:
        t = FakeTensor(fake_mode, elem, device)
        fake_mode._maya_fake_template = {k: v for k, v in t.__dict__.items() if k != "_fake_device"}
        return t
    t = torch.Tensor._make_subclass(FakeTensor, elem, elem.requires_grad, dispatch_device=True,
                                    device_for_backend_keys=device)
    if fake_mode._allow_unsafe_data_ptr_access:
        torch._C._set_warn_deprecated_on_mutable_data_ptr(t)
    else:
        torch._C._set_throw_on_mutable_data_ptr(t)
    d = t.__dict__
    d.update(template)
    d["_fake_device"] = device
    return t


def same_inputs(before: tuple, func, args: tuple, kwargs: dict, any_float: bool = False) -> bool:
    """False when the call changed an input's metadata (in-place view ops, resize_, set_)."""
    after = call_key(func, args, kwargs, any_float)
    return after is not None and after[0] == before
