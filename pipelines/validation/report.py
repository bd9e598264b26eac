"""The validation report: per-row errors, summaries against the targets, baselines, plots.

Inputs are plain row dicts (one per case, built by `rows_for`), so the same code renders a
fresh run, a cached one, or a hand-made table in a test. Outputs go to one folder
(`<warehouse>/validation/` by default), each file written atomically:
    report.json   every row and summary (what the Dagster asset and other tools read)
    report.md     the two tables with errors and baselines, and the notes on misses
    cpu.png, gpu.png   predicted vs measured (log-log) with the +-10% band, maya and baselines
"""

from __future__ import annotations

import io
import statistics
from pathlib import Path

from emulator.core.files import atomic_write_bytes
from emulator.report.prediction import HOST_BOUND_SHARE
from emulator.trace.io import write_json
from pipelines.validation import budget
from pipelines.validation.metrics import meets, pct, rel_error, summarize

CPU_TARGET = ("median_abs", 0.10)  # median |error| <= 10% on the CPU table
GPU_TARGET = ("mape", 0.10)  # MAPE <= 10% on the GPU table
ESTIMATES = (("maya", "predicted_s"), ("roofline", "roofline_s"), ("llm-analysis", "llm_analysis_s"))


def err_key(label: str) -> str:
    """Row key of an estimate's signed error: 'maya_error', 'roofline_error', 'llm_analysis_error'."""
    return label.replace("-", "_") + "_error"


def row_for(case, result, llm_analysis_s: float | None = None, llm_analysis_note: str = "") -> dict:
    """One report row from a Case and a runner RunResult (CPU rows take the measured time from the run)."""
    measured = result.measured_s if case.source == "cpu" else case.measured_s
    row = {"name": case.name, "source": case.source, "gpu": case.gpu, "world_size": case.world_size,
           "nnodes": case.nnodes, "note": case.note, "measured_s": measured, "predicted_s": result.predicted_s,
           "roofline_s": result.roofline_s, "llm_analysis_s": llm_analysis_s, "oom": result.oom,
           "coverage": result.coverage, "error": result.error, "llm_analysis_note": llm_analysis_note,
           "wall_s": result.wall_s, "breakdown_s": getattr(result, "breakdown", {}),
           "bound_by": getattr(result, "bound_by", None),
           "band_s": getattr(result, "band_s", None),
           "roofline_sim_s": getattr(result, "roofline_sim_s", None), "load_avg": getattr(result, "load_avg", None),
           "device_time_by_family": getattr(result, "device_time_by_family", {}),
           "measured_by_family": getattr(result, "measured_by_family", {}),
           "device_time_by_phase": getattr(result, "device_time_by_phase", {}),
           "measured_by_phase": getattr(result, "measured_by_phase", {}),
           "measured_runs_s": getattr(result, "measured_runs_s", [])}
    add_errors(row)
    return row


def add_errors(row: dict) -> dict:
    """Signed relative error of each estimate in the row (None where missing or unmeasured)."""
    measured = row.get("measured_s")
    ok = measured is not None and measured == measured and measured > 0  # NaN-safe
    for label, key in ESTIMATES:
        row[err_key(label)] = rel_error(row.get(key), measured) if ok else None
    b = row.get("breakdown_s") or {}
    device = (b.get("compute") or 0.0) + (b.get("exposed_communication") or 0.0) if b.get("compute") else None
    row["device_error"] = rel_error(device, measured) if ok and row.get("predicted_s") else None
    return row


def table_summary(rows: list[dict], target: tuple[str, float]) -> dict:
    """Summaries of maya and each baseline over `rows`, and whether maya meets `target`."""
    key, limit = target
    out = {label: summarize(r.get(err_key(label)) for r in rows) for label, _ in ESTIMATES}
    # diagnostic, not a prediction: maya's device time (compute + exposed communication) alone
    out["maya device time (diagnostic)"] = summarize(r.get("device_error") for r in rows)
    out["target"] = {"metric": key, "limit": limit, "met": meets(out["maya"], key, limit)}
    by_source: dict[str, list[dict]] = {}
    for r in rows:
        by_source.setdefault(r["source"], []).append(r)
    out["by_source"] = {s: summarize(r.get("maya_error") for r in rs) for s, rs in sorted(by_source.items())}
    return out


# ----------------------------------------------------------------------------- rendering
def _secs(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s"


def _coverage(row: dict) -> str:
    cov = row.get("coverage") or {}
    learned = cov.get("learned")
    return "-" if learned is None else f"{float(learned) * 100:.0f}%"


def _split(row: dict) -> str:
    """Host time vs device compute time of maya's prediction: shows when the host model dominates."""
    b = row.get("breakdown_s") or {}
    if not b:
        return "-"
    return f"{_secs(b.get('host'))} / {_secs(b.get('compute'))}"


def _measured(row: dict) -> str:
    """The measured time, and each timing run's own median where there were several (CPU cases)."""
    runs = row.get("measured_runs_s") or []
    cell = _secs(row["measured_s"])
    return cell if len(runs) < 2 else f"{cell} ({' / '.join(_secs(r) for r in runs)})"


def measurement_drift(rows: list[dict]) -> str:
    """A line on how far each case's timing runs moved apart: the noise the measured side itself carries."""
    moved = sorted(max(r["measured_runs_s"]) / min(r["measured_runs_s"]) - 1 for r in rows
                   if len(r.get("measured_runs_s") or []) >= 2 and min(r["measured_runs_s"]) > 0)
    if not moved:
        return ""
    return (f"\nMeasurement drift: each case was timed twice (before its emulation and the calibration, and after "
            f"its prediction); the two runs' medians differ by a median {pct(statistics.median(moved))}, at most "
            f"{pct(moved[-1])} ({len(moved)} cases). An error smaller than that is within this machine's own "
            f"noise.\n")


def markdown_table(rows: list[dict]) -> str:
    head = ("| case | GPUs | config | measured | maya | error | maya host / device | roofline | error "
            "| llm-analysis | error | learned | status |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        status = "OOM" if r.get("oom") else ("failed" if r.get("predicted_s") is None and r.get("error") else "ok")
        lines.append(f"| {r['name']} | {r['world_size']}x{r['gpu']} | {r['note']} | {_measured(r)} "
                     f"| {_secs(r['predicted_s'])} | {pct(r['maya_error'], True)} | {_split(r)} "
                     f"| {_secs(r['roofline_s'])} "
                     f"| {pct(r['roofline_error'], True)} | {_secs(r['llm_analysis_s'])} "
                     f"| {pct(r['llm_analysis_error'], True)} | {_coverage(r)} | {status} |")
    return head + "\n".join(lines) + "\n"


def markdown_summary(summary: dict) -> str:
    t = summary["target"]
    lines = ["| estimate | rows scored | MAPE | median abs error | max abs error | median signed |",
             "|---|---|---|---|---|---|"]
    for label in [lbl for lbl, _ in ESTIMATES] + ["maya device time (diagnostic)"]:
        s = summary.get(label)
        if s is None:
            continue
        lines.append(f"| {label} | {s['scored']}/{s['n']} | {pct(s['mape'])} | {pct(s['median_abs'])} "
                     f"| {pct(s['max_abs'])} | {pct(s['bias'], True)} |")
    lines.append("\n(The diagnostic row scores maya's simulated device time, compute + exposed communication, "
                 "without the host; it is not what `maya predict` reports.)")
    verdict = {True: "**met**", False: "**missed**", None: "**not scored**"}[t["met"]]
    lines.append(f"\nTarget: maya {t['metric'].replace('_', ' ')} <= {t['limit'] * 100:.0f}%: {verdict}.")
    if summary.get("by_source"):
        lines.append("\nmaya by source: " + "; ".join(
            f"{s}: MAPE {pct(v['mape'])} ({v['scored']}/{v['n']})" for s, v in summary["by_source"].items()))
    return "\n".join(lines) + "\n"


def host_bound(rows: list[dict]) -> str:
    """A diagnosis line: how many predictions the simulated host time (not the device) determines."""
    scored = [r for r in rows if r.get("predicted_s") and r.get("breakdown_s")]
    bound = [r for r in scored if budget.row_bound_by(r) == "host"]
    if not bound:
        return ""
    over = [r for r in bound if (r.get("maya_error") or 0) > 0]
    banded = [r for r in bound if r.get("band_s") and r.get("measured_s")]
    inside = [r["name"] for r in banded if r["band_s"][0] <= r["measured_s"] <= r["band_s"][1]]
    band = (f" The measured time lies inside the prediction's host-speed range (`iteration_time_band_s`: the step "
            f"with each rank's host gaps read at its slowest and fastest host-speed probe) for {len(inside)} of "
            f"{len(banded)}{' (' + ', '.join(inside) + ')' if inside else ''}: there, this machine's speed alone "
            "could account for the error; outside it, something else does (the target's host speed, the "
            "program)." if banded else "")
    return (f"\n{len(bound)} of {len(scored)} predictions are host-bound (`bound_by`): the simulated host time (the "
            f"trace's recorded host gaps plus launch overhead) of a rank fills at least {HOST_BOUND_SHARE:.0%} of "
            f"the step, so the iteration time is the host's; {len(over)} of them over-predict. The `maya host / "
            "device` column shows both; where the device figure is close to the measurement, the error comes from "
            f"the host-gap timing, not from the kernel predictors.{band}\n")


def failures(rows: list[dict]) -> str:
    bad = [r for r in rows if r.get("error")]
    if not bad:
        return ""
    out = ["\nRows with problems (first lines of the error):\n"]
    for r in bad:
        msg = " ".join(str(r["error"]).split())[:400]
        out.append(f"- `{r['name']}`: {msg}")
    return "\n".join(out) + "\n"


def render_markdown(report: dict) -> str:
    parts = ["# maya validation\n\n", f"Generated {report['generated_at']} on {report['machine']}.\n"]
    for key, title in (("cpu", "CPU: real runs here vs `maya predict --gpu cpu`"),
                       ("gpu", "GPU: published measurements vs `maya emulate` + `maya simulate`")):
        section = report.get(key)
        parts.append(f"\n## {title}\n\n")
        if section is None:
            parts.append("Not run.\n")
            continue
        if section.get("skipped"):
            parts.append(f"Skipped: {section['skipped']}\n")
            continue
        parts.append(section.get("preamble", "") + "\n")
        parts.append(markdown_table(section["rows"]))
        parts.append("\n" + markdown_summary(section["summary"]))
        parts.append(measurement_drift(section["rows"]))
        parts.append(host_bound(section["rows"]))
        parts.append(failures(section["rows"]))
        parts.append(budget.markdown(section["rows"], report.get("family_errors") or {}))
        if section.get("plot"):
            parts.append(f"\n![{key}]({section['plot']})\n")
    if report.get("notes"):
        parts.append("\n## Notes\n\n" + "\n".join(f"- {n}" for n in report["notes"]) + "\n")
    return "".join(parts)


# ----------------------------------------------------------------------------- files


def plot(rows: list[dict], title: str, path: Path) -> bool:
    """Predicted vs measured, log-log, maya and baselines, with the +-10% band. False if nothing to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = {label: [(r["measured_s"], r[key]) for r in rows if r.get(key) and r.get(err_key(label)) is not None]
              for label, key in ESTIMATES}
    if not any(points.values()):
        return False
    fig, ax = plt.subplots(figsize=(6, 5.5))
    for (label, pts), marker in zip(points.items(), ("o", "s", "^"), strict=True):
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=label, alpha=0.8)
    values = [v for pts in points.values() for p in pts for v in p]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="exact")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.2, label="+-10%")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured iteration time (s)",
           ylabel="predicted iteration time (s)", title=title)
    ax.legend(loc="upper left")
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return True


def write_report(report: dict, out_dir: Path) -> dict[str, Path]:
    """Write report.json, report.md and the plots into `out_dir`; returns the paths written."""
    out_dir = Path(out_dir)
    written = {}
    for key, title in (("cpu", "CPU: maya vs measured here"), ("gpu", "GPU: maya vs published measurements")):
        section = report.get(key)
        if section and section.get("rows") and plot(section["rows"], title, out_dir / f"{key}.png"):
            section["plot"] = f"{key}.png"
            written[f"{key}_plot"] = out_dir / f"{key}.png"
    write_json(out_dir / "report.json", report)
    atomic_write_bytes(out_dir / "report.md", render_markdown(report).encode())
    written.update(json=out_dir / "report.json", markdown=out_dir / "report.md")
    return written
