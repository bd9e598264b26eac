"""A model of PyTorch's CUDA caching allocator, so emulated ranks report real-looking memory.

Why a model and not a counter: what decides whether a job fits on a GPU is *reserved*
memory (what cudaMalloc handed out), not the sum of live tensors. The caching allocator
rounds requests, carves them out of 2 MiB / 20 MiB / exact-size segments, keeps freed
blocks cached per stream and only returns memory to the driver when an allocation would
otherwise fail. Fragmentation from that policy routinely costs a few GiB on large jobs, and a
job whose live tensors fit can still OOM. The behaviour modelled here follows
c10/cuda/CUDACachingAllocator.cpp with its default configuration (no max_split_size, no
expandable segments, no garbage-collection threshold):

- every request is rounded up to a multiple of 512 B;
- requests <= 1 MiB come from the small pool, carved out of 2 MiB segments; larger ones from
  the large pool: a 20 MiB segment for requests < 10 MiB, else a segment rounded to 2 MiB;
- a request takes the smallest cached free block of the same pool *and stream* that fits
  (best fit, ties by address); the block is split when the remainder is worth keeping
  (small pool: >= 512 B, large pool: > 1 MiB);
- a freed block merges with free neighbours of its segment;
- when a new segment would exceed the device capacity, every fully free cached segment is
  released and the allocation retried (counted in `num_alloc_retries`); if it still does not
  fit, `OutOfMemory` is raised with the text the real allocator uses, and nothing changes;
- `empty_cache()` releases every fully free segment, except those of CUDA-graph private pools:
  streams from PRIVATE_POOL_STREAMS on are a captured graph's pool (the recorder allocates a
  capture there), kept reserved for the graph as a live graph's pool is, through empty_cache and
  the out-of-memory retry alike.

This module is the reference model: readable, tested on its own (tests/emulator/test_allocator.py)
and importable anywhere. An emulated rank runs its C++ twin (emulator/memory/device_memory.cpp,
the same policy line for line; a malloc and its free cost ~0.5-1 us there against 10-14 us here,
measured in an emulated rank), which tests/emulator/programs/allocator_twin.py holds to this model
figure for figure. A change of policy goes into both. Here free blocks live in one sorted list of integer keys per pool:
`(stream, size, address)` packed into one Python int, which makes best fit a single `bisect`.
"""

from __future__ import annotations

from bisect import bisect_left, insort

MIN_BLOCK = 512  # every allocation is a multiple of this
PRIVATE_POOL_STREAMS = 1 << 40  # stream keys of CUDA-graph private pools (see the module docstring)
SMALL_SIZE = 1 << 20  # requests up to this size use the small pool
SMALL_BUFFER = 2 << 20  # small-pool segment size
LARGE_BUFFER = 20 << 20  # segment for large requests below MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20  # larger segments are rounded to this

_ADDR_BITS = 52  # virtual addresses below 4 PiB
_SIZE_BITS = 48  # sizes below 256 TiB
_SIZE_SHIFT = _ADDR_BITS
_STREAM_SHIFT = _ADDR_BITS + _SIZE_BITS
_ADDR_MASK = (1 << _ADDR_BITS) - 1

_SMALL, _LARGE = 0, 1
_POOL_NAMES = ("small_pool", "large_pool")


class OutOfMemory(Exception):
    """The emulated device ran out of memory (the text matches torch.cuda.OutOfMemoryError's)."""

    def __init__(self, message: str, requested: int = 0):
        super().__init__(message)
        self.requested = requested


def round_size(nbytes: int) -> int:
    """Bytes a request really occupies: at least 512, a multiple of 512."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return (nbytes + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


def segment_size(rounded: int) -> int:
    """Size of the cudaMalloc the allocator makes when no cached block fits `rounded` bytes."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return (rounded + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE


def format_size(nbytes: int) -> str:
    """torch's format_size: bytes, KiB, MiB or GiB with two decimals."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    if nbytes <= 1 << 20:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= 1 << 30:
        return f"{nbytes / (1 << 20):.2f} MiB"
    return f"{nbytes / (1 << 30):.2f} GiB"


class _Block:
    """A contiguous range of one segment, allocated or cached free."""

    __slots__ = ("addr", "size", "requested", "stream", "pool", "prev", "next", "allocated", "key")

    def __init__(self, addr: int, size: int, stream: int, pool: int):
        self.addr = addr
        self.size = size
        self.requested = 0
        self.stream = stream
        self.pool = pool
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.allocated = False
        self.key = 0


# A stat is one flat list: [current, peak, allocated, freed] for all pools, then the same four for
# the small and the large pool (offset 4 and 8), like c10's Stat triple. Flat lists and two module
# functions instead of objects with methods: the allocator updates several stats per malloc and
# free, and those run for every tensor the emulated program creates.
_SMALL_OFF, _LARGE_OFF = 4, 8
_OFFSET = (_SMALL_OFF, _LARGE_OFF)  # by pool


def _inc(v: list, off: int, n: int) -> None:
    c = v[0] + n
    v[0] = c
    v[2] += n
    if c > v[1]:
        v[1] = c
    c = v[off] + n
    v[off] = c
    v[off + 2] += n
    if c > v[off + 1]:
        v[off + 1] = c


def _dec(v: list, off: int, n: int) -> None:
    v[0] -= n
    v[3] += n
    v[off] -= n
    v[off + 3] += n


_STAT_NAMES = ("allocated_bytes", "reserved_bytes", "requested_bytes", "inactive_split_bytes",
               "allocation", "segment", "inactive_split")
# Blocks are never held back by record_stream events here, so "active" equals "allocated".
_MIRRORED = {"active_bytes": "allocated_bytes", "active": "allocation"}


class CachingAllocator:
    """One device's caching allocator. `malloc` returns an int handle, `free` takes it back.

    `capacity_bytes` is what cudaMalloc can hand out in total (the device's memory minus what
    the CUDA context and other processes use; the caller decides). `device` only appears in
    error messages.
    """

    def __init__(self, capacity_bytes: int, device: int = 0):
        if capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be positive, got {capacity_bytes}")
        self.capacity = int(capacity_bytes)
        self.device = device
        self._keys: tuple[list[int], list[int]] = ([], [])  # sorted free-block keys per pool
        self._free: tuple[dict[int, _Block], dict[int, _Block]] = ({}, {})  # key -> free block
        self._live: dict[int, _Block] = {}  # handle -> allocated block
        self._streams: dict[int, int] = {}  # caller's stream id -> dense index (keys need small ints)
        self._private: list[bool] = []  # by dense index: a CUDA-graph private pool
        self._next_addr = 1 << 21
        self._next_handle = 1
        self._stats = {name: [0] * 12 for name in _STAT_NAMES}  # see _inc
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0

    # ---------------------------------------------------------------- public API
    def malloc(self, nbytes: int, stream: int = 0) -> int:
        """Allocate `nbytes` on `stream`; returns a handle (0 for a zero-byte request)."""
        if nbytes <= 0:
            if nbytes < 0:
                raise ValueError(f"cannot allocate {nbytes} bytes")
            return 0
        sidx = self._streams.get(stream)
        if sidx is None:
            sidx = self._streams[stream] = len(self._streams)
            self._private.append(stream >= PRIVATE_POOL_STREAMS)
        size = round_size(nbytes)
        pool = _SMALL if size <= SMALL_SIZE else _LARGE
        st = self._stats
        off = _OFFSET[pool]
        block = self._take_free(pool, sidx, size)
        if block is None:
            block = self._new_segment(pool, sidx, size, nbytes)
        elif block.prev is not None or block.next is not None:  # a cached split block becomes active
            _dec(st["inactive_split_bytes"], off, block.size)
            _dec(st["inactive_split"], off, 1)
        remaining = block.size - size
        if (remaining >= MIN_BLOCK) if pool == _SMALL else (remaining > SMALL_SIZE):
            self._split(block, size)
        block.allocated = True
        block.requested = nbytes
        handle = self._next_handle
        self._next_handle += 1
        self._live[handle] = block
        bs = block.size
        _inc(st["allocated_bytes"], off, bs)
        _inc(st["requested_bytes"], off, nbytes)
        _inc(st["allocation"], off, 1)
        self.allocated += bs
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return handle

    def free(self, handle: int) -> None:
        """Return a block to the cache (memory stays reserved)."""
        if handle == 0:
            return
        block = self._live.pop(handle, None)
        if block is None:
            raise ValueError(f"free of unknown or already freed handle {handle}")
        block.allocated = False
        off = _OFFSET[block.pool]
        st = self._stats
        bs = block.size
        _dec(st["allocated_bytes"], off, bs)
        _dec(st["requested_bytes"], off, block.requested)
        _dec(st["allocation"], off, 1)
        self.allocated -= bs
        self._release_block(block)

    def empty_cache(self) -> None:
        """Give every fully free segment back to the device (torch.cuda.empty_cache), private pools' aside."""
        for pool in (_SMALL, _LARGE):
            for key in list(self._keys[pool]):
                block = self._free[pool].get(key)
                if block is not None and block.prev is None and block.next is None and not self._private[block.stream]:
                    self._drop_segment(block)

    def reset_peak(self) -> None:
        """torch.cuda.reset_peak_memory_stats: peaks restart from the current values."""
        self.peak_allocated = self.allocated
        self.peak_reserved = self.reserved
        for v in self._stats.values():
            v[1], v[5], v[9] = v[0], v[4], v[8]

    def size_of(self, handle: int) -> int:
        """Bytes the block behind `handle` occupies (after rounding)."""
        block = self._live.get(handle)
        return block.size if block is not None else 0

    @property
    def free_bytes(self) -> int:
        """What torch.cuda.mem_get_info would call free: capacity not reserved by this process."""
        return self.capacity - self.reserved

    def stats(self) -> dict:
        """torch.cuda.memory_stats()-style flat dict (`<stat>.<all|small_pool|large_pool>.<current|peak|...>`)."""
        return stats_dict(list(self._stats.values()), self.num_alloc_retries, self.num_ooms, self.num_device_alloc,
                          self.num_device_free)

    def segments(self) -> list[dict]:
        """A small torch.cuda.memory_snapshot()-like view: one entry per segment with its blocks."""
        heads: dict[int, _Block] = {}
        for block in list(self._live.values()) + [b for d in self._free for b in d.values()]:
            while block.prev is not None:
                block = block.prev
            heads[block.addr] = block
        out = []
        for addr in sorted(heads):
            block, blocks, total = heads[addr], [], 0
            while block is not None:
                blocks.append({"size": block.size, "state": "active_allocated" if block.allocated else "inactive"})
                total += block.size
                block = block.next
            out.append({"address": addr, "total_size": total, "segment_type": _POOL_NAMES[heads[addr].pool][:5],
                        "blocks": blocks})
        return out

    # ---------------------------------------------------------------- internals
    def _insert_free(self, block: _Block) -> None:
        key = (((block.stream << _SIZE_BITS) | block.size) << _ADDR_BITS) | block.addr
        block.key = key
        self._free[block.pool][key] = block
        insort(self._keys[block.pool], key)

    def _remove_free(self, block: _Block) -> None:
        keys = self._keys[block.pool]
        i = bisect_left(keys, block.key)
        del keys[i]
        del self._free[block.pool][block.key]

    def _take_free(self, pool: int, sidx: int, size: int) -> _Block | None:
        keys = self._keys[pool]
        probe = ((sidx << _SIZE_BITS) | size) << _ADDR_BITS
        i = bisect_left(keys, probe)
        if i == len(keys) or keys[i] >> _STREAM_SHIFT != sidx:
            return None
        key = keys[i]
        del keys[i]
        return self._free[pool].pop(key)

    def _new_segment(self, pool: int, sidx: int, size: int, nbytes: int) -> _Block:
        seg = segment_size(size)
        if self.reserved + seg > self.capacity:
            # cudaMalloc would fail: release every fully free cached segment and retry once.
            self.empty_cache()
            self.num_alloc_retries += 1
            if self.reserved + seg > self.capacity:
                self.num_ooms += 1
                raise OutOfMemory(self._oom_message(seg), requested=nbytes)
        addr = self._next_addr
        self._next_addr += (seg + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE
        block = _Block(addr, seg, sidx, pool)
        self.reserved += seg
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        self.num_device_alloc += 1
        _inc(self._stats["reserved_bytes"], _OFFSET[pool], seg)
        _inc(self._stats["segment"], _OFFSET[pool], 1)
        return block

    def _split(self, block: _Block, size: int) -> None:
        rest = _Block(block.addr + size, block.size - size, block.stream, block.pool)
        rest.prev = block
        rest.next = block.next
        if block.next is not None:
            block.next.prev = rest
        block.next = rest
        block.size = size
        self._insert_free(rest)
        _inc(self._stats["inactive_split_bytes"], _OFFSET[block.pool], rest.size)
        _inc(self._stats["inactive_split"], _OFFSET[block.pool], 1)

    def _release_block(self, block: _Block) -> None:
        """Merge a just-freed block with free neighbours and cache it."""
        st = self._stats
        off = _OFFSET[block.pool]
        split_bytes = st["inactive_split_bytes"]
        split_count = st["inactive_split"]
        for nb in (block.prev, block.next):
            if nb is None or nb.allocated:
                continue
            self._remove_free(nb)
            _dec(split_bytes, off, nb.size)
            _dec(split_count, off, 1)
            if nb is block.prev:
                block.addr = nb.addr
                block.prev = nb.prev
                if nb.prev is not None:
                    nb.prev.next = block
            else:
                block.next = nb.next
                if nb.next is not None:
                    nb.next.prev = block
            block.size += nb.size
        if block.prev is not None or block.next is not None:
            _inc(split_bytes, off, block.size)
            _inc(split_count, off, 1)
        self._insert_free(block)

    def _drop_segment(self, block: _Block) -> None:
        self._remove_free(block)
        self.reserved -= block.size
        self.num_device_free += 1
        _dec(self._stats["reserved_bytes"], _OFFSET[block.pool], block.size)
        _dec(self._stats["segment"], _OFFSET[block.pool], 1)

    def _oom_message(self, size: int) -> str:
        return oom_message(size, self.capacity, self.reserved, self.allocated, self.device)


def stats_dict(rows: list[list[int]], retries: int, ooms: int, device_allocs: int, device_frees: int) -> dict:
    """torch.cuda.memory_stats()'s flat dict from the allocator's counters: `rows` are the stats in
    `_STAT_NAMES` order (see `_inc`), then the allocator's event counts."""
    named = dict(zip(_STAT_NAMES, rows, strict=True))
    named.update({mirror: named[src] for mirror, src in _MIRRORED.items()})
    out: dict[str, int] = {}
    for name, v in named.items():
        for label, off in (("all", 0), ("small_pool", _SMALL_OFF), ("large_pool", _LARGE_OFF)):
            out[f"{name}.{label}.current"] = v[off]
            out[f"{name}.{label}.peak"] = v[off + 1]
            out[f"{name}.{label}.allocated"] = v[off + 2]
            out[f"{name}.{label}.freed"] = v[off + 3]
    out["num_alloc_retries"] = retries
    out["num_ooms"] = ooms
    out["num_device_alloc"] = device_allocs
    out["num_device_free"] = device_frees
    out["num_sync_all_streams"] = 0
    out["max_split_size"] = -1
    out["oversize_allocations.current"] = out["oversize_allocations.peak"] = 0
    out["oversize_segments.current"] = out["oversize_segments.peak"] = 0
    return out


def oom_message(size: int, capacity: int, reserved: int, allocated: int, device: int = 0) -> str:
    """The text of torch.cuda.OutOfMemoryError when a `size`-byte segment did not fit."""
    free = max(capacity - reserved, 0)
    return (f"CUDA out of memory. Tried to allocate {format_size(size)}. GPU {device} has a total capacity of "
            f"{format_size(capacity)} of which {format_size(free)} is free. Including non-PyTorch memory, "
            f"this process has {format_size(reserved)} memory in use. Of the allocated memory "
            f"{format_size(allocated)} is allocated by PyTorch, and "
            f"{format_size(reserved - allocated)} is reserved by PyTorch but unallocated. If reserved "
            "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
            "avoid fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
