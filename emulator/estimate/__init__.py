"""Estimate: a duration for every trace row, from predictors chosen by name.

    base.py       the Predictor interface (a frame of trace rows in, duration and source out)
    registry.py   learned predictors from the MLflow registry (cached for offline use)
    roofline.py   the labelled analytical fallback: roofline for kernels, network model across nodes
    variant.py    a GPU variant timed by its base part's predictors, brought to its clock and bandwidths
    durations.py  `estimate(job, ...)`: durations for every row of every rank, time by source

Predictor sources by name: `registry` (the default: the learned champions of the target GPU)
and `roofline` (`--roofline-only`: every row from the analytical fallback).
"""

from __future__ import annotations

from emulator.core.hardware import GPUSpec, get_gpu
from emulator.estimate.base import NoPredictorError, Predictor
from emulator.estimate.durations import Estimates, estimate
from emulator.estimate.registry import registry_predictors
from emulator.estimate.roofline import NetworkPredictor, RooflinePredictor
from emulator.estimate.variant import VariantPredictor

PREDICTOR_SOURCES = ("registry", "roofline")


def load_predictors(spec: GPUSpec, source: str = "registry") -> tuple[Predictor, Predictor]:
    """(kernel predictor, collective predictor) for `spec` from `source` (one of PREDICTOR_SOURCES).
    A variant (`spec.base`) gets its base part's predictors, each wrapped in a VariantPredictor."""
    if spec.base is not None:
        kernels, collectives = load_predictors(get_gpu(spec.base), source)
        return VariantPredictor(kernels, spec), VariantPredictor(collectives, spec)
    if source == "roofline":
        return RooflinePredictor(spec), RooflinePredictor(spec)
    if source == "registry":
        return registry_predictors(spec)
    raise ValueError(f"unknown predictor source {source!r}; one of {PREDICTOR_SOURCES}")


__all__ = ["Estimates", "NetworkPredictor", "NoPredictorError", "PREDICTOR_SOURCES", "Predictor",
           "RooflinePredictor", "VariantPredictor", "estimate", "load_predictors"]
