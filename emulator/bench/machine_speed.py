"""How much this machine's own speed moves, by kind of work: the floor under the repeatability figures.

A host gap is this machine's CPU time for the program's host work, so a prediction can repeat no
better than the machine does. Three fixed workloads run in turn for `seconds`, each timed in process
CPU time (the host-gap clock):
- `compute`: integer arithmetic in a Python loop (interpreter-bound, fits in the core's caches);
- `object_walk`: reading 60,000 small Python objects in a shuffled order from a pool of 300,000
  (tens of MB: pointer chasing that lives in the shared last-level cache, as the host side of a
  step does when it walks every parameter and gradient, in gradient clipping or a foreach optimizer);
- `gather`: a NumPy random gather over 32 MB (memory-bound, outside any cache).
The run is cut into `windows` equal windows; each window's median time stands for the machine's
speed then, and the spread (max / min - 1) of those medians is how far that kind of work moved.
There is no target: the figures say which part of the repeatability spread is the machine.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import numpy as np

_clock = time.process_time


def _workloads():
    rng = np.random.default_rng(0)
    index = rng.permutation(4_000_000)
    values = np.arange(4_000_000, dtype=np.int64)
    pool = [[i] for i in range(300_000)]
    random.Random(0).shuffle(pool)
    walk = pool[:60_000]

    def compute() -> int:
        s = 0
        for i in range(60_000):
            s += i * i % 7
        return s

    def object_walk() -> int:
        s = 0
        for o in walk:
            s += o[0]
        return s

    def gather() -> int:
        return int(values[index[:400_000]].sum())

    return {"compute": compute, "object_walk": object_walk, "gather": gather}


def window_spread(samples: list[float], windows: int) -> tuple[list[float], float]:
    """The median of each of `windows` consecutive equal slices of `samples`, and their max / min - 1."""
    size = max(len(samples) // windows, 1)
    medians = [statistics.median(samples[i:i + size]) for i in range(0, len(samples) - size + 1, size)]
    return medians, max(medians) / min(medians) - 1.0


def measure(seconds: float = 30.0, windows: int = 15) -> dict:
    work = _workloads()
    samples: dict[str, list[float]] = {name: [] for name in work}
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for name, fn in work.items():
            t0 = _clock()
            fn()
            samples[name].append(_clock() - t0)
    out: dict = {"seconds": seconds, "windows": windows}
    for name, got in samples.items():
        medians, moved = window_spread(got, windows)
        out[f"{name}_ms"] = f"{min(medians) * 1e3:.2f}-{max(medians) * 1e3:.2f}"
        out[f"{name}_spread"] = moved
    return out


def machine_speed(out: Path) -> dict:
    """The benchmark: nothing is written under `out`."""
    del out
    return measure()


BENCHMARKS = {"machine_speed": machine_speed}
