"""The search loop: what to evaluate next, and what needs no trial at all.

`Search.propose` asks the searcher for configurations until one needs a trial, resolving the
others on the way (each is recorded with its outcome):

    infeasible  breaks a constraint (or names a cluster that cannot exist): told PENALTY
    repeat      asked before in this search: told the value it had (not counted again)
    skipped     pruned by a finished trial (emulator.search.prune): told PENALTY (rule 1) or the
                proving trial's value, which it cannot beat (rule 2)
    cached      a stored trial with the same key (emulator.search.trial): told its value
    executed    returned to the engine, which runs it and calls `complete`

`budget` caps the configurations evaluated (executed + cached); the search also ends when the
searcher has nothing left, every feasible configuration was seen, or CMA-ES only repeats itself
(`max_asks`). The inline engine (`run_inline`) runs trials one after another in this process; the
Ray engine (`emulator.search.ray_engine`) runs the same Search from Tune. Ctrl-C keeps every
finished trial (each is stored as it completes): a rerun reads them back as `cached`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from emulator.search.prune import Pruner
from emulator.search.searchers import ALGORITHMS, make_searcher
from emulator.search.space import Infeasible, Space, SpaceError
from emulator.search.store import Store
from emulator.search.trial import Program, TrialSpec, run_trial
from emulator.search.versions import predictor_versions

OBJECTIVE_COLUMNS = {"time": "iteration_time_s", "cost": "cost_per_iteration_usd",
                     "cost-per-token": "cost_per_million_tokens_usd"}
OUTCOMES = ("executed", "cached", "skipped", "infeasible")


@dataclass
class Options:
    objective: str = "time"
    budget: int = 300
    algorithm: str = "cmaes"
    seed: int = 0
    gpus: int | None = None
    roofline_only: bool = False
    workers: int = 1
    engine: str = "inline"
    ray_address: str | None = None
    max_asks: int | None = None  # proposals before giving up on new ones (default 50 x budget)
    prune: bool = True  # memory-monotone pruning (emulator.search.prune); off: every configuration runs

    def to_json(self) -> dict:
        return dict(self.__dict__)

    def check(self, script: str | None = None) -> None:
        """SpaceError (before any trial) for an option outside its choices or a missing script."""
        problems = [f"--{name} must be one of {list(allowed)}, got {value!r}" for name, value, allowed in (
            ("objective", self.objective, OBJECTIVE_COLUMNS), ("algorithm", self.algorithm, ALGORITHMS),
            ("engine", self.engine, ("ray", "inline"))) if value not in allowed]
        if self.budget < 1:
            problems.append(f"--budget must be at least 1, got {self.budget}")
        if self.workers < 1:
            problems.append(f"--workers must be at least 1, got {self.workers}")
        if script and not Path(script).is_file():
            problems.append(f"no such script: {script}")
        if problems:
            raise SpaceError("; ".join(problems))


@dataclass
class Entry:
    """One configuration this search met: its knobs, what happened to it and its trial row (if any)."""

    n: int
    key: tuple
    outcome: str
    status: str  # ok | oom | hang | crash | constraint | pruned
    reason: str | None = None
    value: float | None = None
    row: dict | None = None
    trial_key: str | None = None
    spec: TrialSpec | None = None
    told: float | None = None  # what the searcher heard (None: PENALTY); a repeat hears it again


@dataclass
class Proposal:
    token: object
    entry: Entry
    spec: TrialSpec
    predictors: dict


@dataclass
class SearchResult:
    search_id: str
    space: Space
    program: Program
    options: Options
    entries: list[Entry]
    wall_s: float
    interrupted: bool = False
    counts: dict = field(default_factory=dict)

    def completed(self) -> SearchResult:
        """This result, if the search ran to its end; a stopped one (Ctrl-C, SIGTERM) raises KeyboardInterrupt
        again, so a caller running many searches (`make search-eval`) stops too instead of starting the next."""
        if self.interrupted:
            raise KeyboardInterrupt(f"search {self.search_id} was interrupted; its finished trials are cached")
        return self

    def ranked(self) -> list[Entry]:
        ok = [e for e in self.entries if e.value is not None and e.outcome in ("executed", "cached")]
        return sorted(ok, key=lambda e: (e.value, e.row.get("iteration_time_s") or 0.0))

    @property
    def best(self) -> Entry | None:
        r = self.ranked()
        return r[0] if r else None


def objective_value(row: dict, objective: str) -> tuple[float | None, str | None]:
    """(value, None) for a run that fits, else (None, why it cannot be scored)."""
    if row.get("status") != "ok":
        return None, row.get("reason") or row.get("status")
    v = row.get(OBJECTIVE_COLUMNS[objective])
    if v is None:
        what = "tokens per iteration" if objective == "cost-per-token" else OBJECTIVE_COLUMNS[objective]
        return None, f"no {what} in the prediction (set [predict] tokens_per_iteration)"
    return float(v), None


def search_id(space: Space, program: Program, options: Options) -> str:
    """Stable for the same question (space, program, objective, algorithm, seed): a rerun resumes under it."""
    ident = dict(space=space.source, overrides=space.overrides, script=program.script, module=program.module,
                 argv=list(program.argv),
                 gpus=options.gpus, objective=options.objective, algorithm=options.algorithm, seed=options.seed,
                 roofline_only=options.roofline_only)
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


class Search:
    def __init__(self, space: Space, program: Program, options: Options, store: Store | None = None,
                 evaluate: Callable[[TrialSpec, dict], dict] | None = None, console: Console | None = None,
                 versions: Callable[[str, bool], dict] = predictor_versions):
        self.space, self.program, self.options = space, program, options
        self.store = store or Store()
        self.console = console or Console(stderr=True)
        self.evaluate = evaluate or (lambda spec, predictors: run_trial(spec, predictors, self.store.root))
        self.id = search_id(space, program, options)
        self.searcher = make_searcher(options.algorithm, space, options.seed)
        self.pruner = Pruner(space if options.prune else None)
        self.cache = self.store.load()
        self.entries: dict[tuple, Entry] = {}
        self.pending: set[tuple] = set()
        self.asks = 0
        self.max_asks = options.max_asks or 50 * max(options.budget, 1)
        self.t0 = time.perf_counter()
        self._versions: dict[str, dict] = {}
        self._lookup_versions = versions
        self._feasible = len(space.feasible())
        for gpu in sorted({space.plan(space.values(space.setting(k))).gpu for k in space.feasible()}):
            self.predictors(gpu)  # no predictors for a part: NoPredictorError now, before any trial

    def predictors(self, gpu: str) -> dict:
        if gpu not in self._versions:
            self._versions[gpu] = self._lookup_versions(gpu, self.options.roofline_only)
        return self._versions[gpu]

    @property
    def evaluations(self) -> int:
        return sum(1 for e in self.entries.values() if e.outcome in ("executed", "cached"))

    def _entry(self, key: tuple, outcome: str, status: str, reason=None, value=None, row=None, spec=None) -> Entry:
        e = Entry(n=len(self.entries) + 1, key=key, outcome=outcome, status=status, reason=reason, value=value,
                  row=row, trial_key=row.get("key") if row else None, spec=spec)
        self.entries[key] = e
        return e

    def _seen_all(self) -> bool:
        feasible_seen = sum(1 for e in self.entries.values() if e.outcome != "infeasible")
        return feasible_seen >= self._feasible

    # -- the loop ---------------------------------------------------------------------------------
    def propose(self) -> Proposal | None:
        """The next configuration that needs a trial, or None when the search is over."""
        while True:
            if self.evaluations + len(self.pending) >= self.options.budget or self._seen_all():
                return None
            if self.asks >= self.max_asks:
                return None
            asked = self.searcher.ask()
            self.asks += 1
            if asked is None:
                return None
            token, key = asked
            if key in self.entries:  # a repeat: the searcher hears the same answer again
                self.searcher.tell(token, self.entries[key].told)
                continue
            if key in self.pending:
                self.searcher.tell(token, None)
                continue
            setting = self.space.setting(key)
            try:
                spec = TrialSpec(self.program, self.space.plan(self.space.check(setting)), self.options.roofline_only)
            except Infeasible as e:
                self._entry(key, "infeasible", "constraint", e.reason)
                self.searcher.tell(token, None)
                continue
            skip = self.pruner.why_skip(key)
            if skip is not None:
                proof = next((e for e in self.entries.values() if e.n == skip.trial), None)
                e = self._entry(key, "skipped", "pruned", skip.reason, spec=spec)
                e.told = proof.value if skip.rule == 2 and proof is not None else None
                self.searcher.tell(token, e.told)
                continue
            predictors = self.predictors(spec.plan.gpu)
            row = self.cache.get(spec.trial_key(predictors))
            if row is not None:
                self._resolve(token, self._entry(key, "cached", row["status"], spec=spec), row)
                continue
            self.pending.add(key)
            entry = Entry(n=0, key=key, outcome="executed", status="running", spec=spec)
            return Proposal(token=token, entry=entry, spec=spec, predictors=predictors)

    def complete(self, proposal: Proposal, row: dict) -> Entry:
        """A trial finished (any status): store it, tell the searcher, let it prove or prune others."""
        key = proposal.entry.key
        self.pending.discard(key)
        self.store.put(row)
        self.cache[row["key"]] = row
        e = self._entry(key, "executed", row["status"], spec=proposal.spec)
        self._resolve(proposal.token, e, row)
        self.console.print(self._progress_line(e), highlight=False, markup=False)
        self.write_run()
        return e

    def _resolve(self, token, e: Entry, row: dict) -> None:
        e.row, e.trial_key, e.status = row, row["key"], row["status"]
        e.value, why = objective_value(row, self.options.objective)
        e.reason, e.told = (why if e.value is None else None), e.value
        if row["status"] in ("ok", "oom"):
            self.pruner.record(e.key, row["status"] == "oom", e.n)
        self.searcher.tell(token, e.value)

    def _progress_line(self, e: Entry) -> str:
        knobs = " ".join(f"{k}={v}" for k, v in self.space.setting(e.key).items())
        wall = e.row.get("trial_wall_s") or 0.0
        what = (f"{e.row['iteration_time_s']:.4g} s/iteration, objective {e.value:.4g}" if e.value is not None
                else f"{e.status}: {str(e.reason)[:120]}")
        return f"[{self.evaluations}/{self.options.budget}] {knobs}: {what} ({wall:.0f} s)"

    # -- results ----------------------------------------------------------------------------------
    def counts(self) -> dict:
        c = dict.fromkeys(OUTCOMES, 0)
        for e in self.entries.values():
            c[e.outcome] += 1
        c["evaluated"] = c["executed"] + c["cached"]
        for s in ("oom", "hang", "crash"):
            c[s] = sum(1 for e in self.entries.values() if e.status == s)
        c["feasible_space"] = self._feasible
        c["space"] = self.space.size()
        c["asks"] = self.asks
        return c

    def result(self, interrupted: bool = False) -> SearchResult:
        return SearchResult(search_id=self.id, space=self.space, program=self.program, options=self.options,
                            entries=sorted(self.entries.values(), key=lambda e: e.n),
                            wall_s=time.perf_counter() - self.t0, interrupted=interrupted, counts=self.counts())

    def write_run(self, result: SearchResult | None = None) -> None:
        rows = [dict(n=e.n, knobs=json.dumps(self.space.setting(e.key), default=str), outcome=e.outcome,
                     status=e.status, reason=e.reason, objective=e.value, key=e.trial_key)
                for e in sorted(self.entries.values(), key=lambda e: e.n)]
        self.store.write_run(self.id, rows)
        meta = dict(search_id=self.id, space_text=self.space.source, space_path=self.space.path,
                    overrides=self.space.overrides,
                    program=self.program.to_json(), options=self.options.to_json(), counts=self.counts())
        if result is not None:
            best = result.best
            meta.update(wall_s=result.wall_s, interrupted=result.interrupted,
                        best=None if best is None else dict(knobs=self.space.setting(best.key), objective=best.value,
                                                            key=best.trial_key, command=best.row.get("command")))
        self.store.write_meta(self.id, meta)


def run_inline(search: Search) -> SearchResult:
    """Run trials one after another in this process until the search ends or Ctrl-C."""
    interrupted = False
    try:
        while (p := search.propose()) is not None:
            search.complete(p, search.evaluate(p.spec, p.predictors))
    except KeyboardInterrupt:
        interrupted = True
    result = search.result(interrupted)
    search.write_run(result)
    return result
