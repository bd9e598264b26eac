"""What every predictor is: something that times a frame of trace rows, and says where each time came from."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import pandas as pd

from emulator.core.hardware import GPUSpec


class NoPredictorError(RuntimeError):
    """No registered predictor for the target GPU; the message says how to get one."""


class Predictor(ABC):
    """Times trace rows on one GPU (`emulator.core.predictor_io` is the frame's contract)."""

    label: str  # how reports name it
    spec: GPUSpec

    @abstractmethod
    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """One `duration_s` (> 0) and `source` per row of `df`, in order."""

    @property
    def is_analytical(self) -> bool:
        return False

    def conditions(self) -> dict:
        """How predictions are brought to a training step's conditions (prediction.json `estimator.conditions`)."""
        return {}


def predict_unique(pred: Predictor, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predict each distinct row once (traces repeat the same shapes thousands of times); durations, sources
    and the seconds an analytical training-condition adjustment added (`adjustment_s`, 0 where none),
    aligned with `df`."""
    if df.empty:
        return np.zeros(0), np.array([], dtype=object), np.zeros(0)
    # distinct rows numbered in order of first appearance (pandas hashes the columns in C)
    codes = df.groupby(list(df.columns), sort=False, dropna=False).ngroup().to_numpy()
    _, first = np.unique(codes, return_index=True)
    out = pred.predict(df.iloc[first].reset_index(drop=True))
    adjusted = out["adjustment_s"].to_numpy(dtype=float) if "adjustment_s" in out.columns else np.zeros(len(out))
    return (out["duration_s"].to_numpy(dtype=float)[codes], out["source"].to_numpy(dtype=object)[codes],
            adjusted[codes])
