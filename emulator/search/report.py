"""What `maya search` shows: the ranked table, the best configuration's command line, the Pareto
plot of iteration time against cost per token (PNG and a self-contained HTML page), and `--json`.

The summary line says how many configurations were executed, read from the cache, skipped by
pruning and ruled out by constraints, so a user sees what the answer cost and what it rests on.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from emulator.search.driver import Entry, SearchResult

GiB = 2**30


def entry_json(result: SearchResult, e: Entry, rank: int | None = None) -> dict:
    row = e.row or {}
    peak = row.get("peak_memory_bytes")
    return dict(rank=rank, knobs=result.space.setting(e.key), outcome=e.outcome, status=e.status, reason=e.reason,
                objective=e.value, iteration_time_s=row.get("iteration_time_s"), tokens_per_s=row.get("tokens_per_s"),
                mfu=row.get("mfu"), peak_memory_gib=None if peak is None else peak / GiB, gpu=row.get("gpu"),
                world_size=row.get("world_size"), cost_per_iteration_usd=row.get("cost_per_iteration_usd"),
                cost_per_million_tokens_usd=row.get("cost_per_million_tokens_usd"), command=row.get("command"),
                bound_by=row.get("bound_by"), iteration_time_band_s=_band(row), trial_key=e.trial_key,
                traceback_path=row.get("traceback_path"))


def _band(row: dict) -> list[float] | None:
    """A host-bound trial's [low, high] iteration time from this machine's host-speed probes (prediction.json)."""
    low, high = row.get("iteration_time_low_s"), row.get("iteration_time_high_s")
    return None if low is None or high is None else [low, high]


def _value_range(e: Entry) -> tuple[float, float]:
    """The objective's range: it is proportional to the iteration time (time, cost, cost per token)."""
    band, t = _band(e.row or {}), (e.row or {}).get("iteration_time_s")
    if not band or not t:
        return e.value, e.value
    return e.value * band[0] / t, e.value * band[1] / t


def within_host_noise(ranked: list[Entry]) -> list[Entry]:
    """The configurations after the best that this machine's host timing cannot tell from it: the best is
    host-bound and the low end of their objective's range is under the high end of the best's."""
    if not ranked or not _band(ranked[0].row or {}):
        return []
    top = _value_range(ranked[0])[1]
    return [e for e in ranked[1:] if _value_range(e)[0] <= top]


def pareto(entries: list[Entry]) -> list[Entry]:
    """Configurations no other beats on both iteration time and cost per token (cost per iteration if no tokens)."""
    pts = [(e, _cost(e), e.row["iteration_time_s"]) for e in entries
           if e.row and e.row.get("iteration_time_s") is not None and _cost(e) is not None]
    front = [e for e, c, t in pts if not any((c2 <= c and t2 <= t) and (c2 < c or t2 < t) for _, c2, t2 in pts)]
    return sorted(front, key=lambda e: e.row["iteration_time_s"])


def _cost(e: Entry) -> float | None:
    r = e.row or {}
    return r.get("cost_per_million_tokens_usd") if r.get("cost_per_million_tokens_usd") is not None \
        else r.get("cost_per_iteration_usd")


def summary_line(result: SearchResult) -> str:
    c = result.counts
    parts = [f"{c['evaluated']} evaluated ({c['executed']} executed, {c['cached']} cached)",
             f"{c['skipped']} skipped by pruning", f"{c['infeasible']} infeasible by constraints"]
    bad = ", ".join(f"{c[s]} {s}" for s in ("oom", "hang", "crash") if c[s])
    tail = f"; {bad}" if bad else ""
    stop = " — interrupted: rerun the same command to resume from the cache" if result.interrupted else ""
    return (f"search {result.search_id} ({result.options.algorithm}, objective {result.options.objective}): "
            f"{', '.join(parts)}{tail}; feasible space {c['feasible_space']:,} of {c['space']:,}; "
            f"{result.wall_s:.0f} s{stop}")


def print_report(result: SearchResult, console: Console, top: int = 15, files: dict | None = None) -> None:
    ranked = result.ranked()
    knobs = list(result.space.knobs)
    t = Table(title=f"maya search: best {min(top, len(ranked))} of {len(ranked)} by {result.options.objective}")
    for col in ("#", *knobs, "GPUs", "s/iter", "tokens/s", "MFU", "peak GiB/GPU", "$/iter", "$/Mtok", "bound by", ""):
        t.add_column(col, justify="right" if col not in knobs else "left")
    for i, e in enumerate(ranked[:top], 1):
        r = e.row
        t.add_row(str(i), *(str(v) for v in e.key), f"{r['world_size']}x{r['gpu']}", _f(r["iteration_time_s"], ".4g"),
                  _f(r.get("tokens_per_s"), ",.0f"), _f(r.get("mfu"), ".1%"),
                  _f(None if r.get("peak_memory_bytes") is None else r["peak_memory_bytes"] / GiB, ".1f"),
                  _f(r.get("cost_per_iteration_usd"), ".4g"), _f(r.get("cost_per_million_tokens_usd"), ".4g"),
                  r.get("bound_by") or "-", e.outcome)
    console.print(t)
    failed = [e for e in result.entries if e.value is None and e.outcome != "infeasible"]
    if failed:
        console.print(f"[yellow]{len(failed)} configuration(s) without a time[/yellow] (first 8):")
        for e in failed[:8]:
            tb = (e.row or {}).get("traceback_path")
            console.print(f"  {_knobs(result, e)}: {e.status} — {str(e.reason)[:160]}" + (f" [{tb}]" if tb else ""),
                          highlight=False, markup=False)
    console.print(summary_line(result), highlight=False, markup=False)
    best = result.best
    if best is not None:
        console.print(f"best: {_knobs(result, best)} — {result.options.objective} {best.value:.4g}",
                      highlight=False, markup=False, style="bold")
        console.print(best.row.get("command") or "", highlight=False, soft_wrap=True, markup=False)
        close = within_host_noise(ranked)
        if close:
            low, high = _band(best.row)
            console.print(f"the best is host-bound: its step is {low:.4g}-{high:.4g} s on this machine's host-speed "
                          f"probes, and {len(close)} more configuration(s) overlap that range "
                          f"({', '.join(_knobs(result, e) for e in close[:3])}{' ...' if len(close) > 3 else ''}): "
                          "this machine's host timing does not tell them apart", highlight=False, markup=False)
    else:
        console.print("[red]no configuration gave a time[/red]")
    for what, path in (files or {}).items():
        console.print(f"{what}: {path}", highlight=False, markup=False)


def _knobs(result: SearchResult, e: Entry) -> str:
    return " ".join(f"{k}={v}" for k, v in result.space.setting(e.key).items())


def _f(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def to_json(result: SearchResult, files: dict | None = None) -> dict:
    ranked = result.ranked()
    rank_of = {id(e): i for i, e in enumerate(ranked, 1)}
    best = result.best
    return dict(search_id=result.search_id, objective=result.options.objective, algorithm=result.options.algorithm,
                counts=result.counts, wall_s=result.wall_s, interrupted=result.interrupted,
                best=None if best is None else entry_json(result, best, 1),
                pareto=[entry_json(result, e, rank_of.get(id(e))) for e in pareto(ranked)],
                trials=[entry_json(result, e, rank_of.get(id(e))) for e in
                        sorted(result.entries, key=lambda e: (rank_of.get(id(e), 10**9), e.n))],
                files=files or {})


def write_pareto(result: SearchResult, out_dir: Path) -> dict:
    """`pareto.png` and `pareto.html` (the plot inline as SVG, and the front as a table) in `out_dir`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    ranked = result.ranked()
    front = pareto(ranked)
    per_token = any((e.row or {}).get("cost_per_million_tokens_usd") is not None for e in ranked)
    xlabel = "cost per million tokens (USD)" if per_token else "cost per iteration (USD)"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_gpu: dict[str, list[Entry]] = {}
    for e in ranked:
        if _cost(e) is not None:
            by_gpu.setdefault(e.row["gpu"], []).append(e)
    for gpu, es in sorted(by_gpu.items()):
        ax.scatter([_cost(e) for e in es], [e.row["iteration_time_s"] for e in es], s=18, alpha=0.6, label=gpu)
    if front:
        ax.plot([_cost(e) for e in front], [e.row["iteration_time_s"] for e in front], "k-", lw=1, label="Pareto front")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("iteration time (s)")
    ax.set_title(f"maya search {result.search_id}: {len(ranked)} configurations")
    ax.grid(alpha=0.3)
    if by_gpu:
        ax.legend(fontsize=8)
    fig.tight_layout()
    png = out_dir / "pareto.png"
    fig.savefig(png, dpi=120)
    svg = io.StringIO()
    fig.savefig(svg, format="svg")
    plt.close(fig)
    rows = "".join(
        f"<tr><td>{html.escape(_knobs(result, e))}</td><td>{e.row['world_size']}x{html.escape(e.row['gpu'])}</td>"
        f"<td>{e.row['iteration_time_s']:.4g}</td><td>{_cost(e):.4g}</td>"
        f"<td><code>{html.escape(e.row.get('command') or '')}</code></td></tr>" for e in front)
    page = (f"<!doctype html><meta charset='utf-8'><title>maya search {result.search_id}</title>"
            f"<h1>maya search {result.search_id}</h1><p>{html.escape(summary_line(result))}</p>{svg.getvalue()}"
            f"<h2>Pareto front</h2><table border=1 cellpadding=4><tr><th>knobs</th><th>GPUs</th><th>s/iteration</th>"
            f"<th>{html.escape(xlabel)}</th><th>command</th></tr>{rows}</table>")
    page_path = out_dir / "pareto.html"
    page_path.write_text(page)
    (out_dir / "search.json").write_text(json.dumps(to_json(result, {"png": str(png), "html": str(page_path)}),
                                                    indent=1, default=str))
    return {"png": str(png), "html": str(page_path), "json": str(out_dir / "search.json")}
