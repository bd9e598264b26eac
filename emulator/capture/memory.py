"""Device memory of one emulated rank: every storage on the fake GPU goes through the caching allocator.

Why storages (not tensors): views share a storage, and a storage is freed when its last view
dies. A storage's Python object lives as long as its StorageImpl, so a weak reference to it
calls back exactly at the free (a plain `weakref.ref` with a callback, kept in `_live` next to
the allocator handle: `weakref.finalize` costs several times more, and this runs for every
tensor the program creates). FSDP2 frees and re-grows parameter storages with
`untyped_storage().resize_()`, which is not an aten op, so `UntypedStorage.resize_` is wrapped.

When the allocator cannot fit a request, the script gets `torch.cuda.OutOfMemoryError` with the
real allocator's message, exactly where a GPU would have raised it; the rank is marked OOM.
"""

from __future__ import annotations

import time
import weakref

import torch

from emulator.memory.allocator import CachingAllocator, OutOfMemory

# What the CUDA context, cuBLAS/NCCL workspaces take before the first tensor (not allocatable).
CUDA_CONTEXT_BYTES = 512 * 2**20


class DeviceMemory:
    """Tracks live device storages of this rank through a `CachingAllocator` of the target's capacity."""

    def __init__(self, total_bytes: int, enforce: bool = True, reserve_context: bool = True):
        capacity = int(total_bytes) - (CUDA_CONTEXT_BYTES if reserve_context else 0)
        self.allocator = CachingAllocator(max(capacity, 1 << 20))
        self.enforce = enforce
        self.oom = False
        self.oom_message: str | None = None
        self._live: dict[int, tuple[int, weakref.ref]] = {}  # storage cdata -> (allocator handle, its ref)
        # Storages that died since the allocator last ran, as (cdata, ref). A storage dies inside the
        # program's code; its free is applied when the allocator next runs (inside the recorder, whose
        # time is not host time) or is asked a figure, which gives the same numbers: frees can only
        # lower them, and every malloc and every reading comes after the frees before it.
        self._dead: list[tuple[int, weakref.ref]] = []
        self._orig_resize = None
        # CPU time of storage resizes, which run inside the program's code (FSDP resizes a storage):
        # emulator work that the recorder excludes from host gaps
        self.overhead_s = 0.0

    def _malloc(self, nbytes: int, stream: int) -> int:
        self._apply_frees()
        try:
            return self.allocator.malloc(nbytes, stream)
        except OutOfMemory as e:
            self.oom = True
            self.oom_message = str(e)
            if self.enforce:
                raise torch.cuda.OutOfMemoryError(str(e)) from None
            return 0

    def _apply_frees(self) -> None:
        if not self._dead:
            return
        dead, self._dead = self._dead, []
        live, free = self._live, self.allocator.free
        for key, ref in dead:
            entry = live.get(key)
            if entry is not None and entry[1] is ref:  # (a later storage may have the address by now)
                del live[key]
                if entry[0]:
                    free(entry[0])

    def _track(self, storage, key: int, handle: int) -> None:
        self._live[key] = (handle, weakref.ref(storage, lambda ref, key=key: self._dead.append((key, ref))))

    def see(self, t: torch.Tensor, stream: int) -> None:
        """Account for `t`'s storage if it is on the device and new."""
        if t.device.type != "cuda":
            return
        self._apply_frees()  # a dead storage's address may be this one's
        st = t.untyped_storage()
        key = st._cdata
        if key in self._live:
            return
        handle = self._malloc(st.nbytes(), stream)  # raises OutOfMemoryError before anything is tracked
        self._track(st, key, handle)

    def see_fresh(self, t: torch.Tensor, nbytes: int, stream: int) -> None:
        """`see` for a device tensor known to own a storage of `nbytes` nobody has seen (the fast path's
        fresh outputs: their size comes from the signature cache, not from the storage)."""
        st = t.untyped_storage()
        self._track(st, st._cdata, self._malloc(nbytes, stream))

    def resized(self, storage, new_nbytes: int, stream: int) -> None:
        """`UntypedStorage.resize_` on a device storage: free the old block, allocate the new size."""
        self._apply_frees()
        key = storage._cdata
        old = self._live.pop(key, None)
        if old is not None and old[0]:
            self.allocator.free(old[0])
        if new_nbytes > 0:
            self._track(storage, key, self._malloc(new_nbytes, stream))

    def install_resize_hook(self, current_stream) -> None:
        orig = torch.UntypedStorage.resize_
        self._orig_resize = orig
        mem = self

        def resize_(storage, size):
            out = orig(storage, size)
            if storage.device.type == "cuda":
                t0 = time.process_time()
                mem.resized(storage, int(size), current_stream())
                mem.overhead_s += time.process_time() - t0
            return out

        torch.UntypedStorage.resize_ = resize_

    @property
    def allocated(self) -> int:
        self._apply_frees()
        return self.allocator.allocated

    @property
    def reserved(self) -> int:
        self._apply_frees()
        return self.allocator.reserved

    def stats(self) -> dict:
        self._apply_frees()
        return self.allocator.stats()

    def reset_peak(self) -> None:
        self._apply_frees()
        self.allocator.reset_peak()

    def empty_cache(self) -> None:
        self._apply_frees()
        self.allocator.empty_cache()
