"""The `make search-eval` report: both parts run, printed as tables and written to <warehouse>/search/eval/
(report.json: everything; report.md: the tables and every layout's measured and predicted time)."""

from __future__ import annotations

import datetime as dt
import json
import platform
from pathlib import Path

from rich.console import Console
from rich.table import Table

from emulator.core.files import atomic_write_bytes
from emulator.core.settings import warehouse_root
from emulator.search.cores import usable_cores
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


def _signed(x) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


RANKING_TITLE = "maya search vs measured optimum (vTrain, A100): top-1 regret / top-3 / Spearman rho"
ERROR_TITLE = "predicted vs measured iteration time (vTrain, A100): MAPE / median signed (+: too long)"


def ranking_rows(ranking: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the ranking table, from the report's `ranking` part (groups, then medians per kind)."""
    rows = [[g["name"], str(g["layouts"]), *(f"{_pct(g['scores'][m]['regret'])} / {_num(g['scores'][m]['top3'], '.0%')}"
                                             f" / {_num(g['scores'][m]['rho'])}" for m in METHODS),
             f"{g['wall_s'] / 60:.1f} min"] for g in ranking["groups"]]
    rows += [[f"{kind}: median", str(per["maya"]["groups"]),
              *(f"{_pct(per[m]['median_regret'])} / {_num(per[m]['top3'], '.0%')} / {_num(per[m]['median_rho'])}"
                for m in METHODS), ""] for kind, per in ranking["summary"].items()]
    return ["group", "layouts", *METHODS, "search wall"], rows


def error_rows(ranking: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the iteration-time error table: per group, then over every layout of a kind."""
    cell = lambda s: f"{_pct(s['mape'])} / {_signed(s['signed'])}"  # noqa: E731
    rows = [[g["name"], str(g["layouts"]), *(cell(g["scores"][m]) for m in METHODS)] for g in ranking["groups"]]
    rows += [[f"{kind}: all layouts", str(per["maya"]["layouts"]), *(cell(per[m]) for m in METHODS)]
             for kind, per in ranking["summary"].items()]
    return ["group", "layouts", *METHODS], rows


def layout_rows(group: dict) -> tuple[list[str], list[list[str]]]:
    """One group's layouts, fastest measured first: measured time, each method's prediction, maya's error."""
    best = min(group["measured"], key=group["measured"].get)
    rows = []
    for lay, t in sorted(group["measured"].items(), key=lambda kv: kv[1]):
        pred = {m: group["predicted"][m].get(lay) for m in METHODS}
        err = None if pred["maya"] is None else pred["maya"] / t - 1
        rows.append([lay + (" (measured best)" if lay == best else ""), f"{t:.3f}",
                     *(_num(pred[m], ".3f") for m in METHODS), _signed(err)])
    return ["layout", "measured (s)", *(f"{m} (s)" for m in METHODS), "maya error"], rows


def rich_table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    t = Table(title=title)
    t.add_column(header[0])
    for h in header[1:]:
        t.add_column(h, justify="right")
    for row in rows:
        t.add_row(*row)
    return t


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def markdown(rep: dict) -> str:
    """report.md: the ranking and error tables, then each group's layouts, measured against predicted."""
    lines = [f"# maya search evaluation ({rep.get('program', 'imitation')} program)", "",
             f"started {rep.get('started')}, finished {rep.get('finished', '(not finished)')}; "
             f"emulated iterations a trial: {rep.get('iterations') or 'each group its own (below)'}", ""]
    lines += [f"- {n}" for n in rep.get("notes", [])]
    ranking = rep.get("ranking")
    if ranking:
        lines += ["", f"## {RANKING_TITLE}", "", *_md_table(*ranking_rows(ranking))]
        lines += ["", f"## {ERROR_TITLE}", "", *_md_table(*error_rows(ranking))]
        for g in ranking["groups"]:
            steps = f", {g['iterations']} emulated iterations a trial" if g.get("iterations") else ""
            lines += ["", f"### {g['name']} ({g['gpus']} GPUs{steps})", "", *_md_table(*layout_rows(g))]
    eff = rep.get("efficiency")
    if eff:
        lines += ["", f"## {_efficiency_title(eff)}", "", *_md_table(*efficiency_rows(eff))]
    return "\n".join(lines) + "\n"


def _efficiency_title(eff: dict) -> str:
    return f"evaluations to within 1% of the exhaustive optimum ({eff['size']:,}-point space, budget {eff['budget']})"


def efficiency_rows(eff: dict) -> tuple[list[str], list[list[str]]]:
    rows = [[alg, str(s["runs"]), str(s["reached"]), *(_num(s[k], ".0f") for k in ("median", "best", "worst"))]
            for alg, s in eff["summary"].items()]
    return ["algorithm", "runs", "reached", "median", "best", "worst"], rows


def run_eval(multi=None, single=None, only=None, ranking: bool = True, efficiency: bool = True, seeds: int = 10,
             console: Console | None = None, out_dir: Path | None = None, program: str = DEFAULT_PROGRAM,
             workers: int | None = None, iterations: int | None = None) -> dict:
    """`program` names the validation program every ranking trial runs (`pipelines.validation.holdout.PROGRAMS`);
    its report goes to `search/eval` for the imitation, `search/eval-<program>` otherwise. `workers`: trials at
    once (default one per usable core). `iterations`: optimizer steps each ranking trial emulates (default each
    group's own, `Group.trial_iterations`: the validation's for single-node groups, 2 for multi-node ones)."""
    console = console or Console()
    if ranking:  # only the ranking trials run it: an unknown or uninstalled program stops here, before any trial
        require_program(program)
    out_dir = Path(out_dir or warehouse_root() / "search" / ("eval" if program == "imitation" else f"eval-{program}"))
    out_dir.mkdir(parents=True, exist_ok=True)
    store = Store()
    workers = workers or len(usable_cores())
    rep: dict = dict(started=dt.datetime.now().isoformat(timespec="seconds"), machine=platform.node(), notes=[],
                     program=program, workers=workers, iterations=iterations)
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
            results.append(evaluate_group(g, store, console, program, workers, iterations))
            rep["ranking"] = dict(groups=[r.to_json() for r in results], summary=summarize(results))
            _write(out_dir, rep)
        if results:
            console.print(rich_table(RANKING_TITLE, *ranking_rows(rep["ranking"])))
            console.print(rich_table(ERROR_TITLE, *error_rows(rep["ranking"])))
    if efficiency:
        _predictors(parts(), out_dir, rep, console)
        rep["efficiency"] = run_efficiency(store, console, seeds)
        _write(out_dir, rep)
        console.print(rich_table(_efficiency_title(rep["efficiency"]), *efficiency_rows(rep["efficiency"])))
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
    text = json.dumps(rep, indent=1, default=str)
    atomic_write_bytes(out_dir / "report.json", text.encode())
    atomic_write_bytes(out_dir / "report.md", markdown(json.loads(text)).encode())
