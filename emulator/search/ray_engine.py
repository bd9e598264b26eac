"""Ray Tune as the engine: trials run as Tune trials, locally (sized to this machine's cores) or on an
existing Ray cluster (`--ray-address`), each on a slot of cores of its own (`emulator.search.cores`).

The Search (`emulator.search.driver`) is Tune's searcher: `suggest` is `Search.propose` (constraint
checks, repeats, pruning and cache hits are answered inside it, so Tune only sees trials that run)
and `on_trial_complete` is `Search.complete`, which stores the row in the driver's warehouse. Rows
travel back in the trial's result, so a remote cluster needs no shared filesystem for the results;
the emulation cache (`<warehouse>/search/emulations`) is per node unless MAYA_WAREHOUSE is shared.
Ctrl-C: Tune stops the running trials; every completed one is already stored.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ray.tune.search import Searcher

from emulator.search.cores import core_slot, plan_workers, usable_cores
from emulator.search.driver import Proposal, Search, SearchResult
from emulator.search.trial import TrialSpec, base_row, run_trial


def _trainable(config: dict, root: str, per_trial: int) -> dict:
    spec = TrialSpec.from_json(config["spec"])
    with core_slot(per_trial) as cores:
        row = run_trial(spec, config["predictors"], Path(root), cores)
    return {"objective": row.get("iteration_time_s") or float("inf"), "row": json.dumps(row, default=str)}


_SEARCHES: dict[str, Search] = {}  # the running Search by id: Tune pickles its searcher, a Search holds locks


class SearchAdapter(Searcher):
    """Tune's view of a Search: `suggest` proposes, `on_trial_complete` stores and tells."""

    def __init__(self, search_id: str):
        super().__init__(metric="objective", mode="min")
        self.search_id = search_id
        self.live: dict[str, Proposal] = {}
        self.finished = False  # said FINISHED: Tune ending before that means it was interrupted

    @property
    def search(self) -> Search:
        return _SEARCHES[self.search_id]

    def suggest(self, trial_id: str):
        p = self.search.propose()
        if p is None:
            if self.live:
                return None
            self.finished = True
            return Searcher.FINISHED
        self.live[trial_id] = p
        return {"spec": p.spec.to_json(), "predictors": p.predictors}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        p = self.live.pop(trial_id, None)
        if p is None:
            return
        if result and "row" in result:
            row = json.loads(result["row"])
        else:  # the Ray worker died under the trial (killed, out of host memory)
            row = base_row(p.spec, p.spec.trial_key(p.predictors), p.predictors)
            row.update(status="crash", reason="the trial's Ray worker failed (see the Ray logs under "
                                              f"{self.search.store.root / 'ray'})")
        self.search.complete(p, row)

    def __getstate__(self):  # what Tune writes into its experiment folder: the id, not the live search
        return {"search_id": self.search_id, "finished": self.finished, "live": {},
                "_metric": self._metric, "_mode": self._mode}

    def save(self, checkpoint_path: str) -> None:  # the warehouse is the checkpoint: a rerun resumes from it
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass


def run_ray(search: Search) -> SearchResult:
    """Run the search with Ray Tune; returns when it is over or interrupted."""
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")  # trials keep the user's working directory
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ["MAYA_WAREHOUSE"] = str(search.store.root.parent.resolve())  # workers write where the driver reads
    import ray
    from ray import tune

    opts = search.options
    local = opts.ray_address is None
    cores = len(usable_cores())
    workers, per_trial = plan_workers(opts.workers, cores)
    if not ray.is_initialized():
        ray.init(address=opts.ray_address, num_cpus=cores if local else None, include_dashboard=False,
                 log_to_driver=False, logging_level=logging.WARNING, configure_logging=True,
                 object_store_memory=200 * 2**20 if local else None)
    interrupted = False
    try:
        _SEARCHES[search.id] = search
        adapter = SearchAdapter(search.id)
        trainable = tune.with_resources(
            tune.with_parameters(_trainable, root=str(search.store.root.resolve()), per_trial=per_trial),
            {"cpu": per_trial})
        # reuse_actors: a worker keeps the predictors it loaded (`trial._predictors`, seconds per part) for its
        # next trial; a trial pins itself to its slot's cores only while it runs (`trial.run_trial`)
        tuner = tune.Tuner(trainable, tune_config=tune.TuneConfig(
            search_alg=adapter, num_samples=-1, max_concurrent_trials=workers, reuse_actors=True),
            run_config=tune.RunConfig(name=search.id, storage_path=str((search.store.root / "ray").resolve()),
                                      verbose=0, log_to_file=True))
        try:
            tuner.fit()
            interrupted = not adapter.finished  # Tune catches the first Ctrl-C and stops its trials
        except KeyboardInterrupt:
            interrupted = True
    finally:
        _SEARCHES.pop(search.id, None)
        if local:
            ray.shutdown()
    result = search.result(interrupted)
    search.write_run(result)
    return result
