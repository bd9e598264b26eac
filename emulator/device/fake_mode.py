"""Fake tensors for the emulated device, and the policies PyTorch needs to treat them as a GPU's.

Why each piece exists (all verified on torch 2.13 CPU):
- `EmuFakeMode.avoid_device_init` stays True although `torch.cuda.is_available()` now says
  True: otherwise FakeTensorMode would try to initialise (real) CUDA for constant propagation.
- `FakeTensor` joins the foreach-supported types, so optimizers and `clip_grad_norm_` take the
  `_foreach_*` / fused path a real GPU takes instead of the per-parameter loop.
- `model.cuda()` converts parameters in place (`swap_module_params_on_conversion`, whose swaps
  become `param.data = fake`, the GPU's path) and the fake mode's memo is dropped first; without
  this tied weights silently come untied (GPT-2 counted 163 M instead of 124 M parameters).
- Data-dependent results (`.item()`, `nonzero`, boolean masks, `unique`) have no value on a
  fake device. They get documented placeholders: scalars read as 0 / 0.0 / False, and
  dynamic-size outputs take their upper bound (every element selected). Each use is counted.
- Ops torch ships without a fake kernel whose output is shaped like their input (the fused masked
  softmax) get one here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.utils
from torch._subclasses import fake_impls
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

aten = torch.ops.aten

# Placeholders for data-dependent values (documented in the summary under `placeholders`).
SCALAR_PLACEHOLDER = {"bool": False, "int": 0, "float": 0.0}


class EmuFakeMode(FakeTensorMode):
    """FakeTensorMode that never initialises a real device, even when torch.cuda says it exists."""

    @property
    def avoid_device_init(self) -> bool:  # type: ignore[override]
        return True


_placeholder_hook: list[Callable[[str], None]] = []


def _note_placeholder(kind: str) -> None:
    for hook in _placeholder_hook:
        hook(kind)


def _scalar_placeholder(fake_mode, func, arg, *rest):
    if arg.dtype == torch.bool:
        _note_placeholder("item_bool")
        return SCALAR_PLACEHOLDER["bool"]
    if arg.dtype.is_floating_point or arg.dtype.is_complex:
        _note_placeholder("item_float")
        return SCALAR_PLACEHOLDER["float"]
    _note_placeholder("item_int")
    return SCALAR_PLACEHOLDER["int"]


def _nonzero_upper_bound(fake_mode, func, arg, *rest, **kwargs):
    _note_placeholder("nonzero")
    with fake_mode:
        return torch.empty((arg.numel(), arg.dim()), dtype=torch.int64, device=arg.device)


def _masked_select_upper_bound(fake_mode, func, self, mask, *rest):
    _note_placeholder("masked_select")
    n = torch.broadcast_shapes(self.shape, mask.shape).numel()
    with fake_mode:
        return torch.empty((n,), dtype=self.dtype, device=self.device)


def _unique_upper_bound(fake_mode, func, arg, sorted=True, return_inverse=False, return_counts=False, *rest):
    _note_placeholder("unique")
    with fake_mode:
        values = torch.empty((arg.numel(),), dtype=arg.dtype, device=arg.device)
        inverse = torch.empty(arg.shape if return_inverse else (0,), dtype=torch.int64, device=arg.device)
        counts = torch.empty((arg.numel() if return_counts else 0,), dtype=torch.int64, device=arg.device)
    return values, inverse, counts


def _pin_memory_copy(fake_mode, func, arg, *rest, **kwargs):
    # a fake host tensor (a fake device tensor's copy to the host) pins as a fresh fake host tensor;
    # FakeTensorMode has no rule for it (FSDP1's CPU offload pins its sharded flat parameters)
    with fake_mode:
        return torch.empty_like(arg)


def _like_first_input(fake_mode, func, arg, *rest, **kwargs):
    # one output of the first input's shape and dtype, and no fake kernel in torch: the fused masked
    # softmax (nn.MultiheadAttention's fast path, Megatron-style causal softmax) and its backward
    with fake_mode:
        return torch.empty_like(arg, memory_format=torch.contiguous_format)


def _install_placeholders() -> None:
    table = fake_impls.op_implementations_dict
    table[aten._local_scalar_dense.default] = _scalar_placeholder
    table[aten.item.default] = _scalar_placeholder
    table[aten.nonzero.default] = _nonzero_upper_bound
    table[aten.masked_select.default] = _masked_select_upper_bound
    table[aten._unique2.default] = _unique_upper_bound
    table[aten._pin_memory.default] = _pin_memory_copy
    table[aten._masked_softmax.default] = _like_first_input
    table[aten._masked_softmax_backward.default] = _like_first_input


def _install_foreach() -> None:
    import torch.optim.optimizer as optim_mod
    import torch.utils._foreach_utils as foreach_utils

    for types in (optim_mod._foreach_supported_types, foreach_utils._foreach_supported_types):
        if FakeTensor not in types:
            types.append(FakeTensor)


_ADOPTERS = (torch.Tensor, torch.nn.Parameter, FakeTensor)  # the types `t.data = fake` serves


def _install_swap_fix(fake_mode: EmuFakeMode) -> None:
    torch.__future__.set_swap_module_params_on_conversion(True)
    original = torch.utils.swap_tensors
    if getattr(original, "_maya", False):
        return
    converter = fake_mode.fake_tensor_converter

    def swap_tensors(t1, t2):
        # The fake mode's meta-converter memo holds weakrefs to converted tensors (keys: the real
        # tensor, values: its fake); swap_tensors refuses tensors with weakrefs. Forget both
        # (they are re-converted on next use).
        meta = converter.meta_converter
        for t in (t1, t2):
            tid = meta.describer.lookup_tensor.pop(t, None)
            if tid is not None:
                meta.tensor_memo.pop(tid, None)
        for tid, v in list(meta.tensor_memo.items()):
            if v is t1 or v is t2:
                meta.tensor_memo.pop(tid, None)
        if type(t2) is FakeTensor and type(t1) in _ADOPTERS and getattr(torch.Tensor, "_maya_data_adoption", False) \
                and torch._has_compatible_shallow_copy_type(t1, t2):
            # `module.to(device or dtype)`: a GPU run takes `param.data = new` here (torch picks a
            # swap only because the new tensor is fake), which keeps the parameter's identity and
            # cares for no weak reference (DeepSpeed's name map holds a weakref.finalize on every
            # parameter: "Cannot swap t1 because it has weakref associated with it"). Where a GPU
            # run makes a new parameter instead (`to_empty` from "meta": incompatible types), swap.
            t1.data = t2
            return None
        return original(t1, t2)

    swap_tensors._maya = True
    torch.utils.swap_tensors = swap_tensors
    import torch.nn.modules.module as module_mod
    if hasattr(module_mod, "swap_tensors"):
        module_mod.swap_tensors = swap_tensors


def _install_data_adoption(python_dispatch) -> None:
    """`tensor.data = fake` on a host tensor makes it that fake tensor in place, identity and autograd kept.

    Why: FSDP1 moves parameters with `param.data = param.to(device)` (and DeepSpeed the same way,
    see `_install_swap_fix`). torch's set_data copies the fake's storage, sizes and backend keys
    but keeps the destination's (absent) Python keys, so a real CPU parameter became a plain tensor
    on "meta" that no fake kernel saw ("Inconsistent compute device ... meta vs cuda:0"). Here it
    takes FakeTensor's class, attributes and dispatch arrangement (`python_dispatch`, a device
    library builtin), keeping what `.data =` promises: the same Python object, its requires_grad,
    grad and hooks. `fake.data = fake2` also takes fake2's device, a Python attribute set_data does
    not know of (FSDP1's CPU offload: `flat_param.data = flat_param.to("cpu")`).
    Wraps whatever `Tensor.data` is now, so the signature cache's own wrapper
    (`emulator.capture.fastpath.install`, which makes both tensors answer their device in Python
    before the copy) composes with it in either order."""
    if getattr(torch.Tensor, "_maya_data_adoption", False):
        return
    base = torch.Tensor.data

    def set_data(self, value):
        base.__set__(self, value)
        if type(value) is not FakeTensor:
            return
        if isinstance(self, FakeTensor):
            self.fake_device = value.fake_device
            return
        is_param = isinstance(self, torch.nn.Parameter)
        for k, v in value.__dict__.items():  # fake_device, fake_mode, constant, the memos
            if not k.startswith("_maya"):  # not the signature cache's entries (emulator.capture.fastpath)
                self.__dict__.setdefault(k, v)
        self.__class__ = FakeTensor  # what swap_tensors does to a Parameter in `module.to`
        if is_param:
            self._is_param = True  # isinstance(self, nn.Parameter) stays True (Parameter's metaclass)
        python_dispatch(self, True)

    torch.Tensor.data = property(base.__get__, set_data, doc=base.__doc__)
    torch.Tensor._maya_data_adoption = True


def make_fake_mode(on_placeholder: Callable[[str], None] | None = None) -> EmuFakeMode:
    """The fake mode device ops run under, with the GPU-like policies installed."""
    mode = EmuFakeMode(allow_non_fake_inputs=True)
    _install_placeholders()
    _install_foreach()
    _install_swap_fix(mode)
    from emulator.device import boot

    functions = boot.device_functions()
    if functions is not None:
        _install_data_adoption(functions["python_dispatch"])
    _placeholder_hook.clear()
    if on_placeholder is not None:
        _placeholder_hook.append(on_placeholder)
    return mode


def is_wrapper_subclass(x) -> bool:
    """DTensor, AsyncCollectiveTensor...: tensor subclasses that unwrap themselves to plain ops."""
    return isinstance(x, torch.Tensor) and type(x) not in (torch.Tensor, torch.nn.Parameter, FakeTensor) \
        and not isinstance(x, FakeTensor) and torch._C._dispatch_keys(x).has(torch._C.DispatchKey.Python)
