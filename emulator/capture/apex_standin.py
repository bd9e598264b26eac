"""Apex's fused layer norm for megatron-core, when Apex is not installed here.

megatron-core's local layer specs take `FusedLayerNorm` (Apex) when `import apex` works and torch's
`LayerNorm` otherwise, and torch's refuses sequence parallelism ("sequence parallel not supported by
torch LayerNorm"). Apex is a CUDA build: a GPU machine that trains Megatron with sequence parallelism
has it, this CPU machine cannot. So when megatron-core imports Apex and no real Apex is found, it gets
this stand-in: `apex.normalization.fused_layer_norm.FusedLayerNormAffineFunction` computed by torch's
`layer_norm`, which records one layer-norm kernel forward and one backward, as Apex's fused kernel
runs. Its optimizer's multi-tensor helpers are served the same way: `amp_C` (Apex's built extension:
`multi_tensor_l2norm`, `multi_tensor_scale`) and `apex.multi_tensor_apply.multi_tensor_applier`. Without
them megatron-core falls back to per-tensor loops (a norm, a multiply and a copy per parameter for
gradient clipping, and a copy per parameter from the fp32 main weights back to the model), which is not
what a GPU machine with Apex runs; the stand-ins run torch's `_foreach_` kernels, one multi-tensor
launch per list as Apex's. Only imports made from megatron-core's own modules are served (other
libraries probing for Apex, e.g. transformers' `is_apex_available`, still see none until megatron-core
has imported it), and the stand-in is announced once on stderr.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

import torch

_MODULES = ("apex", "apex.normalization", "apex.normalization.fused_layer_norm", "apex.multi_tensor_apply")
_EXTENSION = "amp_C"  # Apex's built multi-tensor kernels: a top-level module, served like the package
NOTICE = ("maya: Apex is not installed here: megatron-core's FusedLayerNorm runs as torch's layer_norm "
          "and its multi-tensor helpers (amp_C) as torch's _foreach_ kernels (one launch per list, as "
          "Apex's; a GPU machine training with it has Apex)")


class FusedLayerNormAffineFunction:
    """Apex's autograd function, called as `apply(input, weight, bias, normalized_shape, eps[, memory_efficient])`."""

    @staticmethod
    def forward(ctx, input, weight, bias, normalized_shape, eps, memory_efficient=False):  # noqa: A002
        return torch.nn.functional.layer_norm(input, tuple(normalized_shape), weight, bias, eps)

    @staticmethod
    def apply(input, weight, bias, normalized_shape, eps, memory_efficient=False):  # noqa: A002
        return FusedLayerNormAffineFunction.forward(None, input, weight, bias, normalized_shape, eps, memory_efficient)


def multi_tensor_applier(op, noop_flag, tensor_lists, *args):
    """`apex.multi_tensor_apply.multi_tensor_applier`: Apex's op called with its default chunk size."""
    return op(2048 * 32, noop_flag, tensor_lists, *args)


def multi_tensor_l2norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
    """`amp_C.multi_tensor_l2norm`: (the L2 norm of all tensors of the list as a 1-element tensor, the
    per-tensor norms or an empty tensor)."""
    norms = torch._foreach_norm(tensor_lists[0])
    total = torch.linalg.vector_norm(torch.stack(norms)).reshape(1)
    return total, (torch.stack(norms) if per_tensor else total.new_empty(0))


def multi_tensor_scale(chunk_size, noop_flag, tensor_lists, scale):
    """`amp_C.multi_tensor_scale`: dst = src * scale over two lists (a copy when scale is 1, in place when
    the lists are the same)."""
    src, dst = tensor_lists
    if scale == 1.0:
        torch._foreach_copy_(dst, src)
    elif src is dst:
        torch._foreach_mul_(dst, scale)
    else:
        torch._foreach_copy_(dst, torch._foreach_mul(src, scale))


def from_megatron() -> bool:
    """Whether the import being served was made from one of megatron's own modules."""
    frame = sys._getframe(1)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("megatron."):
            return True
        frame = frame.f_back
    return False


class ApexForMegatron(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the stand-in modules to megatron-core's imports when no other finder has Apex."""

    announced = False

    def find_spec(self, name, path, target=None):
        if name not in _MODULES and name != _EXTENSION:
            return None
        if name in ("apex", _EXTENSION):
            if not from_megatron():
                return None
            for finder in sys.meta_path:
                if finder is not self and hasattr(finder, "find_spec") and finder.find_spec(name, path, target):
                    return None  # a real Apex
        elif "apex" not in sys.modules or getattr(sys.modules["apex"], "__maya_standin__", False) is not True:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=name in _MODULES[:2])

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        module.__maya_standin__ = True
        if module.__name__ == "apex" and not ApexForMegatron.announced:
            ApexForMegatron.announced = True
            print(NOTICE, file=sys.stderr, flush=True)
        if module.__name__ == "apex.normalization.fused_layer_norm":
            module.FusedLayerNormAffineFunction = FusedLayerNormAffineFunction
        elif module.__name__ == "apex.multi_tensor_apply":
            module.multi_tensor_applier = multi_tensor_applier
        elif module.__name__ == _EXTENSION:
            module.multi_tensor_l2norm = multi_tensor_l2norm
            module.multi_tensor_scale = multi_tensor_scale


def install() -> None:
    if not any(isinstance(f, ApexForMegatron) for f in sys.meta_path):
        sys.meta_path.append(ApexForMegatron())  # last: a real Apex is always found first
