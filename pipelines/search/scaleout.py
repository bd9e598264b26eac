"""The paper's scale-out experiment: a GPT-3 175B-style program at TP8 x PP8 with 64 micro-batches per
pipeline, data parallel from 16 to 192 (1,024 to 12,288 H100s), each point one `maya predict`.

    python -m pipelines.search.scaleout --dp 16 32 64 128 192        # one point after another, cached

Each point runs exactly what a user runs (`maya predict`: rank deduplication emulates one pipeline
side by side plus rank 0 and the probes, which read the pipeline's objects as stand-ins; the engine
simulates one rank per class; collectives across nodes take the network model), and its wall time,
iteration time and MFU land in `<warehouse>/search/scaleout/scaleout.json`. A point whose
prediction.json exists is not run again. `--layers/--micro-batches` shrink the job for a smoke run.

What a point costs: emulation grows with the distinct stages' work (11 ranks of about 120,000 rows
each at every DP); collating, the hang check, collective estimation and the class check visit each
rank's distinct groups and peers (`emulator.collate.views`), not its rows, so the simulation side grows
with world size x a handful of slots.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from emulator.core.settings import warehouse_root
from pipelines.search.groups import PROGRAM
from pipelines.validation.holdout import REPO_ROOT

GPT3 = dict(layers=96, hidden=12288, heads=96, seq=2048, vocab=50257)


def point_args(dp: int, layers: int, micro_batches: int) -> list[str]:
    m = dict(GPT3, layers=layers)
    return ["--layers", str(m["layers"]), "--hidden", str(m["hidden"]), "--heads", str(m["heads"]), "--seq",
            str(m["seq"]), "--vocab", str(m["vocab"]), "--pad-vocab-to", "1024", "--tp", "8", "--pp", "8",
            "--micro-batch", "1", "--global-batch", str(micro_batches * dp), "--dtype", "bf16", "--half-params",
            "--attention", "sdpa", "--checkpoint", "--steps", "3"]


def run_point(dp: int, out_root: Path, layers: int = 96, micro_batches: int = 64, gpu: str = "h100") -> dict:
    out = out_root / f"dp{dp}-L{layers}-mb{micro_batches}"
    pred = out / "prediction.json"
    if not pred.exists():
        world = 64 * dp
        cmd = [sys.executable, "-m", "emulator.cli", "predict", "--gpu", gpu, "--nproc-per-node", "8", "--nnodes",
               str(world // 8), "--iterations", "2", "--no-timeline", "--out", str(out), str(PROGRAM),
               *point_args(dp, layers, micro_batches)]
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(out_root / f"dp{dp}-L{layers}-mb{micro_batches}.log", "w") as log:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        (out / "wall.json").write_text(json.dumps({"wall_s": time.perf_counter() - t0, "rc": rc}))
    p = json.loads(pred.read_text()) if pred.exists() else {}
    wall = json.loads((out / "wall.json").read_text()) if (out / "wall.json").exists() else {}
    return dict(dp=dp, gpus=64 * dp, layers=layers, micro_batches=micro_batches, wall_s=wall.get("wall_s"),
                rc=wall.get("rc"), iteration_time_s=p.get("iteration_time_s"), mfu=p.get("mfu"),
                tokens_per_s=p.get("tokens_per_s"), emulation_wall_s=p.get("emulation_wall_s"),
                simulation_wall_s=p.get("simulation_wall_s"), oom=p.get("oom"),
                breakdown_s=p.get("breakdown_s"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.search.scaleout", description=__doc__)
    ap.add_argument("--dp", type=int, nargs="+", default=[16, 32, 64, 128, 192])
    ap.add_argument("--layers", type=int, default=96)
    ap.add_argument("--micro-batches", type=int, default=64)
    a = ap.parse_args(argv)
    root = warehouse_root() / "search" / "scaleout"
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for dp in a.dp:
        rows.append(run_point(dp, root, a.layers, a.micro_batches))
        r = rows[-1]
        print(f"DP{dp:>4} ({r['gpus']:>6} GPUs): iteration {r['iteration_time_s']} s, MFU {r['mfu']}, "
              f"wall {r['wall_s']:.0f} s (emulation {r['emulation_wall_s']}, simulation {r['simulation_wall_s']})",
              flush=True)
        (root / "scaleout.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
