"""The analytical predictors: the roofline for kernels, the network model for collectives across nodes.

Both are `emulator.core.roofline`, the one labelled fallback; every row they time is `fallback`.
"""

from __future__ import annotations

import pandas as pd

from emulator.core.hardware import GPUSpec
from emulator.core.predictor_io import FALLBACK
from emulator.core.roofline import roofline_durations
from emulator.estimate.base import Predictor

ROOFLINE_LABEL = "roofline (analytical fallback)"
NETWORK_LABEL = "network model from the cluster description (analytical)"


class RooflinePredictor(Predictor):
    def __init__(self, spec: GPUSpec, label: str = ROOFLINE_LABEL):
        self.spec, self.label = spec, label

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"duration_s": roofline_durations(df, self.spec), "source": FALLBACK})

    @property
    def is_analytical(self) -> bool:
        return True

    def conditions(self) -> dict:
        return {"assumption": "analytical: fixed achievable fractions of the datasheet peaks (emulator.core.roofline)"}


class NetworkPredictor(RooflinePredictor):
    """Collectives and p2p whose group leaves the node: a measurement of a cross-node collective describes
    the network it was taken on, so these are timed from the cluster description's NICs and latencies."""

    def __init__(self, spec: GPUSpec):
        super().__init__(spec, NETWORK_LABEL)
