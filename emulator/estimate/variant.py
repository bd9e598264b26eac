"""A GPU variant timed by its base part's predictors, brought to the variant's clock, DRAM and links.

The predictors of a known part learned its kernels at its clock and bandwidths; a variant (a
`[gpu]` table, `emulator.core.variants`) differs in some of them. Each row's time from the base
part's predictor is multiplied by how much the roofline of the row changes between the two parts:
compute-bound time follows the SM clock, memory-bound time the DRAM bandwidth, collectives the
link bandwidth. This is analytical: every second it adds or removes is `adjustment_s`, which the
report counts in `estimator.adjusted_share`, and `estimator.conditions.variant` says what it assumed.

The SM clock: a measured `sustained_clock_mhz` is compared with the base part's sustained clock
(its boost clock over the sustained-throughput ratio the kernel predictor carries, MAMF); a
`power_limit_w` alone assumes dynamic power goes as the clock cubed (voltage tracks the clock on
the DVFS curve), so the clock falls as (limit / board power) ** (1/3).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from emulator.core.hardware import GPUSpec, get_gpu
from emulator.core.roofline import roofline_durations
from emulator.core.variants import describe_variant
from emulator.estimate.base import Predictor

POWER_LAW_EXPONENT = 1.0 / 3.0  # clock ~ power ** (1/3): P_dynamic ~ C V^2 f with V ~ f


def clock_factor(spec: GPUSpec, base: GPUSpec, sustained_ratio: float) -> tuple[float, str]:
    """(how much longer compute-bound kernels take on `spec` than on `base` at its sustained clock, why)."""
    base_sustained = base.clock_mhz / max(sustained_ratio, 1.0)
    if spec.sustained_clock_mhz:
        return (base_sustained / spec.sustained_clock_mhz,
                f"compute-bound kernels at the given sustained clock {spec.sustained_clock_mhz} MHz against "
                f"{base.key}'s {base_sustained:.0f} MHz")
    if spec.power_limit_w and spec.power_limit_w < base.tdp_w:
        f = (base.tdp_w / spec.power_limit_w) ** POWER_LAW_EXPONENT
        return (f, f"power limit {spec.power_limit_w} W of {base.tdp_w} W: SM clock assumed to fall as "
                   f"power^(1/3), compute-bound kernels x{f:.3f} (give sustained_clock_mhz to replace this)")
    return 1.0, f"SM clock as {base.key}'s"


class VariantPredictor(Predictor):
    """Wraps a predictor of the base part and times rows on the variant `spec`."""

    def __init__(self, inner: Predictor, spec: GPUSpec):
        self.inner, self.spec = inner, spec
        self.base = get_gpu(spec.model_key)
        ratio = _sustained_ratio(inner.conditions())
        self.compute_factor, self.clock_note = clock_factor(spec, self.base, ratio)
        # the base part as the variant runs it: its peaks at the variant's clock, the variant's DRAM and links
        self.effective = replace(spec, peak_flops={k: v / self.compute_factor for k, v in self.base.peak_flops.items()})
        self.label = f"{inner.label}, brought to {spec.name} (variant adjustment, analytical)"

    @property
    def is_analytical(self) -> bool:
        return self.inner.is_analytical

    def factors(self, df: pd.DataFrame) -> np.ndarray:
        """Variant time / base time of each row, from the two rooflines."""
        mine, theirs = roofline_durations(df, self.effective), roofline_durations(df, self.base)
        return np.where(theirs > 0, mine / np.where(theirs > 0, theirs, 1.0), 1.0)

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        out = self.inner.predict(df).reset_index(drop=True)
        d = out["duration_s"].to_numpy(dtype=float)
        adjusted = out["adjustment_s"].to_numpy(dtype=float) if "adjustment_s" in out.columns else np.zeros(len(d))
        f = self.factors(df.reset_index(drop=True)) if len(df) else np.ones(0)
        return pd.DataFrame({"duration_s": d * f, "source": out["source"].to_numpy(),
                             "adjustment_s": adjusted * f + d * (f - 1.0)})

    def conditions(self) -> dict:
        out = dict(self.inner.conditions())
        out["variant"] = {**(describe_variant(self.spec) or {}), "compute_factor": round(self.compute_factor, 4),
                          "memory_factor": round(self.base.hbm_bandwidth / self.spec.hbm_bandwidth, 4),
                          "assumption": self.clock_note + "; memory-bound kernels scale with DRAM bandwidth, "
                                                          "collectives inside a node with NVLink bandwidth"}
        return out


def _sustained_ratio(conditions: dict) -> float:
    table = conditions.get("sustained") or {}
    hit = table.get("bfloat16") or next(iter(table.values()), None)
    return float(hit["ratio"]) if hit else 1.0
