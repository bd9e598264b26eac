"""End-to-end validation: run the suites, score them, write the report, print both tables.

`run_validation` is the one entry point; `python -m pipelines.validation` (= `make validate`)
and the Dagster asset `validation_report` both call it.
"""

from __future__ import annotations

import datetime as dt
import platform
from pathlib import Path

from rich.console import Console
from rich.table import Table

from emulator.core.hardware import get_gpu
from emulator.core.settings import warehouse_root
from pipelines.validation import baselines, label_ops, report, runner, suites
from pipelines.validation.holdout import HoldoutMissingError, neusight_phases
from pipelines.validation.metrics import pct


def default_out_dir() -> Path:
    return warehouse_root() / "validation"


def _machine() -> str:
    load = runner.load_average()
    cpu = get_gpu("cpu").name
    return f"{platform.node() or 'this machine'} ({cpu}, load average {load:.1f})" if load is not None else cpu


def _llm_analysis(case) -> tuple[float | None, str]:
    if case.source == "cpu":
        return None, "not a GPU transformer config"
    try:
        return baselines.llm_analysis_s(case.model, case.parallel, case.gpu, case.dtype, case.checkpoint), ""
    except baselines.BaselineUnavailable as e:
        return None, str(e)


def _loads(rows: list[dict]) -> str:
    loads = [r["load_avg"] for r in rows if r.get("load_avg") is not None]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "not recorded"


def _predictors(gpus: set[str], runs: Path, rep: dict, console: Console | None) -> None:
    """Champion predictors for every part of a table (trained/calibrated on first use); problems become notes."""
    for gpu in sorted(gpus):
        if console:
            console.print(f"[dim]predictors for {gpu} ...[/dim]")
        problem = runner.ensure_predictors(gpu, runs)
        if problem:
            rep["notes"].append(problem)
            if console:
                console.print(f"[yellow]{problem}[/yellow]")


def _family_errors(gpus: set[str]) -> dict[str, dict[str, float]]:
    """Each GPU's kernel champion's held-out median error per family (the error budget's reference column)."""
    from maya_models.registry import champion_family_errors

    out = {}
    for gpu in sorted(gpus):
        try:
            out[gpu] = champion_family_errors(gpu)
        except Exception:  # noqa: BLE001 - a registry that cannot answer leaves the column empty
            out[gpu] = {}
    return out


def _run_section(cases, run_one, console: Console | None, label: str) -> list[dict]:
    rows = []
    for i, case in enumerate(cases, 1):
        if console:
            console.print(f"[dim][{label} {i}/{len(cases)}] {case.name}: {case.note}[/dim]")
        res = run_one(case)
        if res is None:  # --stored: this case has not been run
            continue
        la, la_note = _llm_analysis(case)
        row = report.row_for(case, res, la, la_note)
        rows.append(row)
        if console:
            status = "OOM" if row["oom"] else (row["error"] or "")[:160].replace("\n", " ")
            console.print(f"    measured {row['measured_s']}, maya {row['predicted_s']} "
                          f"({pct(row['maya_error'], True)}) {status}")
    return rows


def _with_label_ops(res, measured_by_family: dict[str, float], measured_by_phase: dict[str, float]):
    """A GPU case's result with the per-family times its publisher measured op by op and the per-pass times it
    published (NeuSight's single-GPU rows), for the error budget; unchanged where there are none."""
    if res is not None and not res.measured_by_family:
        res.measured_by_family = measured_by_family
    if res is not None and not res.measured_by_phase:
        res.measured_by_phase = measured_by_phase
    return res


def run_validation(cpu: bool = True, gpu: bool = True, quick: bool = False, fresh: bool = False,
                   out_dir: Path | None = None, only: str | None = None, timeout_s: float = 900,
                   console: Console | None = None, resimulate: bool = False, stored: bool = False,
                   gpu_iterations: int = runner.GPU_ITERATIONS) -> dict:
    """Run the CPU and/or GPU suites and write the report; returns the report dict.

    `only` keeps the cases whose name contains it; `resimulate` reuses finished emulations but
    simulates them again (after new predictors); `fresh` reruns everything; `stored` runs nothing and
    reports the cases that have stored results (re-render the report); `gpu_iterations` is the
    optimizer steps each GPU case emulates (a changed count is another run, not a cached one). The GPU table is
    skipped with a reason (not an error) when the shared holdout data is absent.
    """
    out_dir = Path(out_dir or default_out_dir())
    runs = out_dir / "runs"
    rep: dict = {"generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": _machine(),
                 "quick": quick, "notes": list(NOTES)}
    keep = (lambda cs: [c for c in cs if only in c.name]) if only else (lambda cs: cs)
    if cpu and stored:
        rows = _run_section(keep(suites.cpu_cases(quick)), lambda c: runner.stored_result(c, runs), console, "cpu")
        rep["cpu"] = {"rows": rows, "summary": report.table_summary(rows, report.CPU_TARGET),
                      "preamble": CPU_PREAMBLE.format(load=_loads(rows))}
    elif cpu:
        cases = keep(suites.cpu_cases(quick))
        for i, case in enumerate(cases, 1):  # real runs and CPU emulations first ...
            if console:
                console.print(f"[dim][cpu {i}/{len(cases)}] measure + emulate {case.name}: {case.note}[/dim]")
            runner.measure_cpu_case(case, runs, timeout_s=timeout_s, fresh=fresh)
        if resimulate or not all(runner.cpu_result_done(c, runs) for c in cases):
            if console:  # ... then the CPU predictors, calibrated on the shapes those traces hold ...
                console.print("[dim]calibrating CPU predictors on the traces' shapes ...[/dim]")
            problem = runner.calibrate_cpu([runner.cpu_trace_dir(c, runs) for c in cases], runs)
            if problem:
                rep["notes"].append(problem)
        predict = lambda c: runner.predict_cpu_case(c, runs, timeout_s=timeout_s, resimulate=resimulate)
        rows = _run_section(cases, predict, console, "cpu")  # ... then predict
        rep["cpu"] = {"rows": rows, "summary": report.table_summary(rows, report.CPU_TARGET),
                      "preamble": CPU_PREAMBLE.format(load=_loads(rows))}
    if gpu:
        try:
            cases = keep(suites.gpu_cases(quick))
        except HoldoutMissingError as e:
            rep["gpu"] = {"skipped": str(e), "rows": []}
            if console:
                console.print(f"[yellow]GPU table skipped: {e}[/yellow]")
        else:
            if stored:
                run_one = lambda c: runner.stored_result(c, runs)
            else:
                _predictors({c.gpu for c in cases}, runs, rep, console)
                run_one = lambda c: runner.run_gpu_case(c, runs, iterations=gpu_iterations, timeout_s=timeout_s,
                                                        fresh=fresh, resimulate=resimulate)
            labelled, passes = label_ops.families_by_case(), neusight_phases()
            rows = _run_section(cases, lambda c: _with_label_ops(run_one(c), labelled.get(c.name, {}),
                                                                 passes.get(c.name, {})), console, "gpu")
            rep["gpu"] = {"rows": rows, "summary": report.table_summary(rows, report.GPU_TARGET),
                          "preamble": GPU_PREAMBLE}
    gpus = {r["gpu"] for s in ("cpu", "gpu") for r in (rep.get(s) or {}).get("rows", [])}
    rep["family_errors"] = _family_errors(gpus)
    paths = report.write_report(rep, out_dir)
    rep["files"] = {k: str(v) for k, v in paths.items()}
    if console:
        print_tables(rep, console)
    return rep


def print_tables(rep: dict, console: Console) -> None:
    for key, title in (("cpu", "CPU: measured here vs maya predict --gpu cpu"),
                       ("gpu", "GPU: published measurements vs maya")):
        section = rep.get(key)
        if not section:
            continue
        if section.get("skipped"):
            console.print(f"[yellow]{title}: skipped ({section['skipped']})[/yellow]")
            continue
        t = Table(title=title)
        for col in ("case", "GPUs", "measured", "maya", "err", "roofline", "err", "llm-analysis", "err"):
            t.add_column(col, justify="left" if col == "case" else "right")
        for r in section["rows"]:
            t.add_row(r["name"], f"{r['world_size']}x{r['gpu']}", report._secs(r["measured_s"]),
                      "OOM" if r["oom"] else report._secs(r["predicted_s"]), pct(r["maya_error"], True),
                      report._secs(r["roofline_s"]), pct(r["roofline_error"], True),
                      report._secs(r["llm_analysis_s"]), pct(r["llm_analysis_error"], True))
        console.print(t)
        s = section["summary"]
        for label in [lbl for lbl, _ in report.ESTIMATES] + ["maya device time (diagnostic)"]:
            v = s[label]
            console.print(f"  {label:30s} scored {v['scored']}/{v['n']}  MAPE {pct(v['mape'])}  "
                          f"median |err| {pct(v['median_abs'])}")
        tgt = s["target"]
        verdict = {True: "[green]met[/green]", False: "[red]missed[/red]", None: "not scored"}[tgt["met"]]
        console.print(f"  target: {tgt['metric']} <= {tgt['limit'] * 100:.0f}%: {verdict}")
    console.print(f"report: {rep['files'].get('markdown')}")


CPU_PREAMBLE = (
    "Each program runs for real on this CPU with `maya profile --timing-only`, twice, 10 optimizer steps each "
    "(the measured column: median over both runs' steady iterations, slowest rank; in brackets each run's "
    "median) and is predicted with `maya predict --gpu cpu` using the CPU-calibrated "
    "predictors. 1-minute load average right after each measurement: {load} (other work on the machine "
    "adds noise to the measured times).\n")
GPU_PREAMBLE = (
    "Each row reruns the published configuration with `examples/validation/megatron_gpt.py` (same model, "
    "TP/PP/DP layout, micro/global batch, activation checkpointing, precision) under `maya emulate` on the "
    "published GPU, then `maya simulate`. Measured values are the publications' (vTrain: Megatron-DeepSpeed "
    "on A100 SXM, 8 per node; NeuSight: GPT-2-large FP32 on H100 / A100).\n")
NOTES = [
    "vTrain rows: a seeded, stratified subset (one row per parallel layout with bounded emulation work); see "
    "pipelines/validation/suites.py for the rule. The 175B multi-node rows are not run (emulation too long on 2 "
    "cores).",
    "NeuSight single-GPU rows measured forward + backward only; the validation program also runs its AdamW "
    "step, so maya's figure includes an optimizer step the measurement does not (a few % of the iteration).",
    "roofline = the same trace, every op timed by maya's analytical fallback and summed per rank (no overlap, no "
    "bubbles). llm-analysis = PyPI llm-analysis 0.2.2 with its shipped GPU configs and default efficiencies "
    "(FLOPs / peak); for FP32 rows its peak is set to the FP32 non-tensor-core peak.",
]
