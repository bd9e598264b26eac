"""Host time: what the simulated host spends before each device call, decided once, here.

The trace holds each row's host gap as this machine's process CPU time, with the emulator's own
cost already priced out by the recorder (`emulator.capture`). Before anything is simulated this
stage turns those into the target's host time, for every emulated rank's trace:
1. clip preemption spikes (`clip.clip_spikes`);
2. scale by the host-speed ratio of the target's nodes to this machine (`scale.host_gap_scale`),
   or by the cluster file's `host_gap_scale`. Each rank times the host-speed workload before the
   program and between its iterations, and its gaps are read against the median of those probes
   (`scale.rank_scale`): the speed of a shared machine drifts within a run;
3. take each repeated iteration's gap at a position as the median over the iterations that repeat the
   same op sequence (`clip.same_position_medians`).
The result is `RepTrace.host_gap`, which the simulator and the analysis spend as it is.

`probe_bands` gives each rank's factors from its median probe to its slowest and fastest one
(`scale.probe_band`): the range a host-bound step carries from this machine's speed
(`emulator.pipeline.host_speed_band`). A factor multiplies the gaps set here as they are: spike
clipping does not depend on the scale, and a same-position median scales with it.
"""

from __future__ import annotations

from emulator.collate.job import CollatedJob
from emulator.hosttime.clip import clip_spikes, same_position_medians
from emulator.hosttime.scale import host_gap_scale, probe_band, rank_scale


def apply_host_time(job: CollatedJob, gpu_key: str, explicit_scale: float | None = None) -> dict:
    """Set every trace's `host_gap` for the target; returns how it was scaled (prediction.json `host_speed`)."""
    host = host_gap_scale(job.summary.host_speed, gpu_key, explicit_scale)
    for rep in job.reps.values():
        clipped = clip_spikes(rep.op, rep.phase, rep.module, rep.host_gap_raw)
        scale = rank_scale(host, _probes(job, rep.rank))
        rep.host_gap = same_position_medians(rep.iteration, rep.op, [g * scale for g in clipped])
    if host.get("target_s_per_op") and job.summary.host_speed_by_rank:
        host["probes"] = "median of each rank's host-speed probes (before the program and after each iteration)"
    return host


def probe_bands(job: CollatedJob) -> dict[int, tuple[float, float]]:
    """Each emulated rank's (low, high) factor on the gaps `apply_host_time` set (`scale.probe_band`)."""
    return {rep.rank: probe_band(_probes(job, rep.rank)) for rep in job.reps.values()}


def _probes(job: CollatedJob, rank: int) -> list[float]:
    return job.summary.host_speed_by_rank.get(str(rank)) or []


__all__ = ["apply_host_time", "clip_spikes", "host_gap_scale", "probe_band", "probe_bands",
           "same_position_medians"]
