"""One emulated rank: `python -m emulator.launch.worker --gpu G --rank R --world-size W --out DIR --script S -- ARGS`.

The launcher (emulator.launch.emulate) starts one worker per emulated rank. The worker
  1. sets torchrun's environment for this rank,
  2. boots the fake CUDA device *before* `import torch` (CPU builds need the C++ shim first),
  3. runs the program in this process like `python script args` / `python -m mod args`,
     under the recorder (fake device, recording process group, emulated caching allocator),
  4. ALWAYS writes OUT/trace/rank=R/part-0.parquet and OUT/ranks/rank=R.json, even when the
     program raises (ok=false, error = the program's traceback, the trace as far as it got).
Exit code (emulator.core.exitcodes): OK (incl. `SystemExit(0)` and a `--iterations` stop), PROGRAM_FAILED, OOM,
INTERRUPTED (SIGTERM from the launcher, or Ctrl-C: the partial outputs are still written, marked so).

Host time: each trace row's `host_gap_s` is the process CPU time (all threads) the program spent
since the previous device event, less the emulator's own work; the per-rank json says so with
`host_clock: "process_cpu"` (details in emulator.capture.recorder).

Modes: the default emulates the `--gpu` target; `--gpu cpu` keeps the script on the local CPU
(real ops, fake process group, no timing); `--profile` runs for real on the local device with a
real process group and measures every kernel row's duration.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from emulator.core.exitcodes import Exit


def parse_args(argv: list[str]) -> argparse.Namespace:
    program_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, program_args = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="python -m emulator.launch.worker", description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h100")
    p.add_argument("--gpu-spec", default=None, help="a GPU variant's [gpu] table as JSON")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--local-rank", type=int, default=None)
    p.add_argument("--local-world-size", type=int, default=None)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=None)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--iterations", type=int, default=None)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--timing-only", action="store_true",
                   help="with --profile: time iterations only, record nothing (the program's own speed)")
    p.add_argument("--routing", default=None, help="routing policy for data-dependent sizes (emulator.core.routing)")
    p.add_argument("--allow-unsupported", action="store_true",
                   help="record ops without a fake kernel with a best-guess output instead of stopping")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--script")
    g.add_argument("--module")
    ns = p.parse_args(argv)
    ns.program_args = program_args
    if ns.local_world_size is None:
        ns.local_world_size = max(ns.world_size // max(ns.nnodes, 1), 1)
    if ns.local_rank is None:
        ns.local_rank = ns.rank % ns.local_world_size
    if ns.node_rank is None:
        ns.node_rank = ns.rank // ns.local_world_size
    if ns.iterations is not None and ns.iterations < 1:
        p.error("--iterations must be >= 1")
    return ns


def set_torchrun_env(ns: argparse.Namespace) -> None:
    """What torchrun gives each worker; the launcher may already have set MASTER_ADDR/PORT."""
    env = {
        "RANK": ns.rank, "LOCAL_RANK": ns.local_rank, "WORLD_SIZE": ns.world_size,
        "LOCAL_WORLD_SIZE": ns.local_world_size, "GROUP_RANK": ns.node_rank, "NODE_RANK": ns.node_rank,
        "ROLE_RANK": ns.rank, "ROLE_WORLD_SIZE": ns.world_size, "ROLE_NAME": "default",
        "GROUP_WORLD_SIZE": ns.nnodes, "TORCHELASTIC_RESTART_COUNT": 0, "TORCHELASTIC_MAX_RESTARTS": 0,
    }
    for k, v in env.items():
        os.environ[k] = str(v)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    os.environ.setdefault("TORCHELASTIC_RUN_ID", "maya")


def write_setup_failure(ns: argparse.Namespace, message: str) -> None:
    """The emulator itself could not start (unknown GPU, shim build failed): still leave the outputs."""
    from emulator.capture.trace_rows import TraceRows
    from emulator.trace.io import write_rank_summary, write_rank_trace
    from emulator.trace.summaries import RankSummary

    rows = TraceRows(ns.rank)
    write_rank_trace(ns.out, ns.rank, rows.to_table())
    write_rank_summary(ns.out, RankSummary(rank=ns.rank, ok=False, error=message, gpu=ns.gpu, setup_failed=True,
                                           world_size=ns.world_size, work_hash=rows.work_hash()))


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(list(sys.argv[1:] if argv is None else argv))
    signal.signal(signal.SIGTERM, _interrupt)  # the launcher stops ranks with SIGTERM: write what was recorded
    try:
        return _run(ns)
    except KeyboardInterrupt:  # before the program started (importing torch, booting): nothing recorded yet
        print("maya worker: interrupted before the program started", file=sys.stderr)
        return Exit.INTERRUPTED


def _run(ns: argparse.Namespace) -> int:
    set_torchrun_env(ns)
    from emulator.core.hardware import UnknownGPUError, get_gpu
    from emulator.core.variants import GPUVariantError, variant_from_table
    from emulator.device.boot import DeviceBootError, boot

    try:
        if ns.gpu_spec:
            variant_from_table(json.loads(ns.gpu_spec), "--gpu-spec")
        spec = get_gpu(ns.gpu)
        policy = ("time" if ns.timing_only else "profile") if ns.profile else ("cpu" if spec.is_cpu else "emulate")
        if policy == "emulate":
            # a CUDA build of torch on a machine with GPUs must not touch them: hide them from the driver
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
            boot(ns.local_world_size, spec.capability)
    except (UnknownGPUError, GPUVariantError, DeviceBootError) as e:
        print(f"maya worker: {e}", file=sys.stderr)
        write_setup_failure(ns, f"maya: {e}")
        return Exit.PROGRAM_FAILED
    from emulator.capture.session import Session

    session = Session(ns, spec, policy)
    return session.run()


if __name__ == "__main__":
    sys.exit(main())
