"""Collective microbenchmarks: `python -m pipelines.runners.collectives --gpu G --ranks N`.

The launcher starts N torchrun workers on this node (NCCL on GPUs, gloo on the CPU). Every worker
runs the same plan: for each group size (sub-groups of the first k ranks) and each collective
(all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send/recv), sizes from 1 KiB up.
A repeat is timed on every rank between a barrier and the op's completion; the slowest rank's
time is the repeat's time (a collective ends when its last member does), and the median over
repeats is recorded. Sizes follow nccl-tests (`emulator.core.ops`): all_gather the gathered output,
reduce_scatter the pre-scatter input, all_to_all the send buffer, send/recv the message.

Rank 0 writes one warehouse chunk per (group size, collective); a rerun with the same run id skips
the chunks already there. The budget is checked by rank 0 and broadcast, so all ranks stop at the
same point and no collective is left half-issued.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from pipelines.runners import common, pipes
from pipelines.runners.timing import summarize

SUITE = "collectives"
# The CPU's largest size: past the 25 MB gradient buckets DDP all-reduces by default and the per-layer
# gathers of FSDP over two ranks. Beyond twice the largest size measured the predictor has only its fitted
# alpha-beta prior (maya_models.collectives), and a prior fitted to sizes up to 4 MiB put a DDP bucket of
# 23.9 MB at 6 ms where gloo takes 16-17 ms here.
CPU_MAX_BYTES = 64 * 2**20
OPS = {  # measured name -> (trace op name, kind)
    "all_reduce": ("c10d::allreduce_", "collective"),
    "all_gather": ("c10d::_allgather_base_", "collective"),
    "reduce_scatter": ("c10d::_reduce_scatter_base_", "collective"),
    "all_to_all": ("c10d::alltoall_base_", "collective"),
    "broadcast": ("c10d::broadcast_", "collective"),
    "send_recv": ("c10d::send", "p2p"),
}


def sizes(max_bytes: int, min_bytes: int = 1024, step: int = 4) -> list[int]:
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= step
    return out


def plan(world: int, ops: list[str]) -> list[dict]:
    """Chunks: one per (group size, op); group sizes are powers of two up to the world size."""
    gss, g = [], 2
    while g <= world:
        gss.append(g)
        g *= 2
    if world not in gss and world >= 2:
        gss.append(world)
    return [{"group_size": gs, "op": op} for gs in gss for op in ops if not (op == "send_recv" and gs != 2)]


class _Op:
    """Buffers and the call for one collective at one size, on this rank."""

    def __init__(self, name: str, nbytes: int, group, gs: int, rank: int, device, dtype):
        esz = torch.tensor([], dtype=dtype).element_size()
        n = max(nbytes // esz // gs * gs, gs)  # divisible by the group size
        self.numel = n
        self.name, self.group, self.rank = name, group, rank
        mk = lambda k: torch.ones(k, dtype=dtype, device=device)  # noqa: E731
        if name == "all_reduce" or name == "broadcast" or name == "send_recv":
            self.a = mk(n)
        elif name == "all_gather":
            self.a, self.out = mk(n // gs), mk(n)
        elif name == "reduce_scatter":
            self.a, self.out = mk(n), mk(n // gs)
        elif name == "all_to_all":
            self.a, self.out = mk(n), mk(n)
        self.coll_bytes = n * esz

    def __call__(self):
        g = self.group
        if self.name == "all_reduce":
            dist.all_reduce(self.a, group=g)
        elif self.name == "all_gather":
            dist.all_gather_into_tensor(self.out, self.a, group=g)
        elif self.name == "reduce_scatter":
            dist.reduce_scatter_tensor(self.out, self.a, group=g)
        elif self.name == "all_to_all":
            dist.all_to_all_single(self.out, self.a, group=g)
        elif self.name == "broadcast":
            dist.broadcast(self.a, src=0, group=g)
        elif self.name == "send_recv":
            if self.rank == 0:
                dist.send(self.a, dst=1)
            elif self.rank == 1:
                dist.recv(self.a, src=0)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_repeats(op: _Op, device, repeats: int, warmup: int, in_group: bool) -> list[float]:
    """Per-repeat time of the slowest group member (all ranks of the world take part in the barrier)."""
    times = []
    for i in range(warmup + repeats):
        dist.barrier()
        _sync(device)
        t0 = time.perf_counter()
        if in_group:
            op()
            _sync(device)
        dt = time.perf_counter() - t0 if in_group else 0.0
        if i >= warmup:
            times.append(dt)
    t = torch.tensor(times, dtype=torch.float64, device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def worker(a) -> int:
    """One torchrun worker: the whole plan, in lock-step with the other ranks."""
    from emulator.core.ops import op_family
    from maya_models.schema import signature_key
    from maya_models.warehouse import completed_chunks, write_measurements

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = a.gpu != "cpu"
    if cuda:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dtype = torch.bfloat16
    else:
        device, dtype = torch.device("cpu"), torch.float32
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo")
    root = Path(a.root)
    chunks = json.loads(Path(a.plan).read_text())["chunks"]
    done = completed_chunks(a.gpu, common.SOURCE, a.run_id, root=root)
    dist.barrier()
    groups = {gs: dist.new_group(list(range(gs))) for gs in sorted({c["group_size"] for c in chunks})}
    t0 = time.monotonic()
    comm = "NCCL " + ".".join(map(str, torch.cuda.nccl.version())) if cuda else "gloo"
    software = f"torch {torch.__version__}, {comm}"
    base = common.base_row(gpu=a.gpu, run_id=a.run_id, device_name=a.device_name, software=software,
                           threads=1 if not cuda else None)
    stats = {"chunks_written": 0, "chunks_skipped": 0, "rows_ok": 0, "rows_failed": 0, "budget_exhausted": False}
    flag = torch.zeros(1, device=device if cuda else "cpu")
    for ci, chunk in enumerate(chunks):
        if ci in done:
            stats["chunks_skipped"] += 1
            continue
        gs, name = chunk["group_size"], chunk["op"]
        trace_op, kind = OPS[name]
        rows = []
        for nbytes in sizes(a.max_bytes, step=a.size_step):
            over = rank == 0 and stats["rows_ok"] + stats["rows_failed"] > 0 and time.monotonic() - t0 > a.budget_s
            flag.fill_(1.0 if over else 0.0)
            dist.all_reduce(flag)
            if flag.item() > 0:
                stats["budget_exhausted"] = True
                break
            in_group = rank < gs
            err = None
            try:
                op = _Op(name, nbytes, groups[gs], gs, rank, device, dtype)
                times = _time_repeats(op, device, a.repeats, a.warmup, in_group)
            except Exception as e:  # noqa: BLE001 - recorded as a failed row; ranks stay in step
                err = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:500]
                op, times = None, []
            if rank != 0:
                continue
            coll_bytes = op.coll_bytes if op is not None else nbytes
            numel = op.numel if op is not None else nbytes // 4
            shapes, dts = [[numel]], [str(dtype).removeprefix("torch.")]
            args = json.dumps({"collective": name}, sort_keys=True)
            if err is None:
                med, mn, spread = summarize(times)
                timing = {"duration_s": med, "duration_min_s": mn, "spread": spread, "repeats": len(times),
                          "status": "ok", "error": None, "clock_mhz": None, "clock_drop": False,
                          "measured_at": common.now()}
            else:
                timing = common.failed_columns(err)
            rows.append({**base, "kind": kind, "op": trace_op, "family": op_family(trace_op), "shapes": shapes,
                         "dtypes": dts, "strides": [[1]], "args": args, "out_shapes": None, "out_dtypes": None,
                         "signature": signature_key(trace_op, shapes, dts, [[1]], args, extra=f"gs={gs}"),
                         "coll_bytes": coll_bytes, "group_size": gs, "nnodes": 1, "gpus_per_node": world,
                         "provenance": f"maya-bench collectives runner ({'nccl' if cuda else 'gloo'}, "
                                       f"{world} local ranks)", **timing})
            if err:
                stats["rows_failed"] += 1
            else:
                stats["rows_ok"] += 1
        if rank == 0 and rows:
            write_measurements(common.rows_to_table(rows), root=root, gpu=a.gpu, source=common.SOURCE,
                               run_id=a.run_id, chunk=ci)
            stats["chunks_written"] += 1
            print(f"collectives {a.gpu} chunk {ci + 1}/{len(chunks)} gs={gs} {name}: {len(rows)} sizes",
                  file=sys.stderr, flush=True)
        if stats["budget_exhausted"]:
            break
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        stats["complete"] = not stats["budget_exhausted"]
        common.write_json_atomic(Path(a.worker_summary), stats)
    return 0


def _run_forwarding(cmd: list[str], env: dict, timeout_s: float) -> tuple[int, str]:
    """Run the torchrun workers, passing each progress line on as it comes (`pipes.say`); (exit code, the
    output's tail)."""
    import threading
    from collections import deque

    tail: deque = deque(maxlen=60)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def pump():
        for line in proc.stdout:
            tail.append(line)
            if line.startswith("collectives "):
                pipes.say(line.rstrip())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        reader.join(timeout=5)
        return -9, "".join(tail)[-2000:] + f"\nworkers exceeded {timeout_s:.0f}s"
    reader.join(timeout=5)
    return proc.returncode, "".join(tail)[-2000:]


def launch(gpu: str, *, run_id: str, root: Path, budget_s: float, ranks: int | None = None,
           max_bytes: int | None = None, ops: list[str] | None = None, repeats: int = 10, warmup: int = 2,
           size_step: int = 4, device_name: str | None = None, timeout_s: float | None = None) -> dict:
    """Start the torchrun workers and return the run summary (raises if the workers failed)."""
    from pipelines.runners.timing import local_device

    info = local_device(gpu)
    if gpu == "cpu":
        ranks = ranks or 2
        max_bytes = max_bytes or CPU_MAX_BYTES
    else:
        ranks = ranks or torch.cuda.device_count()
        free = torch.cuda.mem_get_info(info.device)[0]
        max_bytes = max_bytes or min(2**30, free // 8)
    if ranks < 2:
        return {"suite": SUITE, "gpu": gpu, "run_id": run_id, "skipped": "one device: no collectives to measure",
                "complete": True, "chunks_written": 0, "chunks_skipped": 0, "rows_ok": 0, "rows_failed": 0}
    rdir = common.run_dir(root, gpu, run_id)
    ops = ops or list(OPS)
    common.load_or_write_plan(rdir / f"{SUITE}.plan.json", lambda: plan(ranks, ops))
    summary_path = rdir / f"{SUITE}.worker-summary.json"
    summary_path.unlink(missing_ok=True)
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           "-m", "pipelines.runners.collectives", "--worker", "--gpu", gpu, "--run-id", run_id,
           "--root", str(root), "--plan", str(rdir / f"{SUITE}.plan.json"), "--budget-s", str(budget_s),
           "--max-bytes", str(max_bytes), "--repeats", str(repeats), "--warmup", str(warmup),
           "--size-step", str(size_step), "--device-name", device_name or info.device_name,
           "--worker-summary", str(summary_path)]
    # the workers report to this process, which alone speaks Dagster Pipes (one writer of its message file)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PIPES_")}
    env["OMP_NUM_THREADS"] = "1"
    returncode, tail = _run_forwarding(cmd, env, timeout_s or budget_s * 3 + 120)
    if returncode != 0 or not summary_path.exists():
        raise RuntimeError(f"collective workers failed (exit {returncode}):\n{tail}")
    stats = json.loads(summary_path.read_text())
    return {"suite": SUITE, "gpu": gpu, "run_id": run_id, "ranks": ranks, "max_bytes": max_bytes,
            "backend": "gloo" if gpu == "cpu" else "nccl", "wall_s": round(time.monotonic() - t0, 2), **stats}


def main(argv=None) -> int:
    from emulator.core.settings import warehouse_root
    from pipelines.runners.timing import DeviceMismatch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--root", default=None)
    p.add_argument("--budget-s", type=float, default=60.0)
    p.add_argument("--ranks", type=int, default=None, help="workers (default: 2 on CPU, every GPU otherwise)")
    p.add_argument("--max-bytes", type=int, default=None)
    p.add_argument("--size-step", type=int, default=4)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--ops", nargs="*", default=None, choices=list(OPS))
    p.add_argument("--summary", default=None)
    # worker-only
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--plan", help=argparse.SUPPRESS)
    p.add_argument("--device-name", default="", help=argparse.SUPPRESS)
    p.add_argument("--worker-summary", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker(a)
    try:
        summary = launch(a.gpu, run_id=a.run_id, root=Path(a.root) if a.root else warehouse_root(),
                         budget_s=a.budget_s, ranks=a.ranks, max_bytes=a.max_bytes, ops=a.ops, repeats=a.repeats,
                         warmup=a.warmup, size_step=a.size_step)
    except DeviceMismatch as e:
        print(f"error: {e}", flush=True)
        return 3
    common.emit_summary(summary, a.summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
