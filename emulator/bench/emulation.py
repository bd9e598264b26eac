"""`make bench`: how fast maya is, measured on this machine (one function per benchmark).

Emulation figures (the targets are for a 2-core machine):
- `gpt2_small`: GPT-2 small (124M), batch 8 x 1024, one emulated H100: recorded device ops per
  second and seconds per emulated iteration (target >= 5,000 ops/s);
- `llama3_8b_fsdp2`: Llama-3-8B (seq 8192, batch 1, activation checkpointing, as torchtitan runs it;
  without checkpointing it does not fit in 80 GB) with FSDP2 on 8 emulated H100s (dedup on): seconds
  per emulated iteration (target <= 60 s) and the whole emulation's wall time;
- `three_d_64`: a 64-rank dp 8 x pp 4 x tp 2 job (examples/pipeline.py with --tp): the whole
  emulation through rank deduplication (target <= 120 s).

Per-iteration times come from the example scripts' own step lines ("step N: ... X ms"), i.e. the
program's wall time per step while emulated: the mean of the steps after the first (which
runs every fake kernel once); GPT-2 small runs six steps, so five are averaged. Every benchmark runs
the real CLI code path (`run_emulation`), writes under `--out`, and the figures are also saved to
`OUT/bench.json`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.compute as pc

from emulator.launch.emulate import run_emulation
from emulator.trace.io import read_rank_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_STEP = re.compile(r"^step (\d+): .*?(\d+) ms", re.M)


def _step_seconds(out: Path, rank: int = 0) -> dict[int, float]:
    """{step: seconds} from the example's log lines of `rank`."""
    log = out / "logs" / f"rank={rank}.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return {int(m.group(1)): int(m.group(2)) / 1000 for m in _STEP.finditer(text)}


def _steady(steps: dict[int, float]) -> float | None:
    later = [s for k, s in steps.items() if k >= 2]
    return sum(later) / len(later) if later else None


def _emulate(name: str, out_root: Path, script: str, argv: list[str], nproc: int = 1, nnodes: int = 1) -> dict:
    out = out_root / name
    t0 = time.perf_counter()
    summary = run_emulation(script=str(EXAMPLES / script), module=None, argv=argv, gpu="h100", nproc_per_node=nproc,
                            nnodes=nnodes, out=out, dedup=True)
    wall = time.perf_counter() - t0
    if not summary.ok:
        raise RuntimeError(f"{name}: emulation failed: {summary.error or summary.oom_message}")
    return {"out": out, "summary": summary, "wall_s": wall}


def bench_gpt2_small(out_root: Path) -> dict:
    run = _emulate("gpt2_small", out_root, "gpt_single.py",
                   ["--model", "gpt2-small", "--batch-size", "8", "--steps", "6"])
    per_iter = _steady(_step_seconds(run["out"]))
    trace = read_rank_trace(run["out"], 0)
    ops = pc.sum(pc.equal(trace.column("iteration"), 1)).as_py()  # a steady iteration's recorded events
    return {"ops_per_iteration": ops, "s_per_iteration": per_iter,
            "ops_per_s": ops / per_iter if per_iter else None, "emulation_wall_s": run["wall_s"],
            "target": ">= 5,000 ops/s", "meets_target": bool(per_iter and ops / per_iter >= 5000)}


def bench_llama3_8b_fsdp2(out_root: Path) -> dict:
    run = _emulate("llama3_8b_fsdp2", out_root, "fsdp2.py",
                   ["--model", "llama3-8b", "--batch-size", "1", "--ac", "--steps", "2"], nproc=8)
    s = run["summary"]
    per_iter = _steady(_step_seconds(run["out"]))
    return {"s_per_iteration": per_iter, "ranks_emulated": len(s.ranks_emulated), "world_size": s.world_size,
            "peak_reserved_gib": max(int(v) for v in s.peak_reserved_bytes.values()) / 2**30,
            "emulation_wall_s": run["wall_s"], "target": "<= 60 s per iteration",
            "meets_target": bool(per_iter is not None and per_iter <= 60)}


def bench_three_d_64(out_root: Path) -> dict:
    run = _emulate("three_d_64", out_root, "pipeline.py",
                   ["--pp", "4", "--tp", "2", "--layers", "4", "--batch-size", "4", "--steps", "2"], nproc=8, nnodes=8)
    s = run["summary"]
    return {"world_size": s.world_size, "ranks_emulated": len(s.ranks_emulated),
            "emulation_wall_s": run["wall_s"], "target": "<= 120 s in total",
            "meets_target": run["wall_s"] <= 120}


BENCHMARKS: dict[str, Callable[[Path], dict]] = {
    "gpt2_small": bench_gpt2_small,
    "llama3_8b_fsdp2": bench_llama3_8b_fsdp2,
    "three_d_64": bench_three_d_64,
}
