"""Simulate: a discrete-event run of every rank on the cluster, and what it means per iteration.

    engine.py    hosts, streams, collectives and p2p; hangs the simulation finds
    events.py    the events and their handlers, ordered by (time, kind, id)
    streams.py   stream items and the keys that match collectives and messages
    classes.py   classes of provably identical ranks, simulated once
    cluster.py   the cluster: GPUs per node, links, price; the cluster file
    analysis.py  iteration times, steady state, the breakdown
"""

from emulator.simulate.engine import SimResult, Simulator, simulate

__all__ = ["SimResult", "Simulator", "simulate"]
