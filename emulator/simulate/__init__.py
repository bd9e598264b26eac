"""Discrete-event simulation of a collated job on a cluster (engine, events, topology, analysis)."""

from emulator.simulate.engine import SimResult, Simulator, simulate

__all__ = ["SimResult", "Simulator", "simulate"]
