"""One rank's capture session: install the fake device and process group, run the program, write results.

Kept apart from `emulator.launch.worker` (argument parsing, booting before `import torch`) because
everything here imports torch. `Session.run()` never loses what was recorded: the trace and the
per-rank summary are written in a `finally`, whatever the program did. How the rank ended:
OK; OOM when a torch.cuda.OutOfMemoryError ended it (OOMs the program caught and went on from are
only counted, `ooms_caught`); INTERRUPTED on Ctrl-C / SIGTERM (the worker turns SIGTERM into
KeyboardInterrupt); PROGRAM_FAILED otherwise.
"""

from __future__ import annotations

import runpy
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import torch

from emulator.capture import state
from emulator.capture.hostgap import HostGapPricing
from emulator.capture.recorder import Recorder, StopEmulation, UnsupportedOp
from emulator.core import hostspeed
from emulator.core.exitcodes import Exit
from emulator.core.hardware import GPUSpec
from emulator.core.routing import RoutingPolicy
from emulator.trace.io import write_rank_summary, write_rank_trace
from emulator.trace.summaries import RankSummary


class Session:
    def __init__(self, ns, spec: GPUSpec, policy: str):
        self.ns = ns
        self.spec = spec
        self.policy = policy  # emulate | cpu | profile | time (profile that records nothing but iterations)
        self.error: str | None = None
        self.ok = False
        self.stopped = False
        self.died_of_oom = False
        self.interrupted = False
        self.recorder = self._build()
        self.pricing = HostGapPricing(self.recorder, policy)

    def _build(self) -> Recorder:
        ns = self.ns
        memory = None
        stream_id = lambda: 0  # noqa: E731
        device_type = "cpu"
        if self.policy == "emulate":
            from emulator.device import cuda_shim
            from emulator.device.fake_mode import make_fake_mode
            from emulator.memory.accounting import DeviceMemory

            memory = DeviceMemory(self.spec.memory_bytes)
            device_type = "cuda"
            stream_id = cuda_shim.current_stream_id
        elif self.policy in ("profile", "time") and torch.cuda.is_available():
            device_type = "cuda"
            stream_id = lambda: int(torch.cuda.current_stream().stream_id)  # noqa: E731
        program = ns.script or getattr(ns, "module", None)
        program_dir = str(Path(ns.script).resolve().parent) if ns.script else str(Path.cwd())
        rec = Recorder(ns.rank, policy=self.policy, memory=memory, stream_id=stream_id,
                       max_iterations=ns.iterations, device_type=device_type,
                       allow_unsupported=bool(getattr(ns, "allow_unsupported", False)),
                       program_dir=program_dir if program else None)
        if self.policy == "emulate":
            rec.fake_mode = make_fake_mode(rec.note_placeholder)
            from emulator.capture import routing

            routing.install(RoutingPolicy.parse(getattr(ns, "routing", None)), rec.shadows.value,
                            rec.note_placeholder, rec.note_known_value, lambda: rec.iteration,
                            lambda: rec.current_module())
            cuda_shim.install(self.spec, ns.local_world_size, rec)
            cuda_shim.set_device(0)
            memory.install_resize_hook(stream_id)
            from emulator.capture import checkpoint, libraries, tensor_kinds

            checkpoint.install(rec, stream_id)
            libraries.install(rec.fake_mode)
            tensor_kinds.install()
            from emulator.capture import fastpath
            from emulator.device import boot

            fastpath.install(boot.device_functions())
        from emulator.distributed import fake_pg

        measuring = self.policy in ("profile", "time")
        fake_pg.install(ns.rank, ns.world_size, recorder=None if self.policy == "time" else rec, real=measuring)
        if not measuring:
            from emulator.distributed import objects

            rec.exchange = objects.install(ns.out, ns.rank)
            from emulator.distributed import pipelining

            pipelining.install()
        self._install_compile(rec)
        if self.policy == "emulate":
            _install_metadata_probe_guard(rec)
        state.set_recorder(rec)
        return rec

    def _install_compile(self, rec: Recorder) -> None:
        """torch.compile: Inductor's plan for the emulated GPU where it can be made (emulator.capture.compile,
        counted under `compiled`); otherwise say so instead of pretending.

        On the cpu target and under `maya profile` on a CPU, Inductor's C++ kernels for this CPU
        (`install_cpu`). Without Triton (or a C++ compiler for the CPU; or with MAYA_COMPILE=eager, or when
        profiling on a GPU) compiled functions run eagerly (unfused ops are recorded) and the summary counts
        the calls under `eager_fallbacks`, so a prediction for a compiled model is known to be pessimistic."""
        self.eager_fallbacks: Counter[str] = Counter()
        self.compiled: Counter[str] = Counter()
        from emulator.capture import compile as inductor

        if self.policy == "emulate":
            inductor.install_user_kernels(rec)  # the program's own Triton kernels, compiled or not
        if self.policy == "emulate" and inductor.available():
            inductor.install(rec, self.compiled)
            return
        if self.policy in ("cpu", "profile") and not torch.cuda.is_available() and not inductor.eager_asked():
            inductor.install_cpu(rec, self.compiled, self.eager_fallbacks)  # the cpu target, profiling on a CPU
            return
        original = torch.compile

        def eager_compile(model=None, *args, **kwargs):
            self.eager_fallbacks["torch.compile"] += 1
            if model is None:  # used as @torch.compile(...)
                return lambda fn: fn
            return model

        eager_compile.__wrapped__ = original
        torch.compile = eager_compile

    def _run_program(self) -> None:
        ns = self.ns
        if ns.script:
            script = str(Path(ns.script).resolve())
            sys.argv = [script, *ns.program_args]
            sys.path.insert(0, str(Path(script).parent))
            runpy.run_path(script, run_name="__main__")
        else:
            sys.argv = [ns.module, *ns.program_args]
            sys.path.insert(0, str(Path.cwd()))
            runpy.run_module(ns.module, run_name="__main__", alter_sys=True)

    def run(self) -> int:
        t0 = time.perf_counter()
        rec = self.recorder
        try:
            if self.policy == "emulate":  # this machine's host speed (rank 0's is the job's figure)
                self.host_speed = hostspeed.measure(**_HOST_SPEED_RUN)
                rec.host_speed_by_iteration.append(self.host_speed["s_per_op"])
            with rec:
                if self.policy in ("emulate", "cpu"):  # profiling measures; its gaps are not predictions
                    self.pricing.start()
                try:
                    self._run_program()
                except SystemExit as e:
                    code = e.code
                    if code not in (None, 0):
                        self.error = f"the program exited with status {code!r}"
                        raise _ProgramFailed() from None
            self.ok = True
        except StopEmulation:
            self.ok = self.stopped = True
        except _ProgramFailed:
            pass
        except KeyboardInterrupt:
            self.interrupted = True
            self.error = "interrupted (Ctrl-C / SIGTERM)"
        except UnsupportedOp as e:  # our own message (op, module, line), not a traceback through torch
            self.error = str(e)
        except BaseException as e:  # noqa: BLE001 - the program's own failure, reported verbatim
            self.error = _program_traceback()
            self.died_of_oom = isinstance(e, torch.cuda.OutOfMemoryError)
        finally:
            from emulator.distributed import fake_pg

            _hold_signals()
            fake_pg.shutdown()
            wall = time.perf_counter() - t0
            if self.ok and self.policy in ("emulate", "cpu"):
                try:
                    self.pricing.again_at_the_end()
                except Exception as e:  # noqa: BLE001 - the start prices stand; the trace is not lost
                    print(f"maya: host-gap prices not measured again at the end ({type(e).__name__}: {e})",
                          file=sys.stderr)
            if getattr(self, "host_speed", None) is not None:
                # and again at the end: the gaps span the whole run, and a shared machine's speed drifts
                self.host_speed = hostspeed.average([self.host_speed, hostspeed.measure(**_HOST_SPEED_RUN)])
            self._write(wall)
        if self.ok:
            return Exit.OK
        if self.interrupted:
            return Exit.INTERRUPTED
        return Exit.OOM if self.died_of_oom else Exit.PROGRAM_FAILED

    def _ooms_caught(self) -> int:
        """OOMs the program caught and went on from (the one that ended the rank, if any, is not)."""
        mem = self.recorder.memory
        return max(mem.ooms - int(self.died_of_oom), 0) if mem is not None else 0

    def _peaks(self) -> tuple[int, int]:
        mem = self.recorder.memory
        if mem is not None:
            return mem.peaks()
        if self.recorder.device_type == "cuda":  # profiling on a real GPU
            return int(torch.cuda.max_memory_allocated()), int(torch.cuda.max_memory_reserved())
        import resource

        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # host memory (cpu target)
        return peak, peak

    def _write(self, wall: float) -> None:
        from emulator.distributed import fake_pg

        rec, ns = self.recorder, self.ns
        rec.rows.drop_empty_ranges()  # NVTX ranges around host code only (see TraceRows.drop_empty_ranges)
        write_rank_trace(ns.out, ns.rank, rec.rows.to_table())
        peak_alloc, peak_res = self._peaks()
        mem = rec.memory
        write_rank_summary(ns.out, RankSummary(
            rank=ns.rank, ok=self.ok, error=self.error, oom=self.died_of_oom, ooms_caught=self._ooms_caught(),
            interrupted=self.interrupted, oom_message=mem.oom_message if mem is not None else None,
            mode=self.policy, gpu=self.spec.key,
            torch_version=torch.__version__, world_size=ns.world_size, local_world_size=ns.local_world_size,
            peak_allocated=peak_alloc, peak_reserved=peak_res, iterations=rec.steps,
            stopped_by_iterations=self.stopped, n_events=len(rec.rows),
            event_kinds=dict(Counter(rec.rows.cols["kind"])), work_hash=rec.rows.work_hash(),
            iteration_hashes=list(rec.iteration_hashes), groups=fake_pg.groups(),
            unsupported_ops=dict(rec.unsupported), placeholders=self._placeholders(),
            real_value_reads=rec.real_reads, eager_fallbacks=dict(self.eager_fallbacks),
            compiled=dict(self.compiled), wall_s=wall,
            iteration_wall_s=rec.iteration_wall_s, iteration_cpu_s=rec.iteration_cpu_s,
            host_gap_baseline_s=self.pricing.charged, host_gap_price_samples=self.pricing.samples,
            host_speed=getattr(self, "host_speed", None), host_speed_by_iteration=rec.host_speed_by_iteration,
            fast_path={"hits": rec.fast_hits, "signatures": len(rec._out_specs)},
            routing=RoutingPolicy.parse(getattr(ns, "routing", None)).spec if self.policy == "emulate" else None))

    def _placeholders(self) -> dict[str, int]:
        """The recorder's placeholder reads, and the device library's (`.item()` reached with Python
        dispatch off, e.g. `torch.tensor` of device scalars: see fake_cuda.cpp)."""
        out = dict(self.recorder.placeholders)
        if self.policy == "emulate":
            from emulator.device import boot

            functions = boot.device_functions()
            n = functions["scalar_placeholders"]() if functions and "scalar_placeholders" in functions else 0
            if n:
                out["item_in_cpp"] = int(n)
        return out


_HOST_SPEED_RUN = {"repeats": 3, "steps": 10}  # ~0.1 s each time rank 0 measures (hardware inventories take longer)


class _ProgramFailed(Exception):
    pass


def _hold_signals() -> None:
    """Once the program is over, a second Ctrl-C or the launcher's SIGTERM must not cut the writing of
    what was recorded short: both are ignored from here to the worker's exit."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _program_traceback() -> str:
    """The program's traceback without the emulator's own frames above it."""
    etype, value, tb = sys.exc_info()
    frames = traceback.extract_tb(tb)
    keep = [i for i, f in enumerate(frames) if "runpy" in f.filename]
    start = (keep[-1] + 1) if keep else 0
    while tb is not None and start > 0:
        tb, start = tb.tb_next, start - 1
    return "".join(traceback.format_exception(etype, value, tb))


def _install_metadata_probe_guard(rec) -> None:
    """DTensor learns output shapes by running the local op on throw-away fake tensors of the
    *global* shape. A real GPU never allocates those, so they must not be recorded or charged to
    the emulated allocator (an 8B model's global-shape optimizer states would 'OOM' at once)."""
    try:
        from torch.distributed.tensor._sharding_prop import ShardingPropagator
    except ImportError:
        return
    original = ShardingPropagator._propagate_tensor_meta_non_cached
    if getattr(original, "_maya_probe_guard", False):
        return

    def propagate(self, *args, **kwargs):
        rec.probing += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            rec.probing -= 1

    propagate._maya_probe_guard = True
    ShardingPropagator._propagate_tensor_meta_non_cached = propagate
