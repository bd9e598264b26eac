"""`make search-eval`, part 1: does maya's search pick the configuration that was measured fastest?

For each vTrain group (one model, GPU count and global batch; its measured TP x PP x micro-batch
layouts), `maya search` runs the group's layouts exhaustively (a space whose `[[points]]` are the
measured layouts, `pipelines.search.groups`), every trial a `maya predict` of the Megatron-style
validation program with the same arguments as `make validate`: the plain-PyTorch imitation, or with
`--program megatron-core` the same run built with megatron-core. The same search with
`--roofline-only` re-simulates the same emulations with the analytical roofline; llm-analysis and
6N x tokens (at a fixed efficiency: the same time for every layout of a group) are the analytical
baselines. Scored per group (`pipelines.search.ranking`): top-1 regret, top-3 containment, Spearman rho.

Nothing is fitted or tuned on these measurements: they are read only to score. Emulation cost grows
with micro-batches x layers (summed over pipeline stages), so on a 2-core machine only some groups
fit: `DEFAULT_MULTI` and the cheapest `DEFAULT_SINGLE` single-node groups with at least 5 layouts.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from rich.console import Console

from emulator.core.hardware import get_gpu
from emulator.search import Options, Program, run_search
from emulator.search.space import parse_space
from emulator.search.store import Store
from pipelines.search.groups import Group, cheapest_single, program_path, vtrain_groups
from pipelines.search.ranking import error_summary, relative_errors, scores
from pipelines.validation.baselines import BaselineUnavailable, llm_analysis_s

DEFAULT_MULTI = ("multi-3.6B-64gpu", "multi-18.4B-256gpu")
DEFAULT_SINGLE = 6
MIN_LAYOUTS = 5
SIX_N_EFFICIENCY = 0.5  # 6N x tokens at half of the dense fp16 peak: any constant ranks every layout alike
METHODS = ("maya", "roofline", "llm-analysis", "6N-tokens")
# the validation program the ranking trials run by default (`pipelines.validation.holdout.PROGRAMS`):
# `--program megatron-core` runs megatron-core itself
DEFAULT_PROGRAM = "imitation"


@dataclass
class GroupResult:
    name: str
    kind: str
    gpus: int
    layouts: int
    measured: dict = field(default_factory=dict)  # layout -> measured s
    predicted: dict = field(default_factory=dict)  # method -> {layout: s or None}
    scores: dict = field(default_factory=dict)  # method -> ranking.scores
    wall_s: float = 0.0  # the maya search (emulations included; 0 when all were cached)
    executed: int = 0
    cached: int = 0
    note: str = ""
    iterations: int = 0  # optimizer steps each trial emulated

    def to_json(self) -> dict:
        key = lambda lay: "tp{}-pp{}-mb{}".format(*lay)  # noqa: E731
        return dict(name=self.name, kind=self.kind, gpus=self.gpus, layouts=self.layouts, wall_s=self.wall_s,
                    executed=self.executed, cached=self.cached, note=self.note, iterations=self.iterations,
                    scores=self.scores,
                    measured={key(k): v for k, v in self.measured.items()},
                    predicted={m: {key(k): v for k, v in p.items()} for m, p in self.predicted.items()})


class GroupSelectionError(ValueError):
    """A `--multi` name that is no group, or an `--only` that leaves no group: said before any trial runs,
    since an evaluation of nothing would otherwise print empty tables and look finished."""


def select_groups(multi: tuple[str, ...] = DEFAULT_MULTI, single: int = DEFAULT_SINGLE,
                  only: str | None = None) -> list[Group]:
    every_multi = vtrain_groups("multi")
    known = [g.name for g in every_multi]
    if unknown := [name for name in multi if name not in known]:
        raise GroupSelectionError(f"no multi-node group named {', '.join(unknown)}; the groups: {', '.join(known)}")
    m = [g for g in every_multi if g.name in multi]
    s = cheapest_single([g for g in vtrain_groups("single") if len(g.measured()) >= MIN_LAYOUTS], single)
    groups = s + m
    if not only:
        return groups
    if chosen := [g for g in groups if only in g.name]:
        return chosen
    others = [name for name in known if name not in multi and only in name]
    hint = f"; name {', '.join(others)} with --multi to run it" if others else ""
    raise GroupSelectionError(f"--only {only!r} matches none of the selected groups "
                              f"({', '.join(g.name for g in groups)}){hint}")


def _search(group: Group, store: Store, roofline_only: bool, console: Console, program: str, workers: int,
            iterations: int):
    """The group's layouts, exhaustively. `workers` > 1 runs that many trials at once (Ray Tune, a slot of
    cores each): a trial's simulation, and its emulation once fewer ranks than cores are left to run, use
    one core, so trials one by one leave the others idle part of the time."""
    space = parse_space(group.space_toml(iterations), path=f"vtrain:{group.name}")
    opts = Options(objective="time", algorithm="grid", budget=len(space.feasible()),
                   engine="ray" if workers > 1 else "inline", workers=workers, roofline_only=roofline_only)
    res = run_search(space, Program.of(program_path(program), None, []), opts, store=store, console=console).completed()
    return res, {e.key: (e.row or {}).get("iteration_time_s") if e.status == "ok" else None for e in res.entries}


def _analytical(group: Group) -> tuple[dict, dict, str]:
    llm, six, note = {}, {}, ""
    for c in group.cases:
        lay = group.layout(c)
        try:
            llm[lay] = llm_analysis_s(c.model, c.parallel, c.gpu, c.dtype, c.checkpoint)
        except BaselineUnavailable as e:
            llm[lay], note = None, str(e)
        m = c.model
        n_params = 12 * m["layers"] * m["hidden"] ** 2 + m["vocab"] * m["hidden"]
        tokens = c.parallel["global_batch"] * m["seq"]
        six[lay] = 6 * n_params * tokens / (c.world_size * get_gpu(c.gpu).peak_flops["float16"] * SIX_N_EFFICIENCY)
    return llm, six, note


def evaluate_group(group: Group, store: Store, console: Console, program: str = "imitation",
                   workers: int = 1, iterations: int | None = None) -> GroupResult:
    """Every measured layout of `group` predicted by maya and by the baselines, and their scores. `iterations`:
    the optimizer steps each trial emulates (`Group.trial_iterations`)."""
    iterations = group.trial_iterations(iterations)
    t0 = time.perf_counter()
    res, maya = _search(group, store, False, console, program, workers, iterations)
    wall = time.perf_counter() - t0
    _, roof = _search(group, store, True, console, program, workers, iterations)
    llm, six, note = _analytical(group)
    measured = group.measured()
    out = GroupResult(name=group.name, kind=group.kind, gpus=group.first.world_size, layouts=len(measured),
                      measured=measured, wall_s=wall, executed=res.counts["executed"], cached=res.counts["cached"],
                      note=note, iterations=iterations)
    for method, pred in zip(METHODS, (maya, roof, llm, six), strict=True):
        out.predicted[method] = {k: pred.get(k) for k in measured}
        out.scores[method] = scores(pred, measured)
    return out


def summarize(results: list[GroupResult]) -> dict:
    """Per kind (single / multi) and method: median and max regret, mean top-3 containment, median rho, and
    the prediction error over every layout of the kind's groups (MAPE, median signed)."""
    out: dict = {}
    for kind in ("single", "multi"):
        rs = [r for r in results if r.kind == kind]
        if not rs:
            continue
        out[kind] = {}
        for m in METHODS:
            regrets = [r.scores[m]["regret"] for r in rs if r.scores[m]["regret"] is not None]
            top3 = [r.scores[m]["top3"] for r in rs if r.scores[m]["top3"] is not None]
            rhos = [r.scores[m]["rho"] for r in rs if r.scores[m]["rho"] is not None]
            errors = [e for r in rs for e in relative_errors(r.predicted[m], r.measured)]
            out[kind][m] = dict(groups=len(rs), median_regret=statistics.median(regrets) if regrets else None,
                                layouts=len(errors), **error_summary(errors),
                                max_regret=max(regrets) if regrets else None,
                                within_2pct=sum(1 for x in regrets if x <= 0.02),
                                top3=sum(top3) / len(top3) if top3 else None,
                                median_rho=statistics.median(rhos) if rhos else None)
    return out
