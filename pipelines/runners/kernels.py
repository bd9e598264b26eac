"""Kernel microbenchmarks on the local device: `python -m pipelines.runners.kernels --gpu G`.

Plan = signatures harvested from traces (what workloads need, first) + the designed sweep, cut
into chunks. Each chunk is timed signature by signature and written to the warehouse as one
atomic Parquet file; a rerun with the same `--run-id` skips chunks already written. The time
budget (measuring time, planning excluded) is checked between chunks, so a run overshoots it by
at most one chunk, always measures at least one, and stops with `budget_exhausted`. The first
chunk of the designed sweep holds one signature of every family (the sweep is interleaved), so
even a tiny budget covers them all.

A signature that fails (no kernel for this device, out of memory, a bad shape) becomes a
`status=failed` row with the reason and the sweep goes on. A signature that kills the process
(a crashing kernel) is listed in the run folder's `inflight.json`; the launching asset reruns the
runner with `--poison` so that signature is recorded as failed instead of crashing again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from emulator.core.hardware import CPU_RANK_THREADS
from pipelines.runners import common
from pipelines.runners.harvest import from_json, harvest, to_json
from pipelines.runners.replay import ReplayError, Signature, bind, describe_error, run_once, with_outputs
from pipelines.runners.sweep import designed_sweep
from pipelines.runners.timing import DeviceInfo, Timer, TimingSettings, local_device

SUITE = "kernels"


def make_plan(device: torch.device, traces: list[str], chunk_size: int, sweep: bool) -> list[list[dict]]:
    sigs: dict[str, Signature] = {}
    for s in harvest(traces) if traces else []:
        sigs.setdefault(s.key, s)
    if sweep:
        for s in designed_sweep(device):  # a designed signature gets its outputs once, here, and the plan keeps them
            if s.key not in sigs:
                sigs[s.key] = with_outputs(s)
    flat = [to_json(s) for s in sigs.values()]
    return [flat[i:i + chunk_size] for i in range(0, len(flat), chunk_size)]


def _memcpy_callable(sig: Signature, device: torch.device):
    """Copies as the emulator records them (`memcpy::h2d|d2h|d2d`, the tensor's shape and dtype).

    Host memory is pinned for non-blocking copies (the only way they are asynchronous), pageable
    otherwise, like the program that issued them.
    """
    from pipelines.runners.replay import torch_dtype

    direction = sig.op.split("::", 1)[1].lower()
    if direction not in ("h2d", "d2h", "d2d"):
        raise ReplayError(f"{sig.op}: unknown copy direction")
    if device.type != "cuda" and direction != "d2d":
        raise ReplayError(f"{sig.op}: a CPU has no host-device copy")
    args = json.loads(sig.args)
    shape = tuple(sig.shapes[0]) if sig.shapes else ()
    dtype = torch_dtype(sig.dtypes[0]) if sig.dtypes else torch.uint8
    dev = torch.empty(shape, dtype=dtype, device=device)
    if direction == "d2d":
        src = torch.empty(shape, dtype=dtype, device=device)
        return lambda: dev.copy_(src)
    non_blocking = bool(args.get("non_blocking", False))
    host = torch.empty(shape, dtype=dtype, pin_memory=non_blocking)
    if direction == "h2d":
        return lambda: dev.copy_(host, non_blocking=non_blocking)
    return lambda: host.copy_(dev, non_blocking=non_blocking)


def measure(sig: Signature, timer: Timer, poisoned: set[str]) -> dict:
    """One measurement row's timing columns for `sig` (failed rows carry the reason)."""
    if sig.key in poisoned:
        return common.failed_columns("crashed the benchmark process on a previous attempt")
    try:
        if sig.kind == "memcpy":
            fn = _memcpy_callable(sig, timer.device)
        else:
            b = bind(sig, timer.device)
            fn = lambda: run_once(b)  # noqa: E731
        t = timer.time(fn)
        if not t.median_s > 0:
            return common.failed_columns(f"non-positive time {t.median_s!r} (timer resolution)")
        return common.timing_columns(t)
    except Exception as e:  # noqa: BLE001 - any failure of one shape is recorded and the sweep goes on
        if timer.device.type == "cuda":
            torch.cuda.synchronize(timer.device)
            torch.cuda.empty_cache()
        return common.failed_columns(describe_error(e))


def run(gpu: str, *, run_id: str, root: Path, budget_s: float, traces: list[str] = (), sweep: bool = True,
        chunk_size: int = 12, settings: TimingSettings | None = None, threads: int | None = None,
        poison: list[str] = (), max_chunks: int | None = None, info: DeviceInfo | None = None) -> dict:
    from maya_models.warehouse import completed_chunks, write_measurements

    t0 = time.monotonic()
    info = info or local_device(gpu)
    if info.device.type == "cpu":
        # the `cpu` target is one rank of a job: maya and torchrun run every rank with OMP_NUM_THREADS=1,
        # so CPU kernels are measured on one thread unless asked otherwise
        torch.set_num_threads(threads or CPU_RANK_THREADS)
    elif threads:
        torch.set_num_threads(threads)
    rdir = common.run_dir(root, gpu, run_id)
    chunks, resumed = common.load_or_write_plan(
        rdir / f"{SUITE}.plan.json", lambda: make_plan(info.device, list(traces), chunk_size, sweep))
    done = completed_chunks(gpu, common.SOURCE, run_id, root=root)
    timer = Timer(info.device, settings)
    t_measure = time.monotonic()  # the budget is for measuring; planning is not charged to it
    base = common.base_row(gpu=gpu, run_id=run_id, device_name=info.device_name, software=info.software,
                           threads=torch.get_num_threads() if info.device.type == "cpu" else None)
    poisoned = set(poison)
    bar = common.Progress(len(chunks), f"kernels {gpu}")
    written, skipped, rows_ok, rows_failed, exhausted = 0, 0, 0, 0, False
    for ci, chunk in enumerate(chunks):
        if ci in done:
            skipped += 1
            continue
        if (written and time.monotonic() - t_measure > budget_s) or (max_chunks is not None and written >= max_chunks):
            exhausted = True
            break
        rows = []
        for si, d in enumerate(chunk):
            sig = from_json(d)
            common.write_json_atomic(rdir / "inflight.json", {"chunk": ci, "index": si, "signature": sig.key,
                                                              "op": sig.op})
            timing = measure(sig, timer, poisoned)
            rows.append({**base, **sig.row_columns(),
                         "provenance": f"maya-bench kernels runner; {sig.origin}", **timing})
        write_measurements(common.rows_to_table(rows), root=root, gpu=gpu, source=common.SOURCE, run_id=run_id,
                           chunk=ci)
        written += 1
        rows_ok += sum(r["status"] == "ok" for r in rows)
        rows_failed += sum(r["status"] != "ok" for r in rows)
        bar.update(ci + 1, f"{rows_ok} ok {rows_failed} failed", rows_ok=rows_ok, rows_failed=rows_failed)
    bar.close()
    (rdir / "inflight.json").unlink(missing_ok=True)
    return {"suite": SUITE, "gpu": gpu, "run_id": run_id, "resumed": resumed, "chunks_total": len(chunks),
            "chunks_written": written, "chunks_skipped": skipped, "rows_ok": rows_ok, "rows_failed": rows_failed,
            "budget_exhausted": exhausted, "complete": not exhausted and written + skipped == len(chunks),
            "device": info.device_name, "wall_s": round(time.monotonic() - t0, 2)}


def main(argv=None) -> int:
    from emulator.core.settings import warehouse_root
    from pipelines.runners.timing import DeviceMismatch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", required=True, help="partition: 'cpu' or the local GPU's maya key")
    p.add_argument("--run-id", required=True)
    p.add_argument("--root", default=None, help="warehouse root (default $MAYA_WAREHOUSE or ./warehouse)")
    p.add_argument("--budget-s", type=float, default=240.0)
    p.add_argument("--traces", nargs="*", default=[], help="emulation output folders to harvest signatures from")
    p.add_argument("--no-sweep", action="store_true", help="only the harvested trace signatures")
    p.add_argument("--chunk-size", type=int, default=12)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--max-seconds-per-signature", type=float, default=1.0)
    p.add_argument("--condition", choices=["back_to_back", "isolated"], default="back_to_back",
                   help="GPU timing conditions: back-to-back launches after a heat soak, no L2 flush (a training "
                        "step's), or one call at a time after an L2 flush (a microbenchmark's)")
    p.add_argument("--threads", type=int, default=None,
                   help=f"CPU threads (torch.set_num_threads; default on CPU: {CPU_RANK_THREADS}, one rank's)")
    p.add_argument("--poison", nargs="*", default=[], help="signature keys to record as failed without running")
    p.add_argument("--max-chunks", type=int, default=None)
    p.add_argument("--summary", default=None, help="write the run summary JSON here")
    a = p.parse_args(argv)
    settings = TimingSettings(repeats=a.repeats, max_seconds=a.max_seconds_per_signature, condition=a.condition)
    try:
        summary = run(a.gpu, run_id=a.run_id, root=Path(a.root) if a.root else warehouse_root(),
                      budget_s=a.budget_s, traces=a.traces, sweep=not a.no_sweep, chunk_size=a.chunk_size,
                      settings=settings, threads=a.threads, poison=a.poison, max_chunks=a.max_chunks)
    except DeviceMismatch as e:
        print(f"error: {e}", flush=True)
        return 3
    except KeyboardInterrupt:  # the chunk being measured is dropped; the written ones are whole and kept
        print(f"interrupted: the chunks written so far are in the warehouse; rerun with --run-id {a.run_id} to "
              "resume", file=sys.stderr, flush=True)
        return 130
    common.emit_summary(summary, a.summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
