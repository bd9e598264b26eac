"""Error metrics and the held-out split shared by training, publishing and evaluation.

The split is by *shape group* (e.g. a GEMM's (n, k, dtype): one weight matrix over every token
count), decided by a hash of the group, so it is the same for every run, every model version and
every machine. That makes the evaluation rows a fixed set that no version ever trained on, which is
what the champion gate compares versions on.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from emulator.core.ops import as_list, attention_dims, gemm_dims

EVAL_BUCKETS = 5  # one shape group in five is held out


def shape_group(family: str, op: str, shapes, dtypes, extra: str = "") -> str:
    """The group a row's shape belongs to; rows of one group are all train or all eval."""
    shapes, dtypes = as_list(shapes), as_list(dtypes)
    dt = str(dtypes[0]) if dtypes else ""
    if family == "gemm":
        g = gemm_dims(op, shapes)
        if g:
            return f"gemm|{dt}|{g[2]}|{g[3]}"
    if family in ("attention_fwd", "attention_bwd"):
        a = attention_dims(op, shapes)
        if a:
            return f"{family}|{dt}|{a[1]}|{a[2]}|{a[5]}"
    if family in ("collective", "p2p"):
        return f"{family}|{extra}"
    inner = shapes[0][-1] if shapes and shapes[0] else 0
    return f"{family}|{op}|{dt}|{inner}"


def is_eval_group(group: str) -> bool:
    return zlib.crc32(group.encode()) % EVAL_BUCKETS == 0


def eval_mask(df: pd.DataFrame, families: pd.Series | None = None) -> np.ndarray:
    """True for rows in held-out shape groups (collectives: held-out message sizes).

    For the small families (elementwise, norms, ...) a group is (op, dtype, inner dim), and an op
    measured in fewer than three groups is never held out: holding out its only group would test
    an op the model never saw, not an unseen shape.
    """
    fam = families if families is not None else df["family"]
    groups = []
    for i, (f, op, sh, dt) in enumerate(zip(fam, df["op"], df["shapes"], df["dtypes"], strict=True)):
        if f in ("collective", "p2p"):
            # held-out message sizes (each collective at that size, over every group size)
            cb = float(df["coll_bytes"].iloc[i] or 0)
            extra = f"{op}|{int(round(np.log2(cb + 1) * 2))}"
        else:
            extra = ""
        groups.append(shape_group(f, op, sh, dt, extra))
    units: dict[str, set] = {}
    for g in groups:
        units.setdefault(g.rsplit("|", 1)[0], set()).add(g)
    # a unit whose groups all hash to "train" still holds out one group (the lowest hash)
    forced = {u: min(gs, key=lambda g: zlib.crc32(g.encode())) for u, gs in units.items()
              if len(gs) >= 3 and not any(is_eval_group(g) for g in gs)}
    out = np.zeros(len(groups), dtype=bool)
    for i, (f, g) in enumerate(zip(fam, groups, strict=True)):
        if f in ("gemm", "attention_fwd", "attention_bwd", "collective", "p2p"):
            out[i] = is_eval_group(g)
            continue
        unit = g.rsplit("|", 1)[0]
        if len(units[unit]) >= 3:
            out[i] = is_eval_group(g) or forced.get(unit) == g
    return out


def ape(pred, true) -> np.ndarray:
    pred, true = np.asarray(pred, dtype=float), np.asarray(true, dtype=float)
    return np.abs(pred - true) / true * 100.0


def error_stats(pred, true) -> dict:
    """median APE, p90 APE and MAPE (percent) of predictions against measurements."""
    e = ape(pred, true)
    if len(e) == 0:
        return {"n": 0, "median_ape": float("nan"), "p90_ape": float("nan"), "mape": float("nan")}
    return {"n": int(len(e)), "median_ape": float(np.median(e)), "p90_ape": float(np.percentile(e, 90)),
            "mape": float(np.mean(e))}


def scatter_png(pred, true, title: str, path) -> None:
    """Predicted-vs-measured log-log scatter (logged to MLflow)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.5), dpi=90)
    t, p = np.asarray(true) * 1e6, np.asarray(pred) * 1e6
    ax.loglog(t, p, ".", ms=2, alpha=0.4)
    lo, hi = float(min(t.min(), p.min())), float(max(t.max(), p.max()))
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set_xlabel("measured (us)")
    ax.set_ylabel("predicted (us)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
