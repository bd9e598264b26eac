"""How much the same prediction moves from run to run on this machine: the spread over repeated emulations.

One host-bound program (GPT-2 small's shape at width 64: the step is the host's Python) and one
device-bound one (GPT-2 small, batch 8 x 1024, bf16: the step is the kernels'), each emulated and
simulated `runs` times on the h100 target with the roofline fallback (no predictors needed: the
spread comes from the host gaps, which the predictors do not touch). Spread = max / min - 1 of the
predicted iteration time; the target is 3%.
"""

from __future__ import annotations

from pathlib import Path

from emulator.bench.emulation import EXAMPLES
from emulator.launch.emulate import run_emulation
from emulator.pipeline import predict_from_trace

PROGRAMS = {
    "host_bound": ["--model", "gpt2-small", "--d-model", "64", "--heads", "4", "--seq-len", "64",
                   "--batch-size", "1", "--steps", "5"],
    "device_bound": ["--model", "gpt2-small", "--batch-size", "8", "--steps", "5"],
}
TARGET = 0.03


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1.0


def repeat_prediction(name: str, out_root: Path, runs: int = 5) -> dict:
    times, hosts = [], []
    for i in range(runs):
        out = out_root / f"{name}-{i}"
        summary = run_emulation(script=str(EXAMPLES / "gpt_single.py"), module=None, argv=PROGRAMS[name], gpu="h100",
                                out=out, iterations=4)
        if not summary.ok:
            raise RuntimeError(f"{name}: emulation failed: {summary.error}")
        pred = predict_from_trace(out, roofline_only=True, timeline=False)
        times.append(pred.iteration_time_s)
        hosts.append(pred.breakdown_s["host"])
    return {"iteration_times_ms": [round(t * 1e3, 3) for t in times], "host_ms": [round(h * 1e3, 3) for h in hosts],
            "spread": spread(times), "target": f"<= {TARGET:.0%}", "meets_target": spread(times) <= TARGET}


def bench_repeat_host_bound(out_root: Path) -> dict:
    return repeat_prediction("host_bound", out_root)


def bench_repeat_device_bound(out_root: Path) -> dict:
    return repeat_prediction("device_bound", out_root)


BENCHMARKS = {"repeat_host_bound": bench_repeat_host_bound, "repeat_device_bound": bench_repeat_device_bound}
