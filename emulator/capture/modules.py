"""Which nn.Module an op belongs to, in forward and in backward.

Forward: global module pre/post hooks keep a per-thread stack of module paths.
Backward: every autograd node created in forward gets a sequence number; the recorder notes,
for each forward op, the number of the node being created (`_get_sequence_nr() - 1`) and the
module at that moment; in backward, `torch._C._current_autograd_node()` gives the node being
executed and so the module whose forward created it.

Why not torch.utils.module_tracker.ModuleTracker: its backward tracking puts multi-grad hooks
on module inputs, which breaks `torch.autograd.grad` with leaf inputs (pipelining's backward
shape inference fails with "A leaf node was passed to _will_engine_execute_node").
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook


class ModuleStack:
    def __init__(self):
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._local = threading.local()
        self.by_node: dict[int, str] = {}  # autograd node sequence number -> module path
        self._handles = []
        self.overhead_s = 0.0  # CPU time spent in the hooks (emulator work, excluded from host gaps)
        # module calls since the recorder last read it: the hooks make each call take torch's slow path,
        # whose cost outside the hooks' timed bodies the recorder prices per call (`module_call_cost`)
        self.calls = 0
        self._paused = False

    def _stack(self) -> list[str]:
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        return st

    def name_of(self, mod: torch.nn.Module) -> str:
        """`Root.child.grandchild` (ModuleList indices included); a module first seen names its subtree."""
        name = self._names.get(mod)
        if name is None:
            name = type(mod).__name__
            for sub_name, sub in mod.named_modules():
                if sub not in self._names:
                    self._names[sub] = f"{name}.{sub_name}" if sub_name else name
        return name

    def _pre(self, mod, args):
        if self._paused:
            return
        t0 = time.process_time()
        self._stack().append(self.name_of(mod))
        self.calls += 1
        self.overhead_s += time.process_time() - t0

    def _post(self, mod, args, out):
        if self._paused:
            return
        t0 = time.process_time()
        st = self._stack()
        if st:
            st.pop()
        self.overhead_s += time.process_time() - t0

    def __enter__(self):
        self._handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        return False

    @contextlib.contextmanager
    def paused(self):
        """Module hooks do nothing inside (work of the emulator's own that runs modules)."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def pause(self) -> None:
        """Hooks off while Dynamo traces a compiled function (it would trace them into the graph)."""
        self._paused_handles, self._handles = self._handles, []
        for h in self._paused_handles:
            h.remove()

    def resume(self) -> None:
        if getattr(self, "_paused_handles", None):
            self._paused_handles = []
            self.__enter__()

    def current(self, backward: bool) -> str:
        st = self._stack()
        if st:
            module = st[-1]
            if not backward:
                self.by_node[torch._C._autograd._get_sequence_nr() - 1] = module
            return module
        if backward:
            node = torch._C._current_autograd_node()
            if node is not None:
                try:
                    return self.by_node.get(node._sequence_nr(), "")
                except (AttributeError, RuntimeError):
                    return ""
        return ""

    def forget_nodes(self) -> None:
        """Drop the node map (called at each optimizer step: that iteration's backward is done)."""
        self.by_node.clear()
