"""How much the same prediction moves from run to run on this machine: the spread over repeated emulations.

One host-bound program (GPT-2 small's shape at width 64: the step is the host's Python), one
device-bound one (GPT-2 small, batch 8 x 1024, bf16: the step is the kernels'), and a host-bound
multi-rank one (the Megatron-style validation program of vtrain-single-0461 on 4 ranks with TP 2:
two full ranks and two probes share this machine's cores, as most predictions do), each emulated
and simulated `runs` times with the roofline fallback (no predictors needed: the spread comes from
the host gaps, which the predictors do not touch). Spread = max / min - 1 of the predicted
iteration time; the target is 3%. `cpu_s_spread` is the spread of the steady iterations' whole
process CPU time (program and emulator, the same work every run): how much the machine itself
moved under the same work. `moved_most` names the call sites (op and phase) whose host time
differs most between the fastest and the slowest run, and `their_share` how much of that
difference they carry: whether the machine slowed every gap alike or a few large ones.
`bands_ms` is each run's host-speed range (`iteration_time_band_s`, host-bound steps only) and
`bands_hold_median` how many of them contain the runs' median: whether the range a single
prediction prints is as wide as the run-to-run spread it stands for.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from emulator.bench.emulation import EXAMPLES
from emulator.hosttime.clip import same_position_medians
from emulator.launch.emulate import run_emulation
from emulator.pipeline import predict_from_trace
from emulator.trace.io import read_rank_summary, read_rank_trace


@dataclass(frozen=True)
class Program:
    script: str
    argv: list[str]
    gpu: str = "h100"
    nproc: int = 1


PROGRAMS = {
    "host_bound": Program("gpt_single.py", ["--model", "gpt2-small", "--d-model", "64", "--heads", "4",
                                            "--seq-len", "64", "--batch-size", "1", "--steps", "5"]),
    "device_bound": Program("gpt_single.py", ["--model", "gpt2-small", "--batch-size", "8", "--steps", "5"]),
    "host_bound_tp": Program("validation/megatron_gpt.py",
                             "--layers 12 --hidden 2048 --heads 16 --seq 1024 --vocab 50257 --pad-vocab-to 128 "
                             "--tp 2 --pp 1 --micro-batch 1 --global-batch 4 --dtype fp16 --attention eager "
                             "--checkpoint --half-params --steps 5".split(), gpu="a100-80gb", nproc=4),
}
TARGET = 0.03


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1.0


def repeat_prediction(name: str, out_root: Path, runs: int = 5) -> dict:
    prog = PROGRAMS[name]
    times, hosts, cpu, sites, bands = [], [], [], [], []
    for i in range(runs):
        out = out_root / f"{name}-{i}"
        summary = run_emulation(script=str(EXAMPLES / prog.script), module=None, argv=prog.argv, gpu=prog.gpu,
                                nproc_per_node=prog.nproc, out=out, iterations=4)
        if not summary.ok:
            raise RuntimeError(f"{name}: emulation failed: {summary.error}")
        pred = predict_from_trace(out, roofline_only=True, timeline=False)
        times.append(pred.iteration_time_s)
        bands.append(pred.iteration_time_band_s)
        hosts.append(pred.breakdown_s["host"])
        rank = min(summary.rank_map.values())
        cpu.append(steady_cpu_s(out, rank))
        sites.append(host_by_site(read_rank_trace(out, rank).to_pydict()))
    moved = spread(times)
    slow, fast = sites[times.index(max(times))], sites[times.index(min(times))]
    named, share = moved_most(fast, slow)
    return {"iteration_times_ms": [round(t * 1e3, 3) for t in times], "host_ms": [round(h * 1e3, 3) for h in hosts],
            "cpu_s_spread": spread(cpu) if all(cpu) else None, "moved_most": named, "their_share": share,
            "spread": moved, "target": f"<= {TARGET:.0%}", "meets_target": moved <= TARGET, **band_cover(times, bands)}


def band_cover(times: list[float], bands: list[list[float] | None]) -> dict:
    """Each run's host-speed range in ms and how many contain the median of the runs' times (none when no
    run was host-bound)."""
    if not any(bands):
        return {}
    mid = statistics.median(times)
    held = sum(1 for b in bands if b and b[0] <= mid <= b[1])
    return {"bands_ms": [[round(x * 1e3, 3) for x in b] if b else None for b in bands],
            "bands_hold_median": f"{held} of {len(bands)}"}


def steady_cpu_s(out: Path, rank: int) -> float | None:
    """Median process CPU time of the rank's iterations after the first (its summary's iteration_cpu_s)."""
    cpu = read_rank_summary(out, rank).iteration_cpu_s[1:]
    return statistics.median(cpu) if cpu else None


def host_by_site(trace: dict) -> dict[tuple[str, str], float]:
    """This machine's host seconds per steady iteration at each call site (op, phase), before any scaling:
    each position's median over the iterations that repeat the same op sequence, as a prediction reads it."""
    its, ops = trace["iteration"], trace["op"]
    gaps = same_position_medians(its, ops, trace["host_gap_s"])
    steady = {it for it in its if it >= 1}
    out: dict[tuple[str, str], float] = {}
    for it, op, phase, gap in zip(its, ops, trace["phase"], gaps, strict=True):
        if it in steady:
            out[(op, phase)] = out.get((op, phase), 0.0) + gap / len(steady)
    return out


def moved_most(fast: dict, slow: dict, top: int = 5) -> tuple[list[str], float | None]:
    """The `top` call sites whose host time moved most from `fast` to `slow` (largest absolute change), and
    the share of the whole change they carry (None when nothing moved)."""
    change = {site: slow.get(site, 0.0) - fast.get(site, 0.0) for site in {*fast, *slow}}
    total = sum(change.values())
    ranked = sorted(change.items(), key=lambda kv: abs(kv[1]), reverse=True)[:top]
    named = [f"{op} ({phase}) {d * 1e6:+,.0f} us" for (op, phase), d in ranked]
    return named, (sum(d for _, d in ranked) / total if total else None)


# one benchmark per program: `python -m emulator.bench --only repeat_<program>`
BENCHMARKS = {f"repeat_{name}": partial(repeat_prediction, name) for name in PROGRAMS}
