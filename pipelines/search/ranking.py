"""How well a ranking of configurations picks the measured best: top-1 regret, top-3 containment, Spearman rho;
and how far the predicted times are from the measured ones (MAPE, median signed error), which says whether a
ranking is right for the right reason.

`predicted` maps a configuration to its predicted time (None: no prediction, e.g. predicted OOM;
ranked last, never picked). Ties in the predicted order (a baseline that gives every layout the same
time) are scored by expectation: the regret of a pick among tied configurations is their mean regret,
and top-3 containment the chance a random order of the ties puts the measured best in the first three.
"""

from __future__ import annotations

import math
import statistics

import pandas as pd


def relative_errors(predicted: dict, measured: dict[tuple, float]) -> list[float]:
    """predicted / measured - 1 for every configuration with a prediction (positive: predicted too long)."""
    out = []
    for k, m in measured.items():
        p = predicted.get(k)
        if p is not None and math.isfinite(p) and m > 0:
            out.append(p / m - 1)
    return out


def error_summary(errors: list[float]) -> dict:
    return dict(mape=statistics.fmean(abs(e) for e in errors) if errors else None,
                signed=statistics.median(errors) if errors else None)


def scores(predicted: dict, measured: dict[tuple, float]) -> dict:
    keys = [k for k in measured]
    best_k = min(keys, key=lambda k: measured[k])
    best = measured[best_k]
    pred = {k: predicted.get(k) for k in keys}
    known = {k: v for k, v in pred.items() if v is not None and math.isfinite(v)}
    out = dict(n=len(keys), predicted=len(known), regret=None, top3=None, rho=None,
               **error_summary(relative_errors(pred, measured)))
    if not known:
        return out
    lo = min(known.values())
    tied = [k for k, v in known.items() if v <= lo * (1 + 1e-9)]
    out["regret"] = sum(measured[k] / best - 1 for k in tied) / len(tied)
    order = sorted(known.values())
    third = order[min(2, len(order) - 1)]
    ahead = [k for k, v in known.items() if v < third * (1 - 1e-9)]
    at = [k for k, v in known.items() if abs(v - third) <= third * 1e-9]
    if best_k in ahead:
        out["top3"] = 1.0
    elif best_k in at:
        out["top3"] = min(1.0, (3 - len(ahead)) / len(at))
    else:
        out["top3"] = 0.0
    if len(keys) >= 3:
        p = pd.Series([pred[k] if pred[k] is not None else math.inf for k in keys], dtype=float)
        m = pd.Series([measured[k] for k in keys], dtype=float)
        rho = p.rank().corr(m.rank())  # Spearman: Pearson of average ranks (ties share a rank)
        out["rho"] = None if rho != rho else float(rho)
    return out
