"""Host time: what the simulated host spends before each device call, decided once, here.

The trace holds each row's host gap as this machine's process CPU time, with the emulator's own
cost already priced out by the recorder (`emulator.capture`). Before anything is simulated this
stage turns those into the target's host time, for every emulated rank's trace:
1. clip preemption spikes (`clip.clip_spikes`);
2. scale by the host-speed ratio of the target's nodes to this machine (`scale.host_gap_scale`),
   or by the cluster file's `host_gap_scale`.
The result is `RepTrace.host_gap`, which the simulator and the analysis spend as it is.
"""

from __future__ import annotations

from emulator.collate.job import CollatedJob
from emulator.hosttime.clip import clip_spikes
from emulator.hosttime.scale import host_gap_scale


def apply_host_time(job: CollatedJob, gpu_key: str, explicit_scale: float | None = None) -> dict:
    """Set every trace's `host_gap` for the target; returns how it was scaled (prediction.json `host_speed`)."""
    host = host_gap_scale(job.summary.host_speed, gpu_key, explicit_scale)
    scale = host["scale"]
    for rep in job.reps.values():
        rep.host_gap = [g * scale for g in clip_spikes(rep.op, rep.phase, rep.module, rep.host_gap_raw)]
    return host


__all__ = ["apply_host_time", "clip_spikes", "host_gap_scale"]
