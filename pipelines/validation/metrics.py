"""Error measures of the validation report, in one place so every table computes them alike.

Signed relative error `(predicted - measured) / measured` per row (positive = maya is slow);
MAPE = mean of |error|, and the median |error| (the CPU target) which one bad row cannot
dominate. Rows without a prediction (failed emulation, OOM) are counted, never silently
dropped: `summarize` reports how many rows were scored out of how many.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def rel_error(predicted: float | None, measured: float) -> float | None:
    """Signed relative error, or None when there is no usable prediction."""
    if measured is None or not measured > 0:
        raise ValueError(f"measured time must be positive, got {measured!r}")
    if predicted is None or not math.isfinite(predicted) or predicted <= 0:
        return None
    return (predicted - measured) / measured


def summarize(errors: Iterable[float | None]) -> dict:
    """{'n', 'scored', 'mape', 'median_abs', 'max_abs', 'bias'} over the rows' signed errors.

    Unscored rows (None) count in `n` but not in the statistics; all statistics are None
    when nothing was scored.
    """
    errs = list(errors)
    scored = [abs(e) for e in errs if e is not None]
    signed = [e for e in errs if e is not None]
    if not scored:
        return {"n": len(errs), "scored": 0, "mape": None, "median_abs": None, "max_abs": None, "bias": None}
    return {"n": len(errs), "scored": len(scored), "mape": sum(scored) / len(scored),
            "median_abs": statistics.median(scored), "max_abs": max(scored),
            "bias": statistics.median(signed)}


def meets(summary: dict, key: str, target: float) -> bool | None:
    """True/False against `target` (e.g. 0.10); None when nothing was scored."""
    value = summary.get(key)
    return None if value is None else value <= target


def pct(x: float | None, signed: bool = False) -> str:
    """Percentage for tables: '+4.2%' / '4.2%', or '-' when missing."""
    if x is None:
        return "-"
    return f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%"
