"""Apex's fused layer norm for megatron-core, when Apex is not installed here.

megatron-core's local layer specs take `FusedLayerNorm` (Apex) when `import apex` works and torch's
`LayerNorm` otherwise, and torch's refuses sequence parallelism ("sequence parallel not supported by
torch LayerNorm"). Apex is a CUDA build: a GPU machine that trains Megatron with sequence parallelism
has it, this CPU machine cannot. So when megatron-core imports Apex and no real Apex is found, it gets
this stand-in: `apex.normalization.fused_layer_norm.FusedLayerNormAffineFunction` computed by torch's
`layer_norm`, which records one layer-norm kernel forward and one backward, as Apex's fused kernel
runs. Only imports made from megatron-core's own modules are served (other libraries probing for
Apex, e.g. transformers' `is_apex_available`, still see none until megatron-core has imported it),
and the stand-in is announced once on stderr.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

import torch

_MODULES = ("apex", "apex.normalization", "apex.normalization.fused_layer_norm")
NOTICE = ("maya: Apex is not installed here: megatron-core's FusedLayerNorm runs as torch's layer_norm "
          "(one kernel each way, as Apex's fused kernel; a GPU machine training with it has Apex)")


class FusedLayerNormAffineFunction:
    """Apex's autograd function, called as `apply(input, weight, bias, normalized_shape, eps[, memory_efficient])`."""

    @staticmethod
    def forward(ctx, input, weight, bias, normalized_shape, eps, memory_efficient=False):  # noqa: A002
        return torch.nn.functional.layer_norm(input, tuple(normalized_shape), weight, bias, eps)

    @staticmethod
    def apply(input, weight, bias, normalized_shape, eps, memory_efficient=False):  # noqa: A002
        return FusedLayerNormAffineFunction.forward(None, input, weight, bias, normalized_shape, eps, memory_efficient)


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
        if name not in _MODULES:
            return None
        if name == "apex":
            if not from_megatron():
                return None
            for finder in sys.meta_path:
                if finder is not self and hasattr(finder, "find_spec") and finder.find_spec(name, path, target):
                    return None  # a real Apex
        elif "apex" not in sys.modules or getattr(sys.modules["apex"], "__maya_standin__", False) is not True:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=name != _MODULES[-1])

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        module.__maya_standin__ = True
        if module.__name__ == "apex" and not ApexForMegatron.announced:
            ApexForMegatron.announced = True
            print(NOTICE, file=sys.stderr, flush=True)
        if module.__name__ == _MODULES[-1]:
            module.FusedLayerNormAffineFunction = FusedLayerNormAffineFunction


def install() -> None:
    if not any(isinstance(f, ApexForMegatron) for f in sys.meta_path):
        sys.meta_path.append(ApexForMegatron())  # last: a real Apex is always found first
