"""Pruning that keeps fidelity: skip a configuration only when a finished trial proves what it would give.

The space file declares knobs memory-monotone (`memory = "increasing" | "decreasing"`: the memory
a run needs never falls / never rises as the knob's value goes up, in the listed order) and,
optionally, time-monotone (`time = ...`, the same for the iteration time). Activation
recomputation, sequence parallelism, a distributed optimizer and the micro-batch size are the
usual ones. Compare two configurations A and B that set every *other* knob alike:

- A **needs at least as much memory** as B when, on each memory knob, A sits at B's value or
  further in the memory-increasing direction.
- Rule 1 (out of memory): B ran out of memory and A needs at least as much: A runs out too. Skip A.
- Rule 2 (cannot be faster): B fits, A needs no more memory than B, and every knob where A differs
  from B declares that moving from B's value to A's never shortens the iteration. A fits and is no
  faster (nor cheaper, at the same GPUs, price and tokens per iteration), so it cannot be the
  answer. Skip A.

These are the paper's four Megatron rules (recomputation, sequence parallel, distributed
optimizer, micro-batch) stated once for any knob. Only trials that ran (or were read from the
cache) count as evidence; a crash or hang proves nothing about memory.
"""

from __future__ import annotations

from typing import NamedTuple

from emulator.search.space import Space


class Skip(NamedTuple):
    """Why a configuration need not run: the rule (1: out of memory, 2: cannot be faster) and the trial proving it."""

    rule: int
    trial: int
    reason: str


class Pruner:
    def __init__(self, space: Space | None):
        """`space` None: a pruner that never skips (`maya search --no-prune`)."""
        self.space = space
        names = list(space.knobs) if space else []
        self._mem = [(i, space.knobs[n]) for i, n in enumerate(names) if space.knobs[n].memory]
        self._other = [i for i, n in enumerate(names) if not space.knobs[n].memory]
        self._oom: dict[tuple, list[tuple[tuple, int]]] = {}
        self._fits: dict[tuple, list[tuple[tuple, int]]] = {}

    @property
    def active(self) -> bool:
        return bool(self._mem)

    def _group(self, key: tuple) -> tuple:
        return tuple(key[i] for i in self._other)

    def _steps(self, a: tuple, b: tuple) -> list[tuple]:
        """Per memory knob (knob, sign of A's memory relative to B's: +1 more, -1 less, 0 same, index move)."""
        out = []
        for i, knob in self._mem:
            move = knob.index(a[i]) - knob.index(b[i])
            sign = (move > 0) - (move < 0)
            out.append((knob, sign if knob.memory == "increasing" else -sign, move))
        return out

    def record(self, key: tuple, oom: bool, trial: int) -> None:
        """A finished trial: it ran out of memory, or it fits."""
        if self.active:
            (self._oom if oom else self._fits).setdefault(self._group(key), []).append((key, trial))

    def why_skip(self, key: tuple) -> Skip | None:
        """The rule and the trial that prove `key` need not run, or None."""
        if not self.active:
            return None
        g = self._group(key)
        for other, trial in self._oom.get(g, ()):
            if all(sign >= 0 for _, sign, _ in self._steps(key, other)):
                return Skip(1, trial, f"needs at least the memory of trial {trial} ({self._describe(other)}), "
                                      "which ran out of memory")
        for other, trial in self._fits.get(g, ()):
            steps = self._steps(key, other)
            if all(sign <= 0 for _, sign, _ in steps) and all(_no_faster(k, move) for k, _, move in steps):
                moved = [k.name for k, _, move in steps if move]
                return Skip(2, trial, f"fits like trial {trial} ({self._describe(other)}) and cannot be faster: it "
                                      f"differs only in {', '.join(moved)}, whose declared time never falls that way")
        return None

    def _describe(self, key: tuple) -> str:
        return ", ".join(f"{k.name}={key[i]}" for i, k in self._mem)


def _no_faster(knob, move: int) -> bool:
    """Moving `move` steps along the knob never shortens the iteration (by the knob's declared `time`)."""
    if move == 0:
        return True
    return knob.time == ("increasing" if move > 0 else "decreasing")
