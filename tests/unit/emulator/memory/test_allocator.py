"""The caching-allocator model behaves like PyTorch's: rounding, pools, reuse, splitting, OOM."""

import time

import pytest

from emulator.memory import CachingAllocator, OutOfMemory, format_size, round_size, segment_size

MiB = 1 << 20
GiB = 1 << 30


def test_rounding_and_segment_sizes_follow_torch():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert segment_size(512) == 2 * MiB  # small pool
    assert segment_size(MiB) == 2 * MiB
    assert segment_size(MiB + 512) == 20 * MiB  # large request below 10 MiB
    assert segment_size(10 * MiB) == 10 * MiB  # 10 MiB and up: rounded to 2 MiB
    assert segment_size(11 * MiB) == 12 * MiB
    assert format_size(20 * MiB) == "20.00 MiB" and format_size(3 * GiB // 2) == "1.50 GiB"


def test_small_requests_share_one_2mib_segment():
    a = CachingAllocator(GiB)
    hs = [a.malloc(1000) for _ in range(100)]
    assert a.allocated == 100 * 1024
    assert a.reserved == 2 * MiB
    assert a.stats()["segment.all.current"] == 1
    for h in hs:
        a.free(h)
    assert a.allocated == 0 and a.reserved == 2 * MiB  # cached, not returned


def test_reserved_at_least_allocated_and_reuse_does_not_grow():
    a = CachingAllocator(8 * GiB)
    h = a.malloc(100 * MiB)
    assert a.reserved >= a.allocated == 100 * MiB
    a.free(h)
    for _ in range(10):
        h = a.malloc(100 * MiB)
        a.free(h)
    assert a.reserved == 100 * MiB
    assert a.peak_allocated == 100 * MiB and a.peak_reserved == 100 * MiB
    assert a.stats()["num_device_alloc"] == 1


def test_medium_requests_are_carved_from_a_20mib_segment():
    a = CachingAllocator(GiB)
    h1 = a.malloc(3 * MiB)
    h2 = a.malloc(3 * MiB)
    assert a.reserved == 20 * MiB and a.allocated == 6 * MiB
    st = a.stats()
    assert st["inactive_split_bytes.all.current"] == 14 * MiB
    a.free(h1)
    a.free(h2)  # both merge back into one free 20 MiB block
    assert a.stats()["inactive_split_bytes.all.current"] == 0
    a.malloc(18 * MiB)  # fits in the merged block: no new segment
    assert a.reserved == 20 * MiB


def test_fragmentation_raises_reserved_above_live_memory():
    """Free every other 30 MiB block: 150 MiB free in total, but no hole takes 40 MiB."""
    a = CachingAllocator(4 * GiB)
    hs = [a.malloc(30 * MiB) for _ in range(10)]
    for h in hs[::2]:
        a.free(h)
    big = a.malloc(40 * MiB)
    assert a.allocated == 5 * 30 * MiB + 40 * MiB
    assert a.reserved == 10 * 30 * MiB + 40 * MiB
    assert a.reserved - a.allocated == 150 * MiB
    a.free(big)


def test_streams_do_not_share_cached_blocks():
    a = CachingAllocator(GiB)
    h = a.malloc(50 * MiB, stream=0)
    a.free(h)
    a.malloc(50 * MiB, stream=7)
    assert a.reserved == 100 * MiB


def test_best_fit_picks_the_smallest_block_that_fits():
    a = CachingAllocator(GiB)
    h64, _, h32, _ = a.malloc(64 * MiB), a.malloc(MiB // 2), a.malloc(32 * MiB), a.malloc(MiB // 2)
    a.free(h64)
    a.free(h32)
    a.malloc(30 * MiB)  # goes into the 32 MiB hole (remainder 2 MiB > 1 MiB: split)
    segs = {s["total_size"]: s["blocks"] for s in a.segments()}
    assert [b["state"] for b in segs[32 * MiB]] == ["active_allocated", "inactive"]
    assert [b["state"] for b in segs[64 * MiB]] == ["inactive"]


def test_oom_at_capacity_frees_cache_and_retries_then_raises():
    a = CachingAllocator(1 * GiB)
    h = a.malloc(600 * MiB)
    a.free(h)
    a.malloc(700 * MiB)  # does not fit next to the cached 600 MiB: cache released, retry succeeds
    st = a.stats()
    assert st["num_alloc_retries"] == 1 and a.reserved == 700 * MiB
    with pytest.raises(OutOfMemory, match=r"CUDA out of memory. Tried to allocate 400.00 MiB. GPU 0 has a total "
                                           r"capacity of 1024.00 MiB of which 324.00 MiB is free"):
        a.malloc(400 * MiB)
    assert a.stats()["num_ooms"] == 1
    assert a.allocated == 700 * MiB and a.reserved == 700 * MiB  # a failed malloc changes nothing


def test_empty_cache_releases_only_fully_free_segments():
    a = CachingAllocator(GiB)
    keep = a.malloc(3 * MiB)
    gone = a.malloc(50 * MiB)
    a.malloc(10)  # small pool
    a.free(gone)
    a.empty_cache()
    assert a.reserved == 20 * MiB + 2 * MiB  # the 20 MiB segment is partly in use
    a.free(keep)
    a.empty_cache()
    assert a.reserved == 2 * MiB
    assert a.stats()["num_device_free"] == 2


def test_stats_keys_and_reset_peak():
    a = CachingAllocator(GiB)
    h = a.malloc(100 * MiB)
    a.free(h)
    st = a.stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "active_bytes.all.peak", "num_ooms", "num_alloc_retries",
                "segment.all.current", "requested_bytes.large_pool.peak"):
        assert key in st
    assert st["allocated_bytes.all.peak"] == 100 * MiB and st["allocated_bytes.all.current"] == 0
    a.reset_peak()
    assert a.peak_allocated == 0 and a.stats()["allocated_bytes.all.peak"] == 0
    assert a.peak_reserved == 100 * MiB  # still reserved


def test_bad_input_is_a_clear_error():
    a = CachingAllocator(GiB)
    assert a.malloc(0) == 0
    a.free(0)
    h = a.malloc(10)
    a.free(h)
    with pytest.raises(ValueError, match="already freed"):
        a.free(h)
    with pytest.raises(ValueError):
        CachingAllocator(0)


def test_fast_enough_for_every_op():
    a = CachingAllocator(80 * GiB)
    sizes = [512, 4096, 3 * MiB, 40 * MiB, 700_000, 2 * GiB] * 2000
    live = [a.malloc(s) for s in sizes[:16]]
    t0 = time.perf_counter()
    for i, s in enumerate(sizes):
        a.free(live[i % 16])
        live[i % 16] = a.malloc(s)
    per_call = (time.perf_counter() - t0) / (2 * len(sizes))
    assert per_call < 20e-6  # target is < 5 us on an idle core; generous for a loaded CI box


def test_a_cuda_graph_private_pool_keeps_its_free_segments_through_empty_cache():
    from emulator.memory.allocator import PRIVATE_POOL_STREAMS

    a = CachingAllocator(GiB)
    inside = a.malloc(50 * MiB, stream=PRIVATE_POOL_STREAMS + 1)  # freed inside a capture
    a.free(inside)
    outside = a.malloc(50 * MiB)  # not served from the graph's pool
    assert a.reserved == 100 * MiB
    a.free(outside)
    a.empty_cache()
    assert a.reserved == 50 * MiB  # the graph's pool stays reserved for its replays
