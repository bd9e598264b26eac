"""In-training CPU kernel timings: real training steps of calibration programs, every op timed where it ran.

The kernel runner times an op alone, call after call on memory the allocator hands straight back. A
training step does not: between two calls of an op the step frees activations, the C library returns
whole freed regions to the kernel, and the next large output lands on pages that fault on first touch
(`--conditions` below times a few ops both ways). Which outputs fault depends on the allocator's history
(an output the allocator happens to reuse costs its warm time), so the difference is learned, not
computed: these rows carry `timing = in_training` (the predictors' `in_situ` feature) beside the
isolated `host_timer` rows of the same ops.

The programs are ordinary training scripts at shapes and layouts that no validation case uses
(`pipelines.validation.suites`), so the validation's CPU table stays an out-of-sample check. Each
program is one chunk: `maya profile` (every op timed) for a few steps, its steady iterations' ops
grouped by signature, one row per signature with the mean of its calls: a step's time is the sum of its calls, and
a signature's calls differ in what a step does to them (one output lands on freshly mapped pages, the next reuses
warm memory), so the expected call is their mean; the median answers with the common case and leaves the rest out.

    python -m pipelines.runners.in_training --gpu cpu --run-id R [--root W] [--only NAME]
    python -m pipelines.runners.in_training --conditions      # warm vs fresh-memory timings of a few ops
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.runners import common

SUITE = "in_training"
SOURCE = "maya-in-training"
ITERATIONS = 6  # profiled steps: the first is warm-up, the last may be cut short
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Program:
    name: str
    script: str  # relative to the repository root
    nproc: int
    args: tuple[str, ...]

    def command(self, out: Path) -> list[str]:
        return [sys.executable, "-m", "emulator.cli", "profile", "--nproc-per-node", str(self.nproc),
                "--iterations", str(ITERATIONS), "--out", str(out), str(REPO_ROOT / self.script), *self.args,
                "--steps", str(ITERATIONS + 1)]

    def provenance(self) -> str:
        return (f"maya profile --nproc-per-node {self.nproc} --iterations {ITERATIONS} {self.script} "
                f"{shlex.join(self.args)}")


def _gpt(d: int, layers: int, heads: int, seq: int, vocab: int, batch: int, *, kv_heads: int | None = None,
         preset: str = "tiny") -> tuple[str, ...]:
    return ("--model", preset, "--d-model", str(d), "--layers", str(layers), "--heads", str(heads),
            "--kv-heads", str(kv_heads or heads), "--seq-len", str(seq), "--vocab", str(vocab),
            "--batch-size", str(batch), "--dtype", "float32")


def _megatron(hidden: int, layers: int, heads: int, seq: int, vocab: int, mb: int, *extra: str) -> tuple[str, ...]:
    return ("--layers", str(layers), "--hidden", str(hidden), "--heads", str(heads), "--seq", str(seq),
            "--vocab", str(vocab), "--micro-batch", str(mb), "--dtype", "fp32", "--dropout", "0.0", *extra)


# One process, DDP, FSDP2 and Megatron-style TP over two: the conditions a CPU rank trains in (alone, or beside
# a second rank and its gloo threads). Widths 320-576, sequences 160-384 and vocabularies 2-8k are none of the
# validation cases'. The width-576 pair gives activations of 5-7 MB: the page-fault cost grows with the bytes an
# op writes, and with only narrower programs no in-training row had an output past 3 MB.
PROGRAMS = (
    Program("gpt-single-d384", "examples/gpt_single.py", 1, _gpt(384, 3, 6, 192, 6144, 3)),
    Program("gpt-single-d320-s384", "examples/gpt_single.py", 1, _gpt(320, 2, 5, 384, 8192, 2)),
    Program("gpt-single-d576-s384", "examples/gpt_single.py", 1, _gpt(576, 2, 9, 384, 4096, 2)),
    Program("fsdp2-d576", "examples/fsdp2.py", 2, _gpt(576, 2, 9, 320, 3072, 2)),
    Program("ddp-d320", "examples/ddp.py", 2, _gpt(320, 3, 5, 160, 5120, 4)),
    Program("ddp-d448", "examples/ddp.py", 2, _gpt(448, 2, 7, 128, 2048, 3)),
    Program("fsdp2-d384", "examples/fsdp2.py", 2, _gpt(384, 3, 6, 320, 3072, 2)),
    Program("fsdp2-d320", "examples/fsdp2.py", 2, _gpt(320, 2, 5, 192, 7168, 3)),
    Program("megatron-tp2-d384", "examples/validation/megatron_gpt.py", 2,
            _megatron(384, 3, 6, 192, 6144, 3, "--tp", "2")),
    # torch.compile'd: the C++ kernels Inductor generates for this CPU (`cpp::pointwise`, `cpp::reduction`), which
    # only a compiled program runs; about 18 distinct kernels a program. Both of the model's families (Llama: RMSNorm,
    # rotary positions, SwiGLU; GPT-2: LayerNorm, learned positions, GELU), grouped-query attention and activation
    # checkpointing (its recomputed forward kernels) give bodies of other kinds, not only other sizes; head widths
    # 32, 64 and 128 (a kernel over a head's width loops over it)
    Program("gpt-single-compiled-d448", "examples/gpt_single.py", 1, (*_gpt(448, 2, 7, 256, 4096, 2), "--compile")),
    Program("gpt-single-compiled-d320-s320", "examples/gpt_single.py", 1,
            (*_gpt(320, 3, 5, 320, 5120, 2), "--compile")),
    Program("gpt2-single-compiled-d384-s256", "examples/gpt_single.py", 1,
            (*_gpt(384, 2, 12, 256, 3072, 2, preset="gpt2-small"), "--compile")),
    Program("gpt2-single-compiled-d512-s160", "examples/gpt_single.py", 1,
            (*_gpt(512, 2, 4, 160, 6144, 3, preset="gpt2-small"), "--compile")),
    Program("gpt-single-compiled-d384-gqa", "examples/gpt_single.py", 1,
            (*_gpt(384, 2, 12, 192, 5120, 3, kv_heads=4), "--compile")),
    Program("gpt-single-compiled-d192-s512-ac", "examples/gpt_single.py", 1,
            (*_gpt(192, 3, 6, 512, 2048, 2), "--ac", "--compile")),
    Program("gpt-single-compiled-d640-s96", "examples/gpt_single.py", 1,
            (*_gpt(640, 2, 5, 96, 4096, 4), "--compile")),
)


def profiled_steady_iterations(ids) -> list[int]:
    """The iterations of a `maya profile` trace whose per-op times are a training step's: from id 1 to the one
    before the last. Id -1 holds the set-up and the first step, the last may be cut short, and id 0 still
    carries warm-up (DDP rebuilds its buckets after the first step, the profiler's first full iteration
    records every signature anew): its kernels can take twice the later iterations'."""
    ids = sorted(set(ids))
    return [i for i in ids if 1 <= i < ids[-1]] if ids else []


def rows_from_profile(folder: Path, base: dict, provenance: str) -> list[dict]:
    """One measurement row per timed signature of the profile's steady iterations: the mean of its calls as its
    duration (module doc), the fastest and the spread of its calls beside it."""
    import pyarrow.parquet as pq

    from pipelines.runners.harvest import signature_of_row, trace_files
    from pipelines.runners.timing import Timing, summarize

    calls: dict[str, tuple[object, list[float]]] = {}
    for f in trace_files(folder):
        table = pq.read_table(f).to_pylist()
        steady = set(profiled_steady_iterations(r["iteration"] for r in table))
        for row in table:
            d = row.get("duration_s")
            if row["iteration"] not in steady or d is None or not d > 0:
                continue
            sig = signature_of_row(row, f"in_training:{folder.name}", generated=True)
            if sig is not None:
                calls.setdefault(sig.key, (sig, []))[1].append(float(d))
    rows = []
    for sig, ds in calls.values():
        _, fastest, spread = summarize(ds)
        # Timing's median_s is the row's duration_s: here the calls' mean (module doc)
        t = Timing(median_s=statistics.fmean(ds), min_s=fastest, spread=spread, repeats=len(ds), timing="in_training")
        rows.append({**base, **sig.row_columns(), "provenance": provenance, **common.timing_columns(t)})
    return rows


def run(gpu: str, *, run_id: str, root: Path, budget_s: float, programs=PROGRAMS, timeout_s: float = 900) -> dict:
    """Profile each program (one chunk each, resumable) and write its in-training rows."""
    from emulator.core.hardware import CPU_RANK_THREADS, get_gpu
    from maya_models.warehouse import completed_chunks, write_measurements
    from pipelines.runners.timing import local_device

    if not get_gpu(gpu).is_cpu:
        raise SystemExit(f"in-training profiles are taken on the CPU target only (got --gpu {gpu})")
    t0 = time.monotonic()
    info = local_device(gpu)
    base = common.base_row(gpu=gpu, run_id=run_id, device_name=info.device_name, software=info.software,
                           threads=CPU_RANK_THREADS)
    base["source"] = SOURCE
    done = completed_chunks(gpu, SOURCE, run_id, root=root)
    bar = common.Progress(len(programs), f"in-training {gpu}")
    written, skipped, rows_ok, failed, exhausted = 0, 0, 0, [], False
    for ci, prog in enumerate(programs):
        if ci in done:
            skipped += 1
            continue
        if written and time.monotonic() - t0 > budget_s:
            exhausted = True
            break
        with tempfile.TemporaryDirectory(prefix=f"maya-{prog.name}-") as tmp:
            out = Path(tmp) / prog.name
            proc = subprocess.run(prog.command(out), cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
            rows = rows_from_profile(out, base, prog.provenance()) if proc.returncode == 0 else []
        if not rows:
            failed.append(f"{prog.name}: maya profile exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
            continue  # nothing written: the chunk is retried by the next run
        write_measurements(common.rows_to_table(rows), root=root, gpu=gpu, source=SOURCE, run_id=run_id, chunk=ci)
        written += 1
        rows_ok += len(rows)
        bar.update(ci + 1, f"{rows_ok} rows", rows_ok=rows_ok)
    bar.close()
    return {"suite": SUITE, "gpu": gpu, "run_id": run_id, "chunks_total": len(programs), "chunks_written": written,
            "chunks_skipped": skipped, "rows_ok": rows_ok, "failed": failed, "budget_exhausted": exhausted,
            "complete": not failed and not exhausted and written + skipped == len(programs),
            "wall_s": round(time.monotonic() - t0, 2)}


def conditions(reps: int = 30) -> list[dict]:
    """Each op timed warm (reusing its memory) and on fresh memory (the C library's free memory handed
    back to the kernel before every call), on one thread: the page-fault cost an isolated benchmark misses."""
    import ctypes

    import torch

    torch.set_num_threads(1)
    trim = ctypes.CDLL("libc.so.6").malloc_trim
    x = torch.randn(512, 4096)
    lsm, tgt, one = torch.log_softmax(x, -1), torch.randint(0, 4096, (512,)), torch.ones(())
    a, b = torch.randn(4, 128, 768), torch.randn(4, 128, 768)
    w1, w2 = torch.randn(512, 256), torch.randn(256, 4096)
    ops = {"_log_softmax_backward_data [512, 4096]":
           lambda: torch.ops.aten._log_softmax_backward_data(lsm, lsm, 1, torch.float32),
           "nll_loss_backward [512, 4096]": lambda: torch.ops.aten.nll_loss_backward(one, lsm, tgt, None, 1, -100, one),
           "mul [4, 128, 768]": lambda: a * b,
           "mm [512, 256] x [256, 4096]": lambda: w1 @ w2}

    def median_ms(fn, fresh: bool) -> float:
        ts = []
        for _ in range(reps):
            if fresh:
                trim(0)
            t = time.perf_counter()
            y = fn()
            ts.append(time.perf_counter() - t)
            del y
        return statistics.median(ts[3:]) * 1e3

    return [{"op": name, "warm_ms": median_ms(fn, False), "fresh_ms": median_ms(fn, True)} for name, fn in ops.items()]


def main(argv=None) -> int:
    from emulator.core.settings import warehouse_root

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="cpu")
    p.add_argument("--run-id", default=None)
    p.add_argument("--root", default=None, help="warehouse root (default $MAYA_WAREHOUSE or ./warehouse)")
    p.add_argument("--budget-s", type=float, default=600.0)
    p.add_argument("--only", default=None, help="only the programs whose name contains this")
    p.add_argument("--conditions", action="store_true", help="print warm vs fresh-memory op timings and stop")
    p.add_argument("--summary", default=None, help="write the run summary JSON here")
    p.add_argument("--poison", nargs="*", default=[], help=argparse.SUPPRESS)  # the launcher's crash retry:
    # a program that crashes fails its own chunk (reported in `failed`), so there is nothing to skip
    a = p.parse_args(argv)
    if a.conditions:
        for r in conditions():
            print(f"{r['op']:40s} warm {r['warm_ms']:8.3f} ms   fresh memory {r['fresh_ms']:8.3f} ms")
        return 0
    if not a.run_id:
        p.error("--run-id is required (or --conditions)")
    programs = [q for q in PROGRAMS if a.only is None or a.only in q.name]
    summary = run(a.gpu, run_id=a.run_id, root=Path(a.root) if a.root else warehouse_root(), budget_s=a.budget_s,
                  programs=programs)
    common.emit_summary(summary, a.summary)
    return 1 if summary["failed"] else 0  # a spent budget is not a failure: the next run resumes


if __name__ == "__main__":
    raise SystemExit(main())
