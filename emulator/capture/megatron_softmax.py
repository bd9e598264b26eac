"""Megatron's fused softmax kernels for megatron-core, when their CUDA extensions are not built here.

Megatron-LM trains with `--masked-softmax-fusion` on by default: megatron-core's `FusedScaleMaskSoftmax`
then runs the attention softmax as one CUDA kernel each way (`scaled_upper_triang_masked_softmax_cuda`
for causal masks, `scaled_masked_softmax_cuda` and `scaled_softmax_cuda` otherwise), extensions
that Megatron-LM and Apex compile with nvcc on the GPU machine. A CPU build of torch cannot build
them, so a program that asks for the fusion stopped with `No module named 'scaled_masked_softmax_cuda'`,
and one that turns it off records torch's fallback instead (a cast, a mask fill, a softmax, a cast:
four kernels where the GPU runs one).

When an import from megatron's own modules finds no real extension, it gets these stand-ins: each
kernel is the one torch op that does the same work in one pass (`_masked_softmax` with the causal
mask, `softmax`, and `_softmax_backward_data` for the backward), so the trace has one kernel row
each way as on the GPU. A scale other than 1 is one extra multiply (megatron-core passes 1 unless
`apply_query_key_layer_scaling` is set; the kernel folds it in). `get_batch_per_block` is the
kernels' launch arithmetic, which megatron-core uses to decide whether the fused kernel applies.
The stand-in is announced once on stderr.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

import torch

from emulator.capture.apex_standin import from_megatron

NOTICE = ("maya: Megatron's fused softmax extensions are not built here: each runs as one torch softmax "
          "kernel each way, as the fused kernel does on a GPU machine that has built them")
_CAUSAL_MASKS: dict[tuple, tuple] = {}


def _scaled(x: torch.Tensor, scale) -> torch.Tensor:
    return x if float(scale) == 1.0 else x * float(scale)


def _causal_mask(sq: int, sk: int, device) -> torch.Tensor:
    """True above the diagonal (masked out); made once per shape and device, as the kernel computes it."""
    mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    key = (sq, sk, str(device), id(mode))
    if key not in _CAUSAL_MASKS:
        # the mode is kept with its mask, so its id is not reused while the mask is cached
        _CAUSAL_MASKS[key] = (mode, torch.ones(sq, sk, dtype=torch.bool, device=device).triu(1))
    return _CAUSAL_MASKS[key][1]


def _backward(output_grads: torch.Tensor, softmax_results: torch.Tensor, scale) -> torch.Tensor:
    grad = torch._softmax_backward_data(output_grads, softmax_results, -1, softmax_results.dtype)
    return _scaled(grad, scale)


class _UpperTriang:
    """`scaled_upper_triang_masked_softmax_cuda`: inputs (attention batches, sq, sk), causal."""

    @staticmethod
    def forward(inputs: torch.Tensor, scale) -> torch.Tensor:
        b, sq, sk = inputs.shape
        x = _scaled(inputs, scale).view(1, b, sq, sk)
        return torch._masked_softmax(x, _causal_mask(sq, sk, inputs.device), -1, 0).view(b, sq, sk)

    backward = staticmethod(_backward)


class _Masked:
    """`scaled_masked_softmax_cuda`: inputs (b, heads, sq, sk), mask (b or 1, 1, sq, sk), True = masked."""

    @staticmethod
    def forward(inputs: torch.Tensor, mask: torch.Tensor, scale) -> torch.Tensor:
        return torch._masked_softmax(_scaled(inputs, scale), mask.expand_as(inputs), -1, 2)

    backward = staticmethod(_backward)

    @staticmethod
    def get_batch_per_block(query_seq_len: int, key_seq_len: int, batches: int, attn_heads: int) -> int:
        """Rows one 128-thread block handles: a warp as wide as the keys' next power of two (at most 32), two
        rows a warp up to 128 keys."""
        next_power_of_two = 1 << max(int(key_seq_len) - 1, 0).bit_length()
        warp_size = min(next_power_of_two, 32)
        batches_per_warp = 2 if next_power_of_two <= 128 else 1
        return (128 // warp_size) * batches_per_warp


class _Plain:
    """`scaled_softmax_cuda`: inputs (b, heads, sq, sk), no mask."""

    @staticmethod
    def forward(inputs: torch.Tensor, scale) -> torch.Tensor:
        return torch.softmax(_scaled(inputs, scale), -1)

    backward = staticmethod(_backward)


_KERNELS = {
    "scaled_upper_triang_masked_softmax_cuda": _UpperTriang,
    "scaled_masked_softmax_cuda": _Masked,
    "scaled_softmax_cuda": _Plain,
}


class MegatronSoftmaxFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the stand-ins to megatron's imports when no other finder has the built extension."""

    announced = False

    def find_spec(self, name, path, target=None):
        if name not in _KERNELS or not from_megatron():
            return None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec") and finder.find_spec(name, path, target):
                return None  # a real, built extension
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        kernel = _KERNELS[module.__name__]
        for attr in ("forward", "backward", "get_batch_per_block"):
            if hasattr(kernel, attr):
                setattr(module, attr, getattr(kernel, attr))
        module.__maya_standin__ = True
        if not MegatronSoftmaxFinder.announced:
            MegatronSoftmaxFinder.announced = True
            print(NOTICE, file=sys.stderr, flush=True)


def install() -> None:
    if not any(isinstance(f, MegatronSoftmaxFinder) for f in sys.meta_path):
        sys.meta_path.append(MegatronSoftmaxFinder())  # last: a built extension is always found first
