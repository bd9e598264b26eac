"""What third-party libraries see of the emulated device.

Hugging Face transformers asks `is_fake_tensor(x)` to detect tracing (torch.compile or export under
a FakeTensorMode) and then skips its data-dependent checks, e.g. whether the padding mask can be
dropped so that SDPA may run its flash kernel. The emulated device's tensors are FakeTensors
underneath, but the program is not being traced: on the GPUs it runs those checks, and their
values are known here when the data came from the host (`emulator.capture.shadows`). So for
tensors of the emulator's own fake mode the helper gives the GPU run's answer, no; tensors of a
FakeTensorMode the program makes itself still answer yes. The helper is replaced when its module
is first imported (a meta-path hook), so the program's `import transformers` is untouched.

DeepSpeed builds its fused CUDA ops (FusedAdam's `multi_tensor_adam`) with nvcc when first used;
a CPU build of torch has neither nvcc nor the CUDA headers, so `deepspeed.initialize` failed with
"CUDA_HOME environment variable is not set". Its op builders' `load()` hands out a stand-in made
of the torch op a GPU would run for the same work instead: FusedAdam becomes one
`_fused_adamw_` / `_fused_adam_` (torch's multi-tensor-apply Adam, one fused kernel over the
tensor lists, as DeepSpeed's); ZeRO-Offload's cpu_adam (a C++ op that builds here, but reads
host memory a fake host tensor does not have) becomes the same on the host tensors. Each
stand-in is announced once on stderr; ops without one keep DeepSpeed's own loader (and its error).

megatron-core's sequence parallelism needs Apex's fused layer norm (`emulator.capture.apex_standin`), and
Megatron's default masked-softmax fusion its fused softmax extensions (`emulator.capture.megatron_softmax`).
"""

from __future__ import annotations

import importlib.abc
import sys

import torch
from torch._subclasses.fake_tensor import FakeTensor

from emulator.capture import apex_standin, megatron_softmax


def install(fake_mode) -> None:
    apex_standin.install()
    megatron_softmax.install()
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name], fake_mode)
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(fake_mode))


def _patch_transformers(module, fake_mode) -> None:
    original = getattr(module, "is_fake_tensor", None)
    if original is None or getattr(original, "_maya", False):
        return

    def is_fake_tensor(x) -> bool:
        if isinstance(x, FakeTensor) and x.fake_mode is fake_mode:
            return False
        return original(x)

    is_fake_tensor._maya = True
    module.is_fake_tensor = is_fake_tensor


class _FusedAdam:
    """DeepSpeed's fused_adam op module: `multi_tensor_adam(chunk, noop_flag, [g, p, m, v], lr, beta1, beta2,
    eps, step, adam_w_mode, bias_correction, weight_decay)` as torch's fused multi-tensor Adam."""

    def __init__(self):
        self._steps: dict = {}  # device -> a step tensor (fake: its value is never read)

    def multi_tensor_adam(self, chunk_size, noop_flag, tensor_lists, lr, beta1, beta2, eps, step, mode,
                          bias_correction, weight_decay):
        grads, params, exp_avgs, exp_avg_sqs = tensor_lists
        if not bias_correction:
            raise NotImplementedError("maya: DeepSpeed FusedAdam with bias_correction=False has no torch stand-in")
        device = params[0].device
        state = self._steps.get(device)
        if state is None:
            state = self._steps[device] = torch.zeros((), dtype=torch.float32, device=device)
        fused = torch._fused_adamw_ if mode else torch._fused_adam_
        fused(params, grads, exp_avgs, exp_avg_sqs, [], [state] * len(params), lr=lr, beta1=beta1, beta2=beta2,
              weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=False)


class _CPUAdam:
    """DeepSpeed's cpu_adam op module (ZeRO-Offload's optimizer). Its C++ kernel reads the tensors' host
    memory, which fake host tensors (a fake device tensor's `.to("cpu")`) do not have: it crashed the
    rank (SIGSEGV). The stand-in runs torch's fused Adam on them instead."""

    def __init__(self):
        self._modes: dict[int, bool] = {}

    def create_adam(self, opt_id, lr, beta1, beta2, eps, weight_decay, adamw_mode, should_log=False):
        self._modes[opt_id] = bool(adamw_mode)

    def destroy_adam(self, opt_id):
        self._modes.pop(opt_id, None)

    def adam_update(self, opt_id, step, lr, beta1, beta2, eps, weight_decay, bias_correction, params, grads,
                    exp_avg, exp_avg_sq):
        if not bias_correction:
            raise NotImplementedError("maya: DeepSpeed CPUAdam with bias_correction=False has no torch stand-in")
        fused = torch._fused_adamw_ if self._modes.get(opt_id, True) else torch._fused_adam_
        steps = [torch.tensor(float(step), device=params.device)]
        fused([params], [grads.to(params.dtype)], [exp_avg], [exp_avg_sq], [], steps, lr=lr, beta1=beta1,
              beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=False)

    def adam_rollback(self, *args):
        raise NotImplementedError("maya: DeepSpeed CPUAdam rollback has no torch stand-in")


_DEEPSPEED_STANDINS = {"fused_adam": ("torch._fused_adamw_ / torch._fused_adam_", _FusedAdam),
                       "cpu_adam": ("torch._fused_adamw_ on host tensors", _CPUAdam)}


def _patch_deepspeed_builder(module, fake_mode) -> None:
    builder = getattr(module, "OpBuilder", None)
    original = getattr(builder, "load", None)
    if original is None or getattr(original, "_maya", False):
        return
    made: dict = {}

    def load(self, verbose=True):
        entry = _DEEPSPEED_STANDINS.get(getattr(self, "NAME", None))
        if entry is None:
            return original(self, verbose)
        if self.NAME not in made:
            print(f"maya: DeepSpeed's {self.NAME} (a CUDA op) runs as {entry[0]}", file=sys.stderr)
            made[self.NAME] = entry[1]()
        return made[self.NAME]

    load._maya = True
    builder.load = load


_PATCHES = {"transformers.utils.import_utils": _patch_transformers,
            "deepspeed.ops.op_builder.builder": _patch_deepspeed_builder}


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds the modules of `_PATCHES` with the other finders and patches each right after it executes."""

    def __init__(self, fake_mode):
        self.fake_mode = fake_mode

    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, self.fake_mode)
                return spec
        return None


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner, fake_mode):
        self.inner, self.fake_mode = inner, fake_mode

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        _PATCHES[module.__name__](module, self.fake_mode)
