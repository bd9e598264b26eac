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

Per-tensor signatures: reading a fake tensor's shape, strides, dtype, offset and flags costs
~0.5 us per attribute on this path (each goes through the subclass check), ~3.5 us per tensor
and call. A tensor's signature is kept in its `__dict__` (`_maya_sig`): set when the fast path
builds the tensor (its metadata is the spec's), computed once otherwise; likewise its storage's
identity (`storage_key`). Only two things change either in place: an op (`t_`, `resize_`,
`set_`, an `out=` argument), which the recorder answers with `forget_signatures` on every call
that did not hit the cache (a hit changes no metadata: such an op is never cached, see
`same_inputs`), and `tensor.data = other`, which `install` makes forget. `requires_grad` and a
constant are read on every call.
"""

from __future__ import annotations

import torch
from torch._ops import HigherOrderOperator
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_leaves

_SCALARS = (int, float, bool, str, type(None))
_META = torch.device("meta")  # a device object: a "meta" string is parsed on every call
_HASHABLE = (torch.dtype, torch.device, torch.layout, torch.memory_format)


class Uncacheable(Exception):
    """This call's signature or output cannot be reproduced from metadata alone."""


_SIG = "_maya_sig"  # a fake tensor's cached signature, see the module docstring
_STORAGE = "_maya_storage"  # and its storage's identity (same lifetime: an op or `.data =` changes both)
_CPP = "_maya_device_in_cpp"  # True while C++ reads the tensor's device itself (see `install`)
# builtins of the fake device library (emulator/device/fake_cuda.cpp), set by `install`
_device_in_cpp = None
_device_in_python = None
_meta_empty = None  # (shape, stride, dtype) -> torch.empty_strided(..., device="meta")
_meta_view = None  # (base, shape, stride, offset, dtype) -> a meta tensor over base's storage
_seal = None  # (fake tensor, device index or -1, throw): its storage guards data_ptr writes; device in C++
_in_higher_order = 0  # > 0 while a higher-order op runs (see `install`)


def call_key(func, args: tuple, kwargs: dict, any_float: bool = False,
             fresh: bool = False) -> tuple[tuple, list[FakeTensor]] | None:
    """(hashable key, the call's fake tensors in key order), or None when the call must go the slow way.

    `any_float`: float arguments enter the key by type only. Right for ops whose output metadata
    cannot depend on a float's value (the `_foreach_*` family: an optimizer's bias corrections
    change every step, and without this its biggest ops would never hit); such a key is good for
    the outputs, not for the row (whose args JSON has the values). `fresh`: read every tensor's
    metadata anew (and re-cache it), for a call that may just have changed it."""
    parts: list = [id(func), torch.get_default_dtype()]  # an OpOverload hashes in Python; ops live as long as torch
    tensors: list[FakeTensor] = []
    try:
        _add(parts, tensors, args, any_float, fresh)
        if kwargs:
            parts.append(tuple(kwargs))
            _add(parts, tensors, kwargs.values(), any_float, fresh)
    except Uncacheable:
        return None
    return tuple(parts), tensors


def _add(parts: list, tensors: list, values, any_float: bool, fresh: bool) -> None:
    for v in values:
        t = type(v)
        if t is float and any_float:
            parts.append(float)
        elif t is FakeTensor:
            if v.constant is not None:
                raise Uncacheable
            sig = None if fresh else v.__dict__.get(_SIG)
            if sig is None:
                sig = signature_of(v)
            parts.append((sig, v.requires_grad))
            tensors.append(v)
        elif t in _SCALARS:
            parts.append((t, v))  # type too: 1, 1.0 and True hash equal but give different dtypes
        elif t is list or t is tuple:
            parts.append((t, len(v)))
            _add(parts, tensors, v, any_float, fresh)
        elif t in _HASHABLE:
            parts.append(v)
        else:
            raise Uncacheable  # real tensors, SymInts, generators, script objects, ...


def signature_of(v: FakeTensor) -> tuple:
    """What of a fake tensor's metadata only an op can change (read, and cached on the tensor)."""
    if v.layout is not torch.strided:
        raise Uncacheable
    sig = (tuple(v.shape), v.stride(), v.dtype, v.storage_offset(), v.fake_device, v.is_conj(), v.is_neg())
    v.__dict__[_SIG] = sig
    _answer_device_in_cpp(v, sig[4])  # a tensor the cache knows (see `install`)
    return sig


def forget_signatures(values) -> None:
    """Drop the cached signatures of the fake tensors among `values` (nested lists/tuples too):
    the call they went into may have changed their metadata."""
    for v in values:
        t = type(v)
        if t is FakeTensor:
            d = v.__dict__
            d.pop(_SIG, None)
            d.pop(_STORAGE, None)
            if d.pop(_CPP, False):
                _device_in_python(v)
        elif t is list or t is tuple:
            forget_signatures(v)


def _cpp_device_index(device: torch.device) -> int:
    """The device index C++ may answer for a fake tensor the cache knows, or -1: Python answers (see
    `install`)."""
    if _device_in_cpp is None or device.type != "cuda" or _in_higher_order:
        return -1
    return device.index or 0


def _answer_device_in_cpp(t: FakeTensor, device: torch.device) -> None:
    index = _cpp_device_index(device)
    if index >= 0:
        _device_in_cpp(t, index)
        t.__dict__[_CPP] = True


def storage_key(v: torch.Tensor) -> int:
    """Identity of a tensor's memory (views and wrappers of one buffer share it): its storage's `_cdata`,
    cached on a fake tensor (forgotten with its signature); `id(v)` for a tensor without a storage."""
    if isinstance(v, FakeTensor):
        d = v.__dict__
        key = d.get(_STORAGE)
        if key is None:
            key = d[_STORAGE] = v.untyped_storage()._cdata
        return key
    try:
        return v.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return id(v)


def install(device_functions: dict | None = None) -> None:
    """Hook the fast path into torch's fake tensors, once per process.

    1. `fake.data = other` replaces a fake tensor's metadata without an op: it must forget its
       cached signature (FakeTensor inherits `data` from torch's C tensor type; this wraps it).
    2. With the fake device library's functions (`emulator.device.boot.device_functions`): a fake CUDA tensor
       makes C++ ask Python for its device (~8 crossings per recorded op: autograd's input
       metadata, autocast's eligibility checks, backward's output validation), because inside a
       fake kernel the same tensor must say "meta". Tensors the signature cache knows answer in
       C++ instead (`device_in_cpp`); whatever does not hit the cache first
       calls `forget_signatures`, which turns Python back on, so no fake kernel ever sees it.
       A higher-order op (FlexAttention) traces its functions with fake tensors of its own making
       (`query.new_zeros`, its buffers) before the recorder sees it: its arguments turn Python
       back on at its entry, and no tensor answers in C++ until it returns.
    3. The same library builds rebuilt outputs' meta tensors in one call each (`meta_empty`,
       `meta_view`, `seal`); without it, `rebuild` makes them with torch's Python API.
    """
    global _device_in_cpp, _device_in_python, _meta_empty, _meta_view, _seal
    if device_functions is not None and _device_in_cpp is None:
        _device_in_cpp, _device_in_python = device_functions["device_in_cpp"], device_functions["device_in_python"]
        _meta_empty, _meta_view, _seal = (device_functions["meta_empty"], device_functions["meta_view"],
                                          device_functions["seal"])
    if getattr(torch.Tensor, "_maya_data_setter", False):
        return
    base = torch.Tensor.data  # torch's, or the device layer's that wraps it (emulator.device.fake_mode)

    def set_data(self, value):
        for t in (self, value):  # set_data copies the device fields too: both back to Python first
            if type(t) is FakeTensor:
                forget_signatures((t,))
        base.__set__(self, value)

    # on Tensor, not FakeTensor: a host tensor given fake data (`param.data = fake`) copies its fields too
    torch.Tensor.data = property(base.__get__, set_data, doc=base.__doc__)
    torch.Tensor._maya_data_setter = True

    call = HigherOrderOperator.__call__

    def higher_order_call(self, /, *args, **kwargs):
        global _in_higher_order
        forget_signatures(tree_leaves((args, kwargs)))
        _in_higher_order += 1
        try:
            return call(self, *args, **kwargs)
        finally:
            _in_higher_order -= 1

    HigherOrderOperator.__call__ = higher_order_call


def output_spec(out, inputs: list[FakeTensor]):
    """How to rebuild `out` from the inputs: a nested spec, or raise Uncacheable.

    A plain recursive function, not a closure: a self-referencing closure is a reference cycle
    that would keep the inputs alive until the next GC and so shift the emulated frees."""
    return _spec(out, inputs, [storage_key(t) for t in inputs], set())


def _spec(o, inputs: list, in_storages: list[int], seen_new: set[int]):
    t = type(o)
    if t is FakeTensor:
        for i, x in enumerate(inputs):
            if o is x:
                return ("same", i)
        if o.requires_grad or o.layout is not torch.strided or o.constant is not None or o.is_conj() or o.is_neg():
            raise Uncacheable
        shape, stride, offset = tuple(o.shape), tuple(o.stride()), o.storage_offset()
        dtype, device = o.dtype, o.fake_device
        sig = (shape, stride, dtype, offset, device, False, False)  # as signature_of would read it
        st = storage_key(o)
        if st in in_storages:
            return ("view", in_storages.index(st), shape, stride, dtype, offset, device, sig)
        if st in seen_new or offset != 0:
            raise Uncacheable
        seen_new.add(st)
        nbytes = o.untyped_storage().nbytes()
        if torch.empty_strided(shape, stride, dtype=dtype, device=_META).untyped_storage().nbytes() != nbytes:
            raise Uncacheable  # an output over a larger buffer than its shape needs
        # only device storages occupy the emulated GPU's memory (a fake CPU tensor is host memory)
        return ("new", shape, stride, dtype, device, nbytes if device.type == "cuda" else None, sig)
    if t is tuple or t is list:
        return (t, [_spec(x, inputs, in_storages, seen_new) for x in o])
    if t in _SCALARS:
        return ("value", o)
    raise Uncacheable


def rebuild(spec, inputs: list[FakeTensor], fake_mode, new: list):
    """A fresh output equal (in metadata and aliasing) to what the fake kernel returned for this key.

    Outputs with a fresh storage are appended to `new` as (tensor, storage bytes or None for a host
    storage): the only ones the allocator must see. Every rebuilt tensor carries its signature (see `call_key`)."""
    kind = spec[0]
    if kind == "new":
        _, shape, stride, dtype, device, nbytes, sig = spec
        if _meta_empty is not None:
            elem = _meta_empty(shape, stride, dtype)
        else:
            elem = torch.empty_strided(shape, stride, dtype=dtype, device=_META)
        t = new_fake(fake_mode, elem, device, sig)
        new.append((t, nbytes))
        return t
    if kind == "same":
        return inputs[spec[1]]
    if kind == "view":
        _, idx, shape, stride, dtype, offset, device, sig = spec
        # a plain meta tensor over the base's (meta) storage: no fake tensor is touched, so no mode is needed
        if _meta_view is not None:
            elem = _meta_view(inputs[idx], shape, stride, offset, dtype)
        else:
            elem = torch.empty(0, dtype=dtype, device=_META)
            elem.set_(inputs[idx].untyped_storage(), offset, shape, stride)
        return new_fake(fake_mode, elem, device, sig)
    if kind == "value":
        return spec[1]
    container, items = spec
    return container([rebuild(s, inputs, fake_mode, new) for s in items])


def new_fake(fake_mode, elem: torch.Tensor, device: torch.device, sig: tuple | None = None) -> FakeTensor:
    """`FakeTensor(fake_mode, elem, device)` for an already normalised device, without its Python overhead.

    The first call per mode builds one the ordinary way and keeps its attribute dict (constant,
    memo slots, ...): the attributes whose value is None become FakeTensor class defaults (a
    fresh tensor reads the same None; writing one still sets it on the tensor), the others are
    copied to every tensor, so later tensors get exactly the same state with a dict of four
    entries instead of twenty. `sig`: the tensor's signature when the caller knows it (see
    `call_key`). `elem` is a fresh meta tensor (no grad)."""
    template = getattr(fake_mode, "_maya_fake_template", None)
    if template is None:
        t = FakeTensor(fake_mode, elem, device)
        state = {k: v for k, v in t.__dict__.items() if k not in ("_fake_device", _SIG, _STORAGE, _CPP)}
        for k, v in state.items():
            if v is None and k not in vars(FakeTensor):
                setattr(FakeTensor, k, None)
        fake_mode._maya_fake_template = {k: v for k, v in state.items() if v is not None}
        return t
    t = torch.Tensor._make_subclass(FakeTensor, elem, False, dispatch_device=True, device_for_backend_keys=device)
    d = t.__dict__
    d.update(template)
    d["_fake_device"] = device
    if sig is not None:
        d[_SIG] = sig
    if _seal is not None:  # what follows, in one call
        index = _cpp_device_index(device) if sig is not None else -1  # a tensor with a signature: the cache knows it
        _seal(t, index, not fake_mode._allow_unsafe_data_ptr_access)
        if index >= 0:
            d[_CPP] = True
        return t
    if fake_mode._allow_unsafe_data_ptr_access:
        torch._C._set_warn_deprecated_on_mutable_data_ptr(t)
    else:
        torch._C._set_throw_on_mutable_data_ptr(t)
    if sig is not None:
        _answer_device_in_cpp(t, device)
    return t


def same_inputs(before: tuple, func, args: tuple, kwargs: dict, any_float: bool = False) -> bool:
    """False when the call changed an input's metadata (in-place view ops, resize_, set_)."""
    after = call_key(func, args, kwargs, any_float, fresh=True)
    return after is not None and after[0] == before
