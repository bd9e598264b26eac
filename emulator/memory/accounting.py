"""Device memory of one emulated rank: every storage on the fake GPU goes through the caching allocator.

Why storages (not tensors): views share a storage, and a storage is freed when its last view
dies. The allocator and the bookkeeping live in the fake device library
(emulator/memory/device_memory.cpp, the C++ twin of `emulator.memory.allocator`): `own` takes a
block for a fake tensor's storage and hands the storage a deleter that gives the block back, so a
storage frees itself at the moment it dies, on whatever thread drops it, with no Python involved.
FSDP2 frees and re-grows parameter storages with `untyped_storage().resize_()`, which is not an
aten op, so `UntypedStorage.resize_` is wrapped.

When the allocator cannot fit a request, the script gets `torch.cuda.OutOfMemoryError` with the
real allocator's message, exactly where a GPU would have raised it, and the failed request takes
nothing (the allocator first releases its fully free cached segments, as CUDA's does). Every OOM is
counted here; whether it ended the rank or the program caught it and went on (a retry with a
smaller batch) is the session's to say. The recorder makes sure the exception does not keep the
program's tensors alive (see `Recorder.__torch_dispatch__`), so after `except OutOfMemoryError`
a `del` frees their blocks at once, as on a GPU.
"""

from __future__ import annotations

import time

import torch

from emulator.device import boot
from emulator.memory.allocator import oom_message, stats_dict

# What the CUDA context, cuBLAS/NCCL workspaces take before the first tensor (not allocatable).
CUDA_CONTEXT_BYTES = 512 * 2**20


class DeviceMemory:
    """Tracks live device storages of this rank through a caching allocator of the target's capacity.

    Needs the fake device library (`emulator.device.boot.boot` first)."""

    def __init__(self, total_bytes: int, enforce: bool = True, reserve_context: bool = True):
        fns = boot.memory_functions()
        if fns is None:
            raise RuntimeError("DeviceMemory needs the fake device library: call emulator.device.boot.boot() first")
        self.capacity = max(int(total_bytes) - (CUDA_CONTEXT_BYTES if reserve_context else 0), 1 << 20)
        self._alloc = fns["new_allocator"](self.capacity)
        self._own, self._see, self._resize = fns["own"], fns["see"], fns["resize"]
        self._figures, self._set_peaks, self._stats = fns["figures"], fns["set_peaks"], fns["stats"]
        self._empty_cache, self._reset_peak = fns["empty_cache"], fns["reset_peak"]
        self.enforce = enforce
        self.ooms = 0  # requests that did not fit, caught by the program or not
        self.oom_message: str | None = None  # the last one's
        self._orig_resize = None
        # CPU time of storage resizes, which run inside the program's code (FSDP resizes a storage):
        # emulator work that the recorder excludes from host gaps
        self.overhead_s = 0.0

    def _out_of_memory(self, segment: int) -> None:
        """A `segment`-byte cudaMalloc did not fit: counted, and the script hears it if enforced."""
        allocated, reserved, _, _ = self._figures(self._alloc)
        self.ooms += 1
        self.oom_message = oom_message(segment, self.capacity, reserved, allocated)
        if self.enforce:
            raise torch.cuda.OutOfMemoryError(self.oom_message)

    def see(self, t: torch.Tensor, stream: int) -> None:
        """Account for `t`'s storage if it is on the device and new."""
        if t.device.type != "cuda":
            return
        failed = self._see(self._alloc, t, stream)
        if failed:
            self._out_of_memory(failed)

    def see_fresh(self, t: torch.Tensor, nbytes: int, stream: int) -> None:
        """`see` for a device tensor known to own a storage of `nbytes` nobody has seen (the fast path's
        fresh outputs: their size comes from the signature cache, not from the storage)."""
        failed = self._own(self._alloc, t, nbytes, stream)
        if failed:
            self._out_of_memory(failed)

    def resized(self, storage, new_nbytes: int, stream: int) -> None:
        """`UntypedStorage.resize_` on a storage: if it is a device storage, its block goes back and one of
        the new size is taken."""
        failed = self._resize(self._alloc, storage._cdata, new_nbytes, stream)
        if failed > 0:
            self._out_of_memory(failed)

    def install_resize_hook(self, current_stream) -> None:
        orig = torch.UntypedStorage.resize_
        self._orig_resize = orig
        mem = self

        def resize_(storage, size):
            out = orig(storage, size)
            t0 = time.process_time()
            mem.resized(storage, int(size), current_stream())
            mem.overhead_s += time.process_time() - t0
            return out

        torch.UntypedStorage.resize_ = resize_

    def figures(self) -> tuple[int, int]:
        """(allocated, reserved) bytes now."""
        allocated, reserved, _, _ = self._figures(self._alloc)
        return allocated, reserved

    def peaks(self) -> tuple[int, int]:
        """(peak allocated, peak reserved) bytes since the start or the last `reset_peak`."""
        _, _, peak_allocated, peak_reserved = self._figures(self._alloc)
        return peak_allocated, peak_reserved

    def restore_peaks(self, peak_allocated: int, peak_reserved: int) -> None:
        """Put back peaks that the emulator's own tensors raised (host-gap price loops)."""
        self._set_peaks(self._alloc, peak_allocated, peak_reserved)

    def stats(self) -> dict:
        rows, counts = self._stats(self._alloc)
        return stats_dict(list(rows), *counts)

    def reset_peak(self) -> None:
        self._reset_peak(self._alloc)

    def empty_cache(self) -> None:
        self._empty_cache(self._alloc)
