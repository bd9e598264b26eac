"""The labelled fallback for Inductor's generated kernels against real H100 times (evaluation only).

No learned predictor covers the kernels `torch.compile` generates (family `generated` of `emulator.core.ops`):
the roofline times them at fixed fractions of the datasheet peaks (`emulator.core.roofline.FAMILY_EFFICIENCY`).
KernelBench (ScalingIntelligence/KernelBench, MIT) published the wall time of each of its level-1 problems
compiled with Inductor's default mode on an H100 80GB HBM3 (`results/timing/H100_modal/
baseline_time_torch_compile_inductor_default.json`: PyTorch 2.5.0, CUDA 12.4, 3 warm-up calls, mean of 100;
each entry names the GPU it ran on, and a few ran on an H200). Many problems compile to one generated kernel at
multi-GB sizes (ReLU on [4096, 393216] fp32), so the call's time is that kernel's. This check emulates each
problem compiled (`examples/validation/kernelbench_problem.py`), keeps the problems whose compiled call runs
generated kernels only, and compares with the measured call both the fallback's time of those kernels and
maya's (the registered kernel predictor, which times some of them by a learned family: `timing_family`).

    python -m pipelines.validation.generated_kernels --curate KERNELBENCH_ROOT [--work DIR]  # write the parquet
    python -m pipelines.validation.generated_kernels                                        # vs measured

KERNELBENCH_ROOT is a checkout of KernelBench at `KERNELBENCH_COMMIT` (the problems' shapes changed over its
history; the timing file and the problems must be of the same commit). `--work DIR` keeps each problem's
emulation and is reused when rerun. The parquet is evaluation data: nothing trains on it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from emulator.core.hardware import get_gpu
from emulator.core.ops import timing_family
from emulator.core.roofline import roofline_durations
from emulator.trace.io import read_rank_trace
from maya_models.reference import reference_dir

KERNELBENCH_COMMIT = "509ed996193e3a1bf6b152622c39a3e8e4219ead"
TIMING = "results/timing/H100_modal/baseline_time_torch_compile_inductor_default.json"
EAGER_TIMING = "results/timing/H100_modal/baseline_time_torch.json"
HARDWARE = "NVIDIA H100 80GB HBM3"
GPU = "h100"
NAME = "evaluation/kernelbench_compiled_h100.parquet"  # under the reference folder
DRIVER = Path(__file__).resolve().parents[2] / "examples" / "validation" / "kernelbench_problem.py"
KERNEL_COLUMNS = ["op", "shapes", "dtypes", "bytes", "flops", "args"]


def kernelbench_path() -> Path:
    return reference_dir() / NAME


def _emulate(problem: Path, out: Path) -> str | None:
    """Emulates the compiled problem into `out` (kept and reused); None when it ran, else why it did not."""
    summary = out / "emulation.json"
    if not summary.exists():
        cmd = [sys.executable, "-m", "emulator.cli", "emulate", "--gpu", GPU, "--out", str(out), str(DRIVER),
               str(problem)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        if not summary.exists():
            return _last_error_line(proc.stdout + proc.stderr) or f"maya emulate exited {proc.returncode}"
    s = json.loads(summary.read_text())
    return None if s.get("ok", False) else (_last_error_line(s.get("error") or "") or "the emulation failed")


def _last_error_line(text: str) -> str:
    """The exception line of a traceback (`...Error: message`), cut to one line of text."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.split(":", 1)[0].endswith(("Error", "Exception"))]
    return (errors[-1] if errors else lines[-1] if lines else "")[:200]


def compiled_call(out: Path) -> pd.DataFrame | None:
    """The kernel rows of the second compiled call of an emulated problem (the first compiles; both run the
    same kernels), or None when the two calls differ. Rows before the first generated kernel made the inputs."""
    t = read_rank_trace(out, 0).to_pandas()
    k = t[t.kind == "kernel"].reset_index(drop=True)
    generated = np.flatnonzero(k.op.str.startswith("triton::").to_numpy())
    if not len(generated):
        return None
    k = k.iloc[generated[0]:].reset_index(drop=True)
    half = len(k) // 2
    if len(k) % 2 or list(k.op[:half]) != list(k.op[half:]):
        return None
    return k.iloc[half:].reset_index(drop=True)


def curate(root: Path, work: Path, out: Path | None = None) -> pd.DataFrame:
    """One row per level-1 problem timed on the H100 whose compiled call runs generated kernels only."""
    timing = json.loads((root / TIMING).read_text())["level1"]
    eager = json.loads((root / EAGER_TIMING).read_text())["level1"]
    rows, dropped = [], {}
    for name, m in sorted(timing.items(), key=lambda kv: int(kv[0].split("_")[0])):
        if m.get("hardware") != HARDWARE:
            dropped[name] = f"timed on {m.get('hardware')}"
            continue
        run = work / Path(name).stem
        failed = _emulate(root / "KernelBench" / "level1" / name, run)
        if failed:
            dropped[name] = f"emulation failed: {failed}"
            continue
        k = compiled_call(run)
        if k is None:
            dropped[name] = "no generated kernel, or the two calls differ"
            continue
        extern = sorted({o for o in k.op if not o.startswith("triton::")})
        if extern:
            dropped[name] = "runs extern kernels too: " + ", ".join(extern)
            continue
        kernels = [{c: (v.tolist() if isinstance(v, np.ndarray) else v) for c, v in r.items()}
                   for r in k[KERNEL_COLUMNS].to_dict("records")]
        rows.append({"problem": name, "gpu": GPU, "hardware": m["hardware"], "measured_s": m["mean"] / 1e3,
                     "measured_std_s": m["std"] / 1e3, "eager_s": eager.get(name, {}).get("mean", np.nan) / 1e3,
                     "kernels": json.dumps(kernels, default=_plain),
                     "source": f"ScalingIntelligence/KernelBench@{KERNELBENCH_COMMIT}:{TIMING}"})
    df = pd.DataFrame(rows)
    for name, why in dropped.items():
        print(f"dropped {name}: {why}")
    path = out or kernelbench_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    df.to_parquet(tmp, index=False)
    tmp.replace(path)
    print(f"wrote {len(df)} problems to {path} ({len(dropped)} dropped)")
    return df


def _plain(v):
    return v.tolist() if isinstance(v, np.ndarray) else str(v)


def compare(df: pd.DataFrame, predictor=None) -> pd.DataFrame:
    """Per problem: the labelled fallback's time of its generated kernels, and maya's (the registered kernel
    predictor's, which times the kernels a learned family stands for: `emulator.core.ops.GENERATED_TIMED_AS`),
    against the measured compiled call."""
    spec = get_gpu(GPU)
    out = []
    for r in df.itertuples(index=False):
        k = pd.DataFrame(json.loads(r.kernels)).assign(kind="kernel")
        fallback = float(roofline_durations(k, spec).sum())
        row = {"problem": r.problem, "kinds": "+".join(sorted({_kind(x) for x in k.itertuples(index=False)})),
               "kernels": len(k), "gb": k.bytes.sum() / 1e9, "measured_ms": r.measured_s * 1e3,
               "eager_ms": r.eager_s * 1e3, "fallback_ms": fallback * 1e3,
               "fallback_error": fallback / r.measured_s - 1}
        if predictor is not None:
            p = predictor.predict(k)
            row.update(maya_ms=p.duration_s.sum() * 1e3, maya_error=p.duration_s.sum() / r.measured_s - 1,
                       learned=float((p.source == "learned").mean()))
        out.append(row)
    return pd.DataFrame(out)


def _kind(kernel) -> str:
    """Inductor's kind of a generated kernel; a pointwise one that loads more often than it has buffers (a
    pooling window) is a stencil, which `timing_family` leaves to the fallback."""
    kind = kernel.op.split("::", 1)[1]
    if kernel.op == "triton::pointwise" and timing_family(kernel.op, kernel.args, kernel.shapes) == "generated":
        return "pointwise_stencil"
    return kind


def summary(cmp: pd.DataFrame) -> pd.DataFrame:
    """Median signed error and MAPE per kind of generated kernel, for the fallback and (when given) maya."""
    cols = [c for c in ("fallback_error", "maya_error") if c in cmp.columns]
    rows = {}
    for kind, g in [*cmp.groupby("kinds"), ("all", cmp)]:
        rows[kind] = {"problems": len(g), **{f"{c.removesuffix('_error')} median": g[c].median() for c in cols},
                      **{f"{c.removesuffix('_error')} MAPE": g[c].abs().mean() for c in cols}}
    return pd.DataFrame(rows).T


def _registered(gpu: str):
    try:
        from maya_models.registry import load_predictor

        p = load_predictor("kernels", gpu)
        return p[0] if isinstance(p, tuple) else p
    except Exception as e:  # no predictor registered: the fallback alone
        print(f"no registered {gpu} kernel predictor ({e}); the fallback alone")
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--curate", type=Path, metavar="KERNELBENCH_ROOT", help="write the evaluation parquet")
    p.add_argument("--work", type=Path, default=Path("out/kernelbench"), help="emulations of the problems (reused)")
    a = p.parse_args(argv)
    if a.curate:
        curate(a.curate, a.work)
    path = kernelbench_path()
    if not path.exists():
        raise SystemExit(f"{path} is missing: run with --curate KERNELBENCH_ROOT first")
    cmp = compare(pd.read_parquet(path), _registered(GPU))
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(cmp.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        print()
        s = summary(cmp)
        print(s.to_string(formatters={c: (lambda x: f"{int(x)}") if c == "problems" else (lambda x: f"{x:+.1%}")
                                      for c in s.columns}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
