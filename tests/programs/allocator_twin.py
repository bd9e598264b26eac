"""Run under the emulator: the C++ caching allocator (emulator/memory/device_memory.cpp) and the
reference model (emulator.memory.allocator) get the same random requests and must agree on every
figure after every step. Prints `twin_steps=N`, `twin_ooms=N`; raises on the first disagreement."""

import random
import sys

from emulator.device import boot
from emulator.memory.allocator import PRIVATE_POOL_STREAMS, CachingAllocator, oom_message, stats_dict

MiB = 1 << 20


class Native:
    """The C++ allocator behind the reference model's interface (malloc raises on OOM)."""

    def __init__(self, capacity: int):
        self.fn = boot.memory_functions()
        self.a = self.fn["new_allocator"](capacity)
        self.capacity = capacity

    def malloc(self, nbytes: int, stream: int) -> int:
        handle, failed = self.fn["malloc"](self.a, nbytes, stream)
        if failed:
            allocated, reserved, _, _ = self.fn["figures"](self.a)
            raise MemoryError(oom_message(failed, self.capacity, reserved, allocated))
        return handle

    def free(self, handle: int) -> None:
        self.fn["free"](self.a, handle)

    def figures(self) -> tuple:
        return self.fn["figures"](self.a)

    def stats(self) -> dict:
        rows, counts = self.fn["stats"](self.a)
        return stats_dict(list(rows), *counts)

    def empty_cache(self) -> None:
        self.fn["empty_cache"](self.a)

    def reset_peak(self) -> None:
        self.fn["reset_peak"](self.a)


def sizes(rng: random.Random) -> int:
    kind = rng.random()
    if kind < 0.45:
        return rng.randint(1, 1 << 20)  # small pool, odd sizes
    if kind < 0.75:
        return rng.randint((1 << 20) + 1, 10 * MiB)  # carved from 20 MiB segments
    if kind < 0.97:
        return rng.randint(10 * MiB, 300 * MiB)  # own segments
    return 0


def main(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    capacity = 2048 * MiB  # small enough that OOMs and retries happen
    ref, native = CachingAllocator(capacity), Native(capacity)
    live: list[tuple[int, int]] = []
    ooms = 0
    for step in range(steps):
        r = rng.random()
        if r < 0.55 or not live:
            n, stream = sizes(rng), rng.choice((0, 0, 0, 7, PRIVATE_POOL_STREAMS + 1))  # and a graph pool
            try:
                h_ref = ref.malloc(n, stream)
            except Exception as e:  # the reference model's OutOfMemory
                try:
                    native.malloc(n, stream)
                except MemoryError as ne:
                    assert str(ne) == str(e), (step, str(ne), str(e))
                    ooms += 1
                else:
                    raise AssertionError(f"step {step}: the reference model ran out of memory, the C++ one did not")
            else:
                live.append((h_ref, native.malloc(n, stream)))
        elif r < 0.97:
            h_ref, h_nat = live.pop(rng.randrange(len(live)))
            ref.free(h_ref)
            native.free(h_nat)
        elif r < 0.985:
            ref.empty_cache()
            native.empty_cache()
        else:
            ref.reset_peak()
            native.reset_peak()
        want = (ref.allocated, ref.reserved, ref.peak_allocated, ref.peak_reserved)
        assert native.figures() == want, (step, native.figures(), want)
        if step % 50 == 0 or step == steps - 1:
            assert native.stats() == ref.stats(), step
    try:
        native.free(123456789)
    except ValueError as e:
        assert "unknown or already freed handle" in str(e)
    else:
        raise AssertionError("freeing an unknown handle must raise")
    print(f"twin_steps={steps}")
    print(f"twin_ooms={ooms}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
