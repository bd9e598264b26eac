"""The search algorithms, behind one ask/tell interface (`--algorithm grid|random|cmaes`).

- grid: every feasible configuration, in the order of the space file's knobs (the first knob
  slowest); exhaustive when the budget allows.
- random: the feasible configurations in a seeded random order, without repeats.
- cmaes: Optuna's CMA-ES sampler (with margin, for integer coordinates; IPOP-style restarts), asked and
  told through Optuna's ask/tell API. Ordered knobs (numbers, booleans) are coordinates over their
  value index; other choices (a GPU part) are categorical, which Optuna samples independently.
  CMA-ES proposes anywhere in the box: a proposal that breaks a constraint, was seen before or is
  pruned is answered without a trial (`emulator.search.driver`), with PENALTY for infeasible ones.

The same searcher object is driven in-process (`--engine inline`) or by Ray Tune (`--engine ray`,
`emulator.search.ray_engine` wraps it as a Tune Searcher), so both engines make the same choices.
"""

from __future__ import annotations

import math
import random
import warnings

from emulator.search.space import Space

ALGORITHMS = ("grid", "random", "cmaes")
PENALTY = 1e30  # what an infeasible configuration scores: worse than any real one, and CMA-ES only ranks


class Searcher:
    name = ""

    def ask(self) -> tuple[object, tuple] | None:
        """(token, knob setting as a tuple in knob order), or None when there is nothing left to propose."""
        raise NotImplementedError

    def tell(self, token, value: float | None) -> None:
        """The objective of the proposal `token` (None: infeasible)."""


class GridSearcher(Searcher):
    name = "grid"

    def __init__(self, space: Space, seed: int = 0):
        self._it = iter(space.feasible())

    def ask(self):
        key = next(self._it, None)
        return None if key is None else (key, key)


class RandomSearcher(Searcher):
    name = "random"

    def __init__(self, space: Space, seed: int = 0):
        order = list(space.feasible())
        random.Random(seed).shuffle(order)
        self._it = iter(order)

    def ask(self):
        key = next(self._it, None)
        return None if key is None else (key, key)


class CmaesSearcher(Searcher):
    """Optuna's CMA-ES (with margin) over the knobs' value indices; restarted with a doubled population
    and a new seed (IPOP, as Optuna's own restart option did before it was deprecated) when it has
    proposed nothing new for `patience` asks: in a discrete space a converged CMA-ES repeats itself."""

    name = "cmaes"

    def __init__(self, space: Space, seed: int = 0):
        import optuna
        from optuna.distributions import CategoricalDistribution, IntDistribution

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.knobs = list(space.knobs.values())
        self.dists = {k.name: IntDistribution(0, len(k.values) - 1) if k.ordinal
                      else CategoricalDistribution(list(range(len(k.values)))) for k in self.knobs}
        self.seed, self.restarts = seed, 0
        self.popsize = 4 + int(3 * math.log(max(len(self.knobs), 1)))
        self.proposed: set[tuple] = set()
        self.idle = 0
        self._new_study()

    def _new_study(self) -> None:
        import optuna

        numeric = sum(1 for k in self.knobs if k.ordinal)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # with_margin is "experimental"
            sampler = optuna.samplers.CmaEsSampler(seed=self.seed + 1000 * self.restarts, with_margin=numeric > 0,
                                                   popsize=self.popsize, warn_independent_sampling=False,
                                                   n_startup_trials=1)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)

    @property
    def patience(self) -> int:
        return 3 * self.popsize

    def ask(self):
        if self.idle >= self.patience:
            self.restarts += 1
            self.popsize *= 2
            self.idle = 0
            self._new_study()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = self.study.ask(self.dists)
        key = tuple(k.values[int(trial.params[k.name])] for k in self.knobs)
        self.idle = self.idle + 1 if key in self.proposed else 0
        self.proposed.add(key)
        return (self.study, trial), key

    def tell(self, token, value):
        study, trial = token
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.tell(trial, PENALTY if value is None else float(value))


def make_searcher(algorithm: str, space: Space, seed: int = 0) -> Searcher:
    classes = {"grid": GridSearcher, "random": RandomSearcher, "cmaes": CmaesSearcher}
    if algorithm not in classes:
        raise ValueError(f"unknown algorithm {algorithm!r}; one of {list(ALGORITHMS)}")
    return classes[algorithm](space, seed)
