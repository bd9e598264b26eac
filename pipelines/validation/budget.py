"""The error budget: where each case's predicted time goes by op family, and which family carries the error.

For every case: maya's predicted device time per steady iteration and rank, split by op family
(prediction.json `device_time_by_family`), each family's share timed by the fallback, and the
held-out error of that family's learned model (the champion predictor's MLflow metrics). For cases
with per-op ground truth (a CPU case's full `maya profile`, which times every op; NeuSight's per-op labels
of its single-GPU rows, `pipelines.validation.label_ops`), the measured time of each family beside the
predicted one. The same split by phase of the step (forward, backward, optimizer, other; prediction.json
`device_time_by_phase`), measured where the case splits its step by pass: a CPU case's profile, NeuSight's
forward and backward latencies of its single-GPU rows. A case more than `FLAG_ERROR` from its measurement
is flagged with its largest family errors (measured where known, else the family's time x its
held-out error), never averaged away.
"""

from __future__ import annotations

from collections import defaultdict

from emulator.core.ops import op_family
from emulator.report.prediction import bound_by

FLAG_ERROR = 0.25
HOST, IDLE = "host", "idle"


def measured_by_family(traces: dict, steady: list[int]) -> dict[str, float]:
    """Measured device seconds per steady iteration and rank, per family, from a profile's `duration_s`."""
    return _measured_by(traces, steady, lambda op, kind, phase: "memcpy" if kind == "memcpy" else
                        kind if kind in ("collective", "p2p") else op_family(op))


def measured_by_phase(traces: dict, steady: list[int]) -> dict[str, float]:
    """The compute part of the same per phase of the step (the module tracker's `phase` of each row), without
    collectives, as the prediction's `device_time_by_phase` splits it."""
    return _measured_by(traces, steady, lambda op, kind, phase: None if kind in ("collective", "p2p") else
                        phase or "other")


def _measured_by(traces: dict, steady: list[int], key) -> dict[str, float]:
    acc: dict[str, float] = defaultdict(float)
    ranks = max(len(traces), 1)
    wanted = set(steady)
    for table in traces.values():
        cols = table.select([c for c in ("op", "kind", "phase", "iteration", "duration_s")
                             if c in table.column_names]).to_pydict()
        phases = cols.get("phase") or [None] * table.num_rows  # a trace written before phases were recorded
        for op, kind, phase, it, dur in zip(cols["op"], cols["kind"], phases, cols["iteration"], cols["duration_s"],
                                            strict=True):
            k = key(op, kind, phase) if it in wanted and dur else None
            if k is not None:
                acc[k] += dur
    n = max(len(wanted), 1) * ranks
    return {k: s / n for k, s in acc.items()}


def case_budget(row: dict, family_errors: dict[str, float] | None) -> list[dict]:
    """One line per family (largest first), plus host and idle: predicted seconds per iteration, share, fallback
    share, the family's held-out median error, measured seconds and error where the case has them."""
    fams = row.get("device_time_by_family") or {}
    measured = row.get("measured_by_family") or {}
    it = row.get("predicted_s") or 0.0
    lines = []
    for fam, f in fams.items():
        pred = f["device_s"]
        m = measured.get(fam)
        lines.append({"family": fam, "predicted_s": pred, "share": pred / it if it else None,
                      "fallback_share": f.get("fallback_share"), "adjusted_share": f.get("adjusted_share"),
                      "heldout_median_ape": (family_errors or {}).get(fam),
                      "measured_s": m, "error": (pred - m) / m if m else None})
    b = row.get("breakdown_s") or {}
    for key in (HOST, IDLE):
        if b.get(key) is not None:
            lines.append({"family": key, "predicted_s": b[key], "share": b[key] / it if it else None})
    return lines


def phase_budget(row: dict) -> list[dict]:
    """One line per phase of the step (largest first): predicted device seconds per iteration and rank, its
    share of the step, and the measured seconds and error where the case splits its step by pass."""
    phases = row.get("device_time_by_phase") or {}
    measured = row.get("measured_by_phase") or {}
    it = row.get("predicted_s") or 0.0
    lines = []
    for ph in sorted(set(phases) | set(measured), key=lambda k: -(phases.get(k) or {}).get("device_s", 0.0)):
        pred = (phases.get(ph) or {}).get("device_s")
        m = measured.get(ph)
        lines.append({"phase": ph, "predicted_s": pred, "share": pred / it if it and pred is not None else None,
                      "measured_s": m, "error": (pred - m) / m if m and pred is not None else None})
    return lines


def row_bound_by(row: dict) -> str | None:
    """A report row's `bound_by`: its prediction's own; rows stored before predictions said it, the same rule
    (`emulator.report.prediction.bound_by`) read from their breakdown."""
    return row.get("bound_by") or bound_by(row.get("predicted_s"), row.get("breakdown_s") or {})


def flag(row: dict, lines: list[dict]) -> str | None:
    """Why a case more than FLAG_ERROR off is off, from its largest family errors; None within bounds."""
    err = row.get("maya_error")
    if err is None or abs(err) <= FLAG_ERROR:
        return None
    fams = [ln for ln in lines if ln["family"] not in (HOST, IDLE)]
    if any(ln.get("error") is not None for ln in fams):
        worst = sorted((ln for ln in fams if ln.get("error") is not None),
                       key=lambda ln: -abs(ln["predicted_s"] - (ln["measured_s"] or 0)))[:3]
        parts = [f"{ln['family']} {ln['error'] * 100:+.0f}% ({(ln['predicted_s'] - ln['measured_s']) * 1e3:+.1f} ms)"
                 for ln in worst]
    else:
        worst = sorted(fams, key=lambda ln: -(ln["predicted_s"] * ((ln.get("heldout_median_ape") or 0) / 100
                                                                 + (ln.get("fallback_share") or 0))))[:3]
        parts = [f"{ln['family']} {(ln['share'] or 0) * 100:.0f}% of the step, "
                 f"{_heldout_text(ln.get('heldout_median_ape'))}, "
                 f"fallback {(ln.get('fallback_share') or 0) * 100:.0f}%" for ln in worst]
    bound = " (host-bound: the host time sets the step)" if row_bound_by(row) == "host" else ""
    return f"{err * 100:+.0f}%{bound}; largest families: " + "; ".join(parts)


def markdown(rows: list[dict], family_errors_by_gpu: dict[str, dict]) -> str:
    out = ["\n### Error budget\n",
           "Per case: predicted device time per steady iteration and rank by op family (and the host and idle "
           "time of the step), the share the fallback timed, the family's held-out median error on its own "
           "measurements, and, where the case has per-op ground truth, the measured time: a CPU case's full "
           "`maya profile`; NeuSight's single-GPU rows, NeuSight's own per-op times of the program it measured "
           "(each node timed alone, one block times the layers; the loss is not among them: "
           "`python -m pipelines.validation.label_ops`). Below each, the same device time by phase of the step, "
           "measured where the case splits its step by pass: a CPU case's profile (each op's time, by the phase "
           "it ran in); NeuSight's single-GPU rows, the forward and the backward latency it published (CUDA "
           "events around each pass: wall time, launch gaps included). Cases more than "
           f"{FLAG_ERROR * 100:.0f}% off are flagged first.\n"]
    ordered = sorted(rows, key=lambda r: -abs(r.get("maya_error") or 0))
    for r in ordered:
        lines = case_budget(r, family_errors_by_gpu.get(r["gpu"]))
        if not lines:
            continue
        why = flag(r, lines)
        out.append(f"\n**{r['name']}** ({r['world_size']}x{r['gpu']}, error {_pct(r.get('maya_error'), '+.1f')})"
                   + (f": **flagged** {why}" if why else "") + "\n\n")
        out.append("| family | predicted | share | fallback | held-out error | measured | error |\n"
                   "|---|---|---|---|---|---|---|\n")
        for ln in lines[:12]:
            heldout = ln.get("heldout_median_ape")
            out.append(f"| {ln['family']} | {_ms(ln['predicted_s'])} | {_pct(ln.get('share'), '.0f')} | "
                       f"{_pct(ln.get('fallback_share'), '.0f')} | "
                       f"{'-' if heldout is None else f'{heldout:.1f}%'} | {_ms(ln.get('measured_s'))} | "
                       f"{_pct(ln.get('error'), '+.0f')} |\n")
        phases = phase_budget(r)
        if phases:
            out.append("\n| phase | predicted | share | measured | error |\n|---|---|---|---|---|\n")
            for ln in phases:
                out.append(f"| {ln['phase']} | {_ms(ln['predicted_s'])} | {_pct(ln.get('share'), '.0f')} | "
                           f"{_ms(ln.get('measured_s'))} | {_pct(ln.get('error'), '+.0f')} |\n")
    return "".join(out)


def _heldout_text(ape: float | None) -> str:
    """The family's held-out error as the flag line says it (none for a family without a learned model)."""
    return "no held-out error" if ape is None else f"held-out error {ape:.1f}%"


def _pct(x: float | None, fmt: str) -> str:
    return "-" if x is None else f"{x * 100:{fmt}}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f} ms"
