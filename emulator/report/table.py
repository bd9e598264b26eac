"""The terminal answer: a rich table of the prediction. Bad news comes first: an OOM or a hang
is printed before (or instead of) any number, because a time for a job that cannot run misleads."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from emulator.report.prediction import Prediction

GiB = 2**30


def _t(s) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _bound(pred: dict) -> str | None:
    """The `bound by` row: what sets the step, in words a user can act on."""
    kind, t, b = pred.get("bound_by"), pred.get("iteration_time_s"), pred.get("breakdown_s") or {}
    if not kind or not t:
        return None
    busy = 1.0 - (b.get("idle") or 0.0) / t
    if kind == "host":
        return (f"the host: a rank's own host work fills the step (the device is busy {100 * busy:.0f} % of it); a "
                "faster GPU would not shorten it, and the step is host time scaled to the target's CPU (host time "
                "scale below)")
    if kind == "waiting":
        return f"waiting: the device is busy {100 * busy:.0f} % of the step (pipeline bubbles, slower peers)"
    if kind == "communication":
        return f"communication: {_t(b.get('exposed_communication'))} exposed against {_t(b.get('compute'))} of compute"
    return f"compute: the device is busy {100 * busy:.0f} % of the step"


def print_prediction(prediction: Prediction, console: Console | None = None, out_dir=None) -> None:
    c = console or Console()
    pred = prediction.to_json()
    if pred.get("oom"):
        c.print(Panel(f"[bold]OUT OF MEMORY[/bold]: {pred.get('oom_reason') or 'a rank ran out of memory'}\n"
                      f"peak reserved {(pred.get('memory_reserved_bytes') or 0) / GiB:.2f} GiB, "
                      f"capacity {(pred.get('memory_capacity_bytes') or 0) / GiB:.2f} GiB per GPU",
                      style="red", title="maya"))
    if pred.get("emulation_failed"):
        f = pred["emulation_failed"]
        c.print(Panel(f"[bold]the program failed during emulation[/bold] on rank {f.get('rank')}: {f.get('error')}\n"
                      "the trace stops there, so what follows describes only the part that ran",
                      style="red", title="maya"))
    if pred.get("hang"):
        c.print(Panel(pred["hang"]["message"], style="red", title="hang"))
        return
    variant = pred.get("gpu_variant")
    part = f"{pred['gpu']} ({variant['name']}, a variant of {variant['base']})" if variant else pred["gpu"]
    t = Table(title=f"maya prediction: {pred['world_size']} x {part} "
                    f"({pred['nnodes']} node(s) x {pred['nproc_per_node']})", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("iteration time (steady state)", _t(pred.get("iteration_time_s")))
    band = pred.get("iteration_time_band_s")
    if band:
        t.add_row("  range from this machine's speed", f"{_t(band[0])} to {_t(band[1])} (host-bound: the host gaps "
                  "read at the slowest and the fastest of the run's host-speed probes)")
    its = pred.get("iterations_s") or []
    if len(its) > 1:
        t.add_row("iterations", ", ".join(_t(x) for x in its[:8]) + (" ..." if len(its) > 8 else ""))
    b = pred.get("breakdown_s") or {}
    for k in ("compute", "communication", "exposed_communication", "host", "idle"):
        t.add_row(f"  {k.replace('_', ' ')}", _t(b.get(k)))
    bound = _bound(pred)
    if bound:
        t.add_row("bound by", bound)
    phases = pred.get("device_time_by_phase") or {}
    if phases:
        t.add_row("device time by phase (per rank)", ", ".join(f"{ph} {_t(v['device_s'])}" for ph, v in phases.items()))
    if pred.get("tokens_per_s"):
        t.add_row("tokens / s", f"{pred['tokens_per_s']:,.0f}")
    t.add_row("MFU", _pct(pred.get("mfu")) + f" (vs {pred.get('mfu_peak_dtype')} peak)")
    if pred.get("peak_memory_bytes") is not None:
        t.add_row("peak memory allocated / reserved (max rank)",
                  f"{pred['peak_memory_bytes'] / GiB:.2f} / {(pred.get('memory_reserved_bytes') or 0) / GiB:.2f} GiB"
                  f" of {pred['memory_capacity_bytes'] / GiB:.0f} GiB")
    t.add_row("cost / iteration", "-" if pred.get("cost_per_iteration_usd") is None
              else f"${pred['cost_per_iteration_usd']:.5f}")
    if pred.get("cost_per_million_tokens_usd"):
        t.add_row("cost / 1M tokens", f"${pred['cost_per_million_tokens_usd']:.3f}")
    est = pred.get("estimator") or {}
    cov = est.get("coverage") or {}
    t.add_row("kernels estimated by", str(est.get("kernels")))
    t.add_row("collectives estimated by", str(est.get("collectives")))
    t.add_row("device time learned / fallback", f"{_pct(cov.get('learned'))} / {_pct(cov.get('fallback'))}")
    cond = est.get("conditions") or {}
    if cond:
        t.add_row("training conditions", f"{_pct(est.get('adjusted_share'))} of device time added: "
                  f"{cond.get('assumption', '')}")

    if pred.get("unsupported_ops"):
        ops = pred["unsupported_ops"]
        t.add_row("ops without a fake kernel (best guess, roofline)",
                  ", ".join(f"{op} x{n}" for op, n in sorted(ops.items())[:4]) + (" ..." if len(ops) > 4 else ""))
    if pred.get("routing"):
        t.add_row("expert routing (data-dependent sizes)", f"{pred['routing']} (--routing)")
    host = pred.get("host_speed") or {}
    if host:
        t.add_row("host time scale", f"x{host.get('scale', 1.0):.2f}: {host.get('source')}")
    walls = f"{_t(pred.get('emulation_wall_s'))} / {_t(pred.get('simulation_wall_s'))}"
    t.add_row("emulation / simulation wall", walls)
    c.print(t)
    if pred.get("warning"):
        c.print(f"[yellow]warning: {pred['warning']}[/yellow]")
    for t in pred.get("cuda_event_timings") or []:
        c.print(f"torch.cuda.Event timing the program read (event {t['start_event']} -> {t['end_event']}): "
                f"{t['median_ms']:.3f} ms simulated (median of {t['reads']} reads; the program saw a placeholder)",
                highlight=False)
    for note in pred.get("notes") or []:
        c.print(f"note: {note}", highlight=False)
    if out_dir is not None:
        c.print(f"prediction: {out_dir}/prediction.json" + (f", timeline: {out_dir}/timeline.json (open in "
                                                            "https://ui.perfetto.dev)" if pred.get("timeline") else ""))
