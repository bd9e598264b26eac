"""What third-party libraries see of the emulated device.

Hugging Face transformers asks `is_fake_tensor(x)` to detect tracing (torch.compile or export under
a FakeTensorMode) and then skips its data-dependent checks, e.g. whether the padding mask can be
dropped so that SDPA may run its flash kernel. The emulated device's tensors are FakeTensors
underneath, but the program is not being traced: on the GPUs it runs those checks, and their
values are known here when the data came from the host (`emulator.capture.shadows`). So for
tensors of the emulator's own fake mode the helper gives the GPU run's answer, no; tensors of a
FakeTensorMode the program makes itself still answer yes. The helper is replaced when its module
is first imported (a meta-path hook), so the program's `import transformers` is untouched.
"""

from __future__ import annotations

import importlib.abc
import sys

from torch._subclasses.fake_tensor import FakeTensor

_MODULE = "transformers.utils.import_utils"


def install(fake_mode) -> None:
    if _MODULE in sys.modules:
        _patch(sys.modules[_MODULE], fake_mode)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(fake_mode))


def _patch(module, fake_mode) -> None:
    original = getattr(module, "is_fake_tensor", None)
    if original is None or getattr(original, "_maya", False):
        return

    def is_fake_tensor(x) -> bool:
        if isinstance(x, FakeTensor) and x.fake_mode is fake_mode:
            return False
        return original(x)

    is_fake_tensor._maya = True
    module.is_fake_tensor = is_fake_tensor


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds `_MODULE` with the other finders and patches it right after it executes."""

    def __init__(self, fake_mode):
        self.fake_mode = fake_mode

    def find_spec(self, name, path, target=None):
        if name != _MODULE:
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
        _patch(module, self.fake_mode)
