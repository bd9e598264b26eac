"""Simulator events: one small class per event, ordered by (time, kind, id), each with its handler.

The engine keeps one heap of these and calls `event.handle(simulator)` in order. Ordering by time
makes the simulation process the cluster in causal order; `kind` breaks ties so that completions
are seen before the work they release (a collective finishing at t frees its streams before a
host step at t looks at them), and `id` (a global counter) makes the order total and the run
deterministic. A handler pushes the events its work releases onto the simulator's heap (the
engine's `_push`/`_resolve`), which keeps the per-op path free of intermediate lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

_ids = count()

COLLECTIVE_DONE, STREAM_STEP, HOST_STEP = 0, 1, 2


@dataclass(slots=True)
class Event:
    time: float
    kind: int
    id: int = field(default_factory=lambda: next(_ids))

    def __lt__(self, other: Event) -> bool:
        return (self.time, self.kind, self.id) < (other.time, other.kind, other.id)

    def handle(self, sim) -> None:
        raise NotImplementedError


@dataclass(slots=True)
class CollectiveDone(Event):
    """Every member reached a collective (or both ends of a p2p exchange met): it ran [start, time]."""

    key: tuple = field(default=(), compare=False)  # emulator.simulate.streams.CollectiveKey / MessageKey
    start: float = field(default=0.0, compare=False)

    def handle(self, sim) -> None:
        sim.finish_collective(self)


@dataclass(slots=True)
class StreamStep(Event):
    """A stream of a rank may run further (a dependency it waited for resolved)."""

    rank: int = field(default=0, compare=False)
    stream: object = field(default=0, compare=False)

    def handle(self, sim) -> None:
        sim.advance(sim.by_rank[self.rank], self.stream)


@dataclass(slots=True)
class HostStep(Event):
    """A rank's host thread may issue further (it was blocked on a sync, or is starting)."""

    rank: int = field(default=0, compare=False)

    def handle(self, sim) -> None:
        sim.run_host(sim.by_rank[self.rank])


def collective_done(time: float, key: tuple, start: float) -> CollectiveDone:
    return CollectiveDone(time, COLLECTIVE_DONE, next(_ids), key, start)


def stream_step(time: float, rank: int, stream) -> StreamStep:
    return StreamStep(time, STREAM_STEP, next(_ids), rank, stream)


def host_step(time: float, rank: int) -> HostStep:
    return HostStep(time, HOST_STEP, next(_ids), rank)
