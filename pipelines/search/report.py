"""The `make search-eval` report: both parts run, printed as tables and written to <warehouse>/search/eval/
(report.json: everything; report.md: the tables and every layout's measured and predicted time)."""

from __future__ import annotations

import datetime as dt
import json
import platform
from pathlib import Path

from rich.console import Console
from rich.table import Table

from emulator.core.settings import warehouse_root
from emulator.search.store import Store
from pipelines.search.efficiency import parts, run_efficiency
from pipelines.search.evaluate import (
    DEFAULT_MULTI,
    DEFAULT_PROGRAM,
    DEFAULT_SINGLE,
    METHODS,
    evaluate_group,
    select_groups,
    summarize,
)
from pipelines.search.groups import require_program
from pipelines.validation.holdout import HoldoutMissingError
from pipelines.validation.runner import ensure_predictors


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x, fmt=".2f") -> str:
    return "-" if x is None else format(x, fmt)


def ranking_table(results, summary) -> Table:
    t = Table(title="maya search vs measured optimum (vTrain, A100): top-1 regret / top-3 / Spearman rho")
    t.add_column("group")
    t.add_column("layouts", justify="right")
    for m in METHODS:
        t.add_column(m, justify="right")
    t.add_column("search wall", justify="right")
    for r in results:
        t.add_row(r.name, str(r.layouts), *(f"{_pct(r.scores[m]['regret'])} / {_num(r.scores[m]['top3'], '.0%')} / "
                                            f"{_num(r.scores[m]['rho'])}" for m in METHODS),
                  f"{r.wall_s / 60:.1f} min")
    for kind, per in summary.items():
        t.add_row(f"[bold]{kind}: median[/bold]", str(per["maya"]["groups"]),
                  *(f"{_pct(per[m]['median_regret'])} / {_num(per[m]['top3'], '.0%')} / {_num(per[m]['median_rho'])}"
                    for m in METHODS), "")
    return t


def _signed(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def error_table(results, summary) -> Table:
    """How far each method's iteration times are from the measured ones: MAPE / median signed error."""
    t = Table(title="predicted vs measured iteration time (vTrain, A100): MAPE / median signed (+: too long)")
    t.add_column("group")
    t.add_column("layouts", justify="right")
    for m in METHODS:
        t.add_column(m, justify="right")
    for r in results:
        t.add_row(r.name, str(r.layouts), *(f"{_pct(r.scores[m]['mape'])} / {_signed(r.scores[m]['signed'])}"
                                            for m in METHODS))
    for kind, per in summary.items():
        t.add_row(f"[bold]{kind}: all layouts[/bold]", str(per["maya"]["layouts"]),
                  *(f"{_pct(per[m]['mape'])} / {_signed(per[m]['signed'])}" for m in METHODS))
    return t


def markdown(rep: dict) -> str:
    """report.md: the ranking and error tables, then each group's layouts, measured against predicted."""
    lines = [f"# maya search evaluation ({rep.get('program', 'imitation')} program)", "",
             f"started {rep.get('started')}, finished {rep.get('finished', '(not finished)')}", ""]
    lines += [f"- {n}" for n in rep.get("notes", [])]
    ranking = rep.get("ranking")
    if ranking:
        head = "| group | layouts | " + " | ".join(METHODS) + " | search wall |"
        lines += ["", "## Ranking: top-1 regret / top-3 / Spearman rho", "", head, "|" + "---|" * (len(METHODS) + 3)]
        for g in ranking["groups"]:
            s = g["scores"]
            lines.append(f"| {g['name']} | {g['layouts']} | " + " | ".join(
                f"{_pct(s[m]['regret'])} / {_num(s[m]['top3'], '.0%')} / {_num(s[m]['rho'])}" for m in METHODS)
                + f" | {g['wall_s'] / 60:.1f} min |")
        lines += ["", "## Iteration time: MAPE / median signed error (+: predicted too long)", "",
                  "| group | layouts | " + " | ".join(METHODS) + " |", "|" + "---|" * (len(METHODS) + 2)]
        for g in ranking["groups"]:
            s = g["scores"]
            lines.append(f"| {g['name']} | {g['layouts']} | "
                         + " | ".join(f"{_pct(s[m].get('mape'))} / {_signed(s[m].get('signed'))}" for m in METHODS)
                         + " |")
        for kind, per in ranking["summary"].items():
            lines.append(f"| {kind}: all layouts | {per['maya'].get('layouts')} | "
                         + " | ".join(f"{_pct(per[m].get('mape'))} / {_signed(per[m].get('signed'))}"
                                      for m in METHODS) + " |")
        for g in ranking["groups"]:
            lines += ["", f"### {g['name']} ({g['gpus']} GPUs)", "",
                      "| layout | measured (s) | " + " | ".join(f"{m} (s)" for m in METHODS) + " | maya error |",
                      "|" + "---|" * (len(METHODS) + 3)]
            best = min(g["measured"], key=g["measured"].get)
            for lay, t in sorted(g["measured"].items(), key=lambda kv: kv[1]):
                pred = {m: g["predicted"][m].get(lay) for m in METHODS}
                err = None if pred["maya"] is None else pred["maya"] / t - 1
                mark = " (measured best)" if lay == best else ""
                lines.append(f"| {lay}{mark} | {t:.3f} | " + " | ".join(_num(pred[m], ".3f") for m in METHODS)
                             + f" | {_signed(err)} |")
    eff = rep.get("efficiency")
    if eff:
        lines += ["", f"## Evaluations to within 1% of the exhaustive optimum ({eff['size']:,}-point space, "
                      f"budget {eff['budget']})", "", "| algorithm | runs | reached | median | best | worst |",
                  "|---|---|---|---|---|---|"]
        for alg, s in eff["summary"].items():
            lines.append(f"| {alg} | {s['runs']} | {s['reached']} | "
                         + " | ".join(_num(s[k], ".0f") for k in ("median", "best", "worst")) + " |")
    return "\n".join(lines) + "\n"


def efficiency_table(eff: dict) -> Table:
    t = Table(title=f"evaluations to within 1% of the exhaustive optimum ({eff['size']:,}-point space, "
                    f"budget {eff['budget']})")
    for c in ("algorithm", "runs", "reached", "median", "best", "worst"):
        t.add_column(c, justify="right")
    for alg, s in eff["summary"].items():
        t.add_row(alg, str(s["runs"]), str(s["reached"]), *(_num(s[k], ".0f") for k in ("median", "best", "worst")))
    return t


def run_eval(multi=None, single=None, only=None, ranking: bool = True, efficiency: bool = True, seeds: int = 10,
             console: Console | None = None, out_dir: Path | None = None, program: str = DEFAULT_PROGRAM) -> dict:
    """`program` names the validation program every ranking trial runs (`pipelines.validation.holdout.PROGRAMS`);
    its report goes to `search/eval` for the imitation, `search/eval-<program>` otherwise."""
    console = console or Console()
    require_program(program)  # an unknown or uninstalled program stops here, before any trial
    out_dir = Path(out_dir or warehouse_root() / "search" / ("eval" if program == "imitation" else f"eval-{program}"))
    out_dir.mkdir(parents=True, exist_ok=True)
    store = Store()
    rep: dict = dict(started=dt.datetime.now().isoformat(timespec="seconds"), machine=platform.node(), notes=[],
                     program=program)
    if ranking:
        try:
            groups = select_groups(multi or DEFAULT_MULTI, DEFAULT_SINGLE if single is None else single, only)
        except HoldoutMissingError as e:
            groups = []
            rep["notes"].append(str(e))
        _predictors({g.first.gpu for g in groups}, out_dir, rep, console)
        results = []
        for g in groups:
            console.print(f"[bold]{g.name}[/bold]: {len(g.measured())} layouts, emulation work {g.work:,.0f}")
            results.append(evaluate_group(g, store, console, program))
            rep["ranking"] = dict(groups=[r.to_json() for r in results], summary=summarize(results))
            _write(out_dir, rep)
        if results:
            console.print(ranking_table(results, summarize(results)))
            console.print(error_table(results, summarize(results)))
    if efficiency:
        _predictors(parts(), out_dir, rep, console)
        rep["efficiency"] = run_efficiency(store, console, seeds)
        _write(out_dir, rep)
        console.print(efficiency_table(rep["efficiency"]))
    rep["finished"] = dt.datetime.now().isoformat(timespec="seconds")
    _write(out_dir, rep)
    console.print(f"report: {out_dir / 'report.json'}")
    return rep


def _predictors(parts: set[str], out_dir: Path, rep: dict, console: Console) -> None:
    """A fresh warehouse has no predictors: each part gets the default ones from the reference data first
    (as `make validate` does; a no-op when champions exist), so the first trial does not stop on it."""
    for gpu in sorted(parts):
        if note := ensure_predictors(gpu, out_dir):
            console.print(f"[yellow]{note}[/yellow]")
            rep["notes"].append(note)


def _write(out_dir: Path, rep: dict) -> None:
    (out_dir / "report.json").write_text(json.dumps(rep, indent=1, default=str))
    (out_dir / "report.md").write_text(markdown(json.loads(json.dumps(rep, default=str))))
