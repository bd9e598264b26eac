"""The recording dispatch mode: one trace row per device-side event of this rank.

Why a user TorchDispatchMode: it sits in front of everything (forward, the autograd engine's
backward threads, the optimizer, collectives) and sees each aten/c10d op exactly once, with the
same arguments a GPU kernel would get. It also implements the *selective fake* policy: an op
runs under the fake mode only when it touches the device; CPU work (rank maths, DeviceMesh's
`arange`, step counters, the data pipeline) runs for real and keeps its values. Wrapper
subclasses (DTensor, AsyncCollectiveTensor) are sent back with NotImplemented so they unwrap,
and the mode then records their local ops with local shard shapes.

Host gaps (`host_clock: "process_cpu"` in the per-rank summary): the host time between the end
of the previous device event and the start of this one, measured in *process CPU time*
(`time.process_time`). Why CPU time: wall time on a shared machine counts other processes'
load (5-10x inflated gaps on a busy 2-core box); process CPU time counts only what this
program did. Why the process clock and not a per-thread one: autograd runs backward on its own
thread, so the program's host work moves between threads. The emulator's own CPU time is
excluded: an event's fake kernel and bookkeeping run between its start and end stamps, and
unrecorded work (view ops, allocator frees, module hooks) is added to `_overhead` and
subtracted from the next gap. Other threads of the program that burn CPU while the main one
waits (e.g. busy data-loader threads) are counted; a real host would spend that time too.

Speed: a repeated op signature (same op, input metadata and arguments) takes the fast path of
`emulator.capture.fastpath`: its fake outputs and every derived row field come from a cache.

Modes (`Recorder.policy`):
    "emulate"  fake CUDA device, ops on it run as fake tensors (the target GPU);
    "cpu"      no fake device; every CPU op runs for real and is recorded (the `cpu` target);
    "profile"  like "cpu" (or a real CUDA device) and every kernel row gets a measured duration_s.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
import traceback
from collections import Counter

import torch
from torch._ops import HigherOrderOperator
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode, _push_mode

from emulator.capture import fastpath, routing, signature, tensor_kinds
from emulator.capture.modules import ModuleStack
from emulator.capture.shadows import VALUE_SOURCES, Shadows
from emulator.capture.trace_rows import TraceRows
from emulator.core.ops import (
    HOST_DEVICE_COPY_OPS,
    canonical_op,
    collective_name,
    dtype_bytes,
    flops_and_bytes,
    is_view_op,
)
from emulator.device.fake_mode import is_wrapper_subclass
from emulator.distributed import fake_pg
from emulator.distributed.collectives import CollectiveCounter
from emulator.distributed.objects import relative_name
from emulator.memory.allocator import PRIVATE_POOL_STREAMS  # a CUDA graph's pool is a stream from here on

# a compiled region wrapped as one op (torch 2.13 has it; see Recorder._run_compiled_region)
_INDUCTOR_COMPILED_CODE = getattr(getattr(torch._higher_order_ops, "wrap", None), "inductor_compiled_code", None)
_NOT_FAKEABLE = (UnsupportedOperatorException, DynamicOutputShapeException, DataDependentOutputException,
                 NotImplementedError)
_PRIM_DEVICE = torch.ops.prim.device.default
_LOCAL_SCALAR = torch.ops.aten._local_scalar_dense.default
# A barrier is a collective the job blocks on whatever its token tensor's device (torch makes a CPU one
# for a fake group, NCCL a device one): always recorded.
_BARRIER = "c10d::barrier"

# launches nothing; tells the caching allocator to hold a block for a stream, which the allocator
# model does not do. FakeTensorMode has no rule for it (its Stream argument), so it stops here
# (DeepSpeed ZeRO-3 frees parameters with `param.data.record_stream(stream)`)
_RECORD_STREAM = torch.ops.aten.record_stream.default
_BINCOUNT = torch.ops.aten.bincount.default
_TOPK = torch.ops.aten.topk.default
_HISTC = torch.ops.aten.histc.default
_clock = time.process_time  # host-gap clock, see the module docstring
HOST_SPEED_PROBE = {"repeats": 2, "steps": 3}  # a few tens of ms between two iterations
_MISS = object()


class StopEmulation(BaseException):
    """Raised at the K-th optimizer step return under `--iterations K` (BaseException: scripts'
    `except Exception` must not swallow it)."""


class UnsupportedOp(BaseException):
    """An op the emulator cannot size or run (no fake kernel): the run stops with a message naming it, its
    module and the line of the program that called it, unless `--allow-unsupported` (BaseException: a
    script's `except Exception` must not swallow it and carry on with a made-up output)."""


class Recorder(TorchDispatchMode):
    """Records device events of one rank; see the module docstring for the policies."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._dynamo's `disable`, a
        # Python wrapper that costs ~10 us per dispatch (several dispatches per recorded op). Dynamo
        # never traces under this mode (emulator.capture.compile turns it off first), so it only costs.
        return False

    # FlexAttention and other higher-order ops come through __torch_dispatch__ (see _record_higher_order)
    supports_higher_order_operators = True

    def __init__(self, rank: int, policy: str = "emulate", fake_mode=None, memory=None, stream_id=lambda: 0,
                 max_iterations: int | None = None, device_type: str = "cuda", allow_unsupported: bool = False,
                 program_dir: str | None = None):
        super().__init__()
        # an op without a fake kernel: stop naming it (default) or record a best guess (--allow-unsupported)
        self.allow_unsupported = allow_unsupported
        self.program_dir = program_dir  # the user's program, for the line that called an unsupported op
        self.rank = rank
        self.policy = policy
        self.fake_mode = fake_mode
        self.memory = memory
        self.stream_id = stream_id
        self.device_type = device_type
        self.max_iterations = max_iterations
        self.rows = TraceRows(rank)
        self.iteration = -1
        self.steps = 0
        self.in_optimizer = 0
        self.unsupported: Counter[str] = Counter()
        self.placeholders: Counter[str] = Counter()
        self.collectives = CollectiveCounter()
        # id(Work) -> (Work, (group, coll_seq, peer, op), row, iteration) of c10d collectives and p2p ops not
        # waited yet; the Work is held so that the id stays its own (see wait_collective)
        self.open_works: dict[int, tuple] = {}
        # storage of a functional collective's output -> (group, coll_seq, op), for its wait_tensor
        self.tensor_coll: dict[int, tuple[str, int, str]] = {}
        self.tracker = ModuleStack()
        self._placeholder_now = False
        self._unsupported_now = False
        self.iteration_hashes: list[str] = []  # the work hash at the end of each iteration
        self.iteration_wall_s: list[float] = []  # emulation speed: wall and CPU seconds per iteration
        self.iteration_cpu_s: list[float] = []
        self._iter_start = (time.perf_counter(), time.process_time())
        self._t_last = _clock()
        self._overhead = 0.0  # emulator CPU time since the last recorded event (excluded from host gaps)
        # per-call cost of reaching the recorder that cannot be timed from inside it (torch's C++ -> Python
        # crossing, fake-tensor subclass handling, the autograd engine's hand-off to the fake device);
        # measured once per run by Session.calibrate_host_gap, separately for calls on the program's
        # thread and on autograd's backward thread, and subtracted
        self.gap_baseline = 0.0
        self.gap_baseline_backward = 0.0
        # every entry into this mode crosses from torch's C++ into Python and back (argument and result
        # conversion, the mode stack, the device queries around it): emulator cost outside any timed
        # window, paid for unrecorded calls too (views, detach for saved tensors). C++ asking a fake
        # tensor for its device is such a crossing too (~8 per recorded op). Both counted here, priced
        # by Session.calibrate_host_gap
        self.crossings = 0
        self.crossing_cost = 0.0
        self._emulator_code_since = None  # see emulator_code_until_next_event
        self.device_queries = 0
        self.device_query_cost = 0.0
        # the module tracker's global hooks send every nn.Module call down torch's slow call path; the
        # hooks' bodies are timed (ModuleStack.overhead_s), the path around them is priced per call
        self.module_call_cost = 0.0
        # what each gap was before those prices, so the run can be re-priced at its end (`reprice`):
        # (row index, unpriced gap, extra crossings, device queries, module calls, on the backward thread)
        self.gap_parts: list[tuple[int, float, int, int, int, bool]] = []
        self.probing = 0  # > 0 inside library code that runs ops only to learn output metadata
        # MAYA_EMULATOR_FASTPATH=0 turns the signature cache and the collective shortcuts off (tests compare
        # both paths' traces); the process group reads it as `shortcuts`
        self._fast = policy == "emulate" and os.environ.get("MAYA_EMULATOR_FASTPATH", "1") != "0"
        self.fast_hits = 0
        self._out_specs: dict = {}  # call key -> fastpath output spec (None: uncacheable)
        self._row_cache: dict = {}  # call key -> the row fields a repeated call reproduces
        self._noted = 0  # placeholders + unsupported ops seen; a call that adds one is not cached
        # id(OpOverload) -> _learn_op's answer (an OpOverload hashes in Python; operators live as long as torch)
        self._op_info: dict = {}
        self._work_kernels: dict = {}  # id(OpOverload) -> its work-only Meta kernel, or None (`_run`)
        self._lock = threading.RLock()
        # real values of small device tensors whose data came from the host (read by .item() and friends)
        self.shadows = Shadows(self.note_placeholder) if policy == "emulate" else None
        self.real_reads = 0  # device scalars read with their real value (see emulator.capture.shadows)
        # emulator.distributed.objects' exchange between the ranks of this emulation (set by the session):
        # host-known values of a broadcast travel through it (see _share_broadcast)
        self.exchange = None
        self._capture = None  # the trace checkpoint where a CUDA graph capture began
        self._alloc_stream = None  # during a capture: the graph's memory pool (see begin_capture)
        self.graph_replays = 0
        self._measure = policy == "profile"
        self._probing_host = False
        # s_per_op of the host-speed workload measured at the start and after each iteration (emulate only)
        self.host_speed_by_iteration: list[float] = []
        self._cuda_timing = self._measure and device_type == "cuda"

    # ------------------------------------------------------------------ context
    def __enter__(self):
        if self.policy == "time":  # iteration boundaries only: no dispatch mode, no module hooks
            self._hooks = [register_optimizer_step_pre_hook(self._step_pre),
                           register_optimizer_step_post_hook(self._step_post)]
            self._iter_start = (time.perf_counter(), time.process_time())
            return self
        self.tracker.__enter__()
        if self.policy == "emulate":
            torch._C._set_only_lift_cpu_tensors(True)
        self._hooks = [register_optimizer_step_pre_hook(self._step_pre),
                       register_optimizer_step_post_hook(self._step_post)]
        self._t_last = _clock()
        return super().__enter__()

    def __exit__(self, *exc):
        if self.policy == "time":
            for h in self._hooks:
                h.remove()
            return False
        out = super().__exit__(*exc)
        for h in self._hooks:
            h.remove()
        if self.policy == "emulate":
            torch._C._set_only_lift_cpu_tensors(False)
        self.tracker.__exit__(*exc)
        return out

    # ------------------------------------------------------------------ iterations
    def _step_pre(self, optimizer, args, kwargs) -> None:
        if not self._probing_host:
            self.in_optimizer += 1

    def _step_post(self, optimizer, args, kwargs) -> None:
        if self._probing_host:  # the host-speed probe's own optimizer
            return
        self.in_optimizer = max(self.in_optimizer - 1, 0)
        if self.in_optimizer == 0:
            self.next_iteration()

    @contextlib.contextmanager
    def own_work(self):
        """The block's CPU time is the emulator's (Python standing in for what a GPU run does not do): it is
        subtracted from the next host gap, like the recorder's own bookkeeping."""
        t0 = _clock()
        try:
            yield
        finally:
            self._overhead += _clock() - t0

    def probe_host_speed(self) -> None:
        """Time the host-speed workload (emulator.core.hostspeed) here, between two iterations: outside the
        recording mode and the module attribution, its CPU time the emulator's, not the program's. Each
        iteration's host gaps are then read against the machine's speed next to them
        (`host_speed_by_iteration`: this VM's speed drifts within a run)."""
        from torch.utils._python_dispatch import _disable_current_modes

        from emulator.core import hostspeed

        t0 = _clock()
        self._probing_host = True
        try:
            with _disable_current_modes(), self.tracker.paused():
                self.host_speed_by_iteration.append(hostspeed.measure(**HOST_SPEED_PROBE)["s_per_op"])
        finally:
            self._probing_host = False
            self._overhead += _clock() - t0

    def next_iteration(self) -> None:
        """An iteration ended (optimizer step returned, or `emulator.mark_iteration()`)."""
        self.steps += 1
        self.iteration += 1
        self.iteration_hashes.append(self.rows.work_hash())
        self.tracker.forget_nodes()
        # Works the program never waited for (torch's C++ waits for some) are dropped after a whole iteration
        self.open_works = {k: v for k, v in self.open_works.items() if v[3] >= self.iteration - 1}
        now, cpu = time.perf_counter(), time.process_time()
        self.iteration_wall_s.append(now - self._iter_start[0])
        self.iteration_cpu_s.append(cpu - self._iter_start[1])
        if self.policy == "emulate":
            self.probe_host_speed()
        self._iter_start = (time.perf_counter(), time.process_time())
        _report_progress(self.steps)
        if self.max_iterations is not None and self.steps >= self.max_iterations:
            raise StopEmulation(f"stopped after {self.steps} iterations (--iterations)")

    # ------------------------------------------------------------------ attribution
    def _module_phase(self) -> tuple[str, str]:
        backward = torch._C._current_graph_task_id() != -1
        module = self.tracker.current(backward)
        if backward:
            return module, "backward"
        if self.in_optimizer:
            return module, "optimizer"
        return module, ("forward" if module else "other")

    def current_module(self) -> str | None:
        """The module running now (its qualified name), in forward or in backward's recompute."""
        return self._module_phase()[0] or None

    def note_known_value(self) -> None:
        """A data-dependent size came from values known on the host (emulator.capture.routing)."""
        self.real_reads += 1
        self._noted += 1  # not cached: another call with the same metadata may hold other values

    def note_placeholder(self, kind: str) -> None:
        self.placeholders[kind] += 1
        self._placeholder_now = True
        self._noted += 1

    # ------------------------------------------------------------------ non-op events (streams, events, markers)
    def sync_event(self, kind: str, op: str, stream: int, event_id: int | None = None,
                   args: dict | None = None, **coll) -> None:
        t0 = _clock()
        with self._lock:
            module, phase = self._module_phase()
            self.rows.add(kind=kind, op=op, stream=stream, iteration=self.iteration, module=module,
                          phase=phase, args=json.dumps(args or {}), event_id=event_id,
                          host_gap_s=self._gap(t0), mem=self._mem(), **coll)
            self._t_last = _clock()

    def memory_stats(self) -> dict:
        return self.memory.stats() if self.memory is not None else {}

    def reset_peak(self) -> None:
        if self.memory is not None:
            self.memory.reset_peak()

    def empty_cache(self) -> None:
        if self.memory is not None:
            self.memory.empty_cache()

    def _mem(self) -> tuple[int | None, int | None]:
        if self.memory is None:
            if self._cuda_timing:  # profiling on a real GPU: its own allocator's numbers
                return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
            return None, None
        return self.memory.figures()

    def wait_collective(self, work, op: str = "c10d::wait", internal: bool = False) -> None:
        """`Work.wait()` on a c10d collective: the issuing stream waits for it (an event_wait row).

        Matched by identity: the recorder keeps the Work each c10d op returned, and pybind hands
        the program that same Python object, so `work` names its collective exactly (torch's C++
        waits for some Works, e.g. DDP's start-up broadcasts, so matching by order drifts). torch's
        blocking collectives call `work.wait()` themselves right after issuing (`internal`); any
        other wait means the program issued it with async_op=True, and its row is marked so.
        A Work the recorder never saw (not from a recorded op) records nothing."""
        with self._lock:
            entry = self.open_works.pop(id(work), None)
            if entry is None:
                return
            _, key, row, _ = entry
            if not internal:
                self.rows.cols["async_op"][row] = True
            self.sync_event("event_wait", op, self.stream_id(), waits_for=key[3], group=key[0], coll_seq=key[1],
                            peer=key[2])

    def _open_work(self, out, key: tuple, row: int) -> None:
        """Keep the Work a c10d op returned (its output's last ScriptObject) for wait_collective."""
        boxed = out[-1] if isinstance(out, (tuple, list)) and out else out
        if not isinstance(boxed, torch.ScriptObject):
            return
        try:
            work = torch.distributed.Work.unbox(boxed)
        except (RuntimeError, TypeError, AttributeError):
            return
        self.open_works[id(work)] = (work, key, row, self.iteration)

    # ------------------------------------------------------------------ ops
    def _touches_device(self, flat: list, kwargs: dict) -> bool:
        for x in flat:
            if isinstance(x, FakeTensor):
                return True
        dev = kwargs.get("device")
        if dev is not None:
            return torch.device(dev).type == "cuda"
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _PRIM_DEVICE and isinstance(args[0], FakeTensor):
            # C++ asks a fake tensor for its device ~8 times per recorded op; a real tensor answers in
            # C++. The hottest path of the emulator: counted, not timed (priced by calibration).
            self.device_queries += 1
            return args[0].fake_device
        try:
            return self._dispatch(func, args, kwargs)
        except torch.cuda.OutOfMemoryError as e:
            # The exception's traceback holds the recorder's frames, and they hold the op's inputs and
            # outputs: a program that catches the OOM and `del`s its tensors would not free them (on a GPU
            # the C++ frames are gone). Clear those frames and raise a fresh error from here.
            message = str(e)
            traceback.clear_frames(e.__traceback__)
        del args, kwargs
        raise torch.cuda.OutOfMemoryError(message) from None

    def _dispatch(self, func, args, kwargs):
        self.crossings += 1
        if func is _RECORD_STREAM:
            return None
        if func is _LOCAL_SCALAR and type(args[0]) is torch.Tensor and not args[0].is_cuda:
            return func(*args)  # `.item()` of a host tensor (an optimizer's step count): no device event
        t_enter = _clock()
        kwargs = kwargs or {}
        info = self._op_info.get(id(func))
        if info is None:
            info = self._op_info[id(func)] = self._learn_op(func)
        op, keyable, any_float, view = info
        if op is None:
            return self._record_higher_order(func, args, kwargs, t_enter)
        if self.probing:
            # metadata probes (DTensor's sharding propagation): no device work, no device memory
            self._forget_signatures(args, kwargs)
            with self.fake_mode:
                return func(*args, **kwargs)
        keyed = fastpath.call_key(func, args, kwargs, any_float) if keyable else None
        if view and keyed is not None and keyed[1]:
            spec = self._out_specs.get(keyed[0])
            if spec is not None:  # a view seen before: the cheapest and most frequent call of all
                self.fast_hits += 1
                new: list = []
                out = fastpath.rebuild(spec, keyed[1], self.fake_mode, new)
                if new and self.memory is not None:
                    self._see_outputs(out, new)
                self._overhead += _clock() - t_enter  # emulator time, not the program's host time
                return out
        if keyed is None or not keyed[1]:
            # a keyed call with fake tensors has no wrapper subclass and is on the device by construction
            flat = _flatten(args) + list(kwargs.values())
            for x in flat:
                if is_wrapper_subclass(x):
                    return NotImplemented
            if self.policy == "emulate" and not self._touches_device(flat, kwargs) and op != _BARRIER:
                return func(*args, **kwargs)
        if op == "aten::_local_scalar_dense":
            if args and isinstance(args[0], torch.Tensor) and args[0].device.type != "cuda":
                # reading a host value: no device event. A fake host tensor (a device tensor's
                # `.cpu()`) reads the value its data came with, as `_scalar_read` does (DeepSpeed
                # ZeRO-3 checks module order across ranks with `t.cpu().item()` of a broadcast)
                known = self.shadows.value(args[0]) if self.shadows is not None \
                    and isinstance(args[0], FakeTensor) else None
                if known is not None:
                    self.real_reads += 1
                    return known.item()
                return func(*args, **kwargs)
            return self._scalar_read(func, args, kwargs, t_enter)
        if op == "_c10d_functional::_wrap_tensor_autograd":
            # Its real kernel wraps the collective's output in an AsyncCollectiveTensor whose first
            # use waits (wait_tensor); the fake kernel would drop the wrapper and with it the wait.
            from torch.distributed._functional_collectives import AsyncCollectiveTensor

            return AsyncCollectiveTensor(args[0])
        if view:
            out = self._run(func, args, kwargs, op, record=False, keyed=keyed)
            self._overhead += _clock() - t_enter  # emulator time, not the program's host time
            return out
        with self._lock:
            return self._record_op(func, args, kwargs, op, t_enter, keyed)

    def _learn_op(self, func) -> tuple[str | None, bool, bool, bool]:
        """What the dispatch needs to know of an operator, once: (canonical name, None for a higher-order
        op; takes the signature cache; float values left out of its key; records no row)."""
        if isinstance(func, HigherOrderOperator):
            return None, False, False, False
        op = canonical_op(func.name())
        # only aten/prims ops take the fast path: their fake kernels are pure functions of metadata
        # (c10d and custom ops may have side effects in their fake implementations)
        keyable = self._fast and op.startswith(("aten::", "prims::"))
        return op, keyable, op.startswith("aten::_foreach_"), is_view_op(op) or op == "prim::device"

    def _run(self, func, args, kwargs, op, record=True, keyed=None):
        if keyed is not None:
            out, new = self._run_cached(func, args, kwargs, op, keyed)
            if not record and self.memory is not None:
                self._see_outputs(out, new)
            return out
        if self.policy == "emulate":
            out = self._work_only_call(func, args, kwargs)
            if out is None:
                out = self._fake_call(func, args, kwargs, op)
        else:
            out = func(*args, **kwargs)
        if not record and self.memory is not None:
            self._see_outputs(out)
        return out

    @property
    def shortcuts(self) -> bool:
        """Whether the emulator's exact-trace shortcuts are on (the signature cache, `_work_only_call`,
        `emulator.distributed.coalesced`)."""
        return self._fast

    def _work_only_call(self, func, args, kwargs):
        """A c10d collective whose Meta kernel only makes a FakeWork, called directly; None for any other call.

        Why: through FakeTensorMode such a call costs ~0.7 ms here (its cache refuses process-group
        arguments, then the generic output handling), and a tensor-parallel rank issues thousands per
        step. The kernel (`emulator.distributed.fake_pg.work_only_kernel`) writes nothing and returns its
        first argument and the work, or the work: what FakeTensorMode returns for it, the inputs' own
        tensors included, so nothing about them changes and their cached signatures stay valid."""
        if not self._fast or kwargs:
            return None
        kernel = self._work_kernels.get(id(func), _MISS)
        if kernel is _MISS:
            kernel = self._work_kernels[id(func)] = fake_pg.work_only_kernel(func)
        if kernel is None or not args or not all(type(t) is FakeTensor for t in _flatten(args[:1])):
            return None
        return kernel(*args)

    def _fake_call(self, func, args, kwargs, op):
        """Run the op's fake kernel; an op without one gets a best-guess output and is listed as unsupported."""
        self._forget_signatures(args, kwargs)
        with self.fake_mode:
            try:
                return func(*args, **kwargs)
            except _NOT_FAKEABLE as e:
                err = e
            except RuntimeError as e:
                if not _missing_kernel(e):
                    raise
                err = e
            done, out = _via_functional(func, args, kwargs)
            return out if done else self._best_guess(func, args, kwargs, op, err)

    @staticmethod
    def _forget_signatures(args, kwargs) -> None:
        """Before a fake kernel runs: its inputs' cached signatures may not survive it (an op may change
        their metadata), and inside it they must say "meta" when C++ asks their device (see
        `fastpath.install`)."""
        fastpath.forget_signatures(args)
        if kwargs:
            fastpath.forget_signatures(kwargs.values())

    def _run_cached(self, func, args, kwargs, op, keyed):
        """(output, its fresh-storage tensors or None if unknown) from the signature cache; a miss runs
        the fake kernel and learns how to rebuild its output."""
        key, inputs = keyed
        spec = self._out_specs.get(key, _MISS)
        if spec is not _MISS and spec is not None:
            self.fast_hits += 1
            new: list = []
            return fastpath.rebuild(spec, inputs, self.fake_mode, new), new
        noted = self._noted
        out = self._fake_call(func, args, kwargs, op)
        if spec is _MISS:
            try:
                if self._noted != noted or not fastpath.same_inputs(key, func, args, kwargs,
                                                                    op.startswith("aten::_foreach_")):
                    raise fastpath.Uncacheable
                spec = fastpath.output_spec(out, inputs)
            except fastpath.Uncacheable:
                spec = None
            self._out_specs[key] = spec
        return out, None

    def _derive_values(self, func, args, kwargs, out, kind: str, keyed=None) -> None:
        """Keep real values flowing from host data (a copy to the device, ops on such tensors)."""
        if self.shadows is not None and (self.shadows.storages or kind == "memcpy" or id(func) in VALUE_SOURCES):
            self.shadows.after(func, args, kwargs, out, keyed[1] if keyed is not None and keyed[1] else None,
                               resolve=kind == "memcpy")
        if func is _TOPK and self.shadows is not None:
            routing.topk_values(self.shadows, args, kwargs, out)
        elif func is _BINCOUNT and self.shadows is not None:
            routing.bincount_values(self.shadows, args, kwargs, out)
        elif func is _HISTC and self.shadows is not None:
            routing.histc_values(self.shadows, args, kwargs, out)

    def _host_copy_with_values(self, out):
        """A copy to the host of device data whose values are known (they came from the host, see
        `emulator.capture.shadows`) is a real CPU tensor holding them, as on a GPU: library code hands
        such copies to C++ that reads their memory (Accelerate broadcasts the data loader's generator
        state and calls `generator.set_state(state.cpu())`). Copies of unknown values stay fake."""
        if type(out) is not FakeTensor or self.shadows is None or out.fake_device.type != "cpu":
            return out
        known = self.shadows.value(out)
        if known is None:
            return out
        real = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype)
        real.copy_(known)
        self.real_reads += 1
        return real

    def _see_outputs(self, out, new: list | None = None) -> None:
        """Account for the outputs' device storages; `new`: just the fresh ones with their sizes, when the
        fast path knows (`fastpath.rebuild`)."""
        if new is not None:
            if new:
                stream = self.stream_id() if self._alloc_stream is None else self._alloc_stream
                for t, nbytes in new:
                    if nbytes is not None:  # None: a fake host tensor
                        self.memory.see_fresh(t, nbytes, stream)
            return
        stream = self.stream_id() if self._alloc_stream is None else self._alloc_stream
        for t in signature.outputs(out)[2]:
            if t.device.type == "cuda" and not is_wrapper_subclass(t):
                self.memory.see(t, stream)

    def _best_guess(self, func, args, kwargs, op, err):
        """No fake kernel: stop with a message naming the op, its module and the program's line; with
        `allow_unsupported`, list the op as unsupported and return an empty output of a plausible shape
        (its row is flagged `unsupported` and timed by the roofline)."""
        if not self.allow_unsupported:
            raise UnsupportedOp(self._unsupported_message(op, err, "the emulator cannot size or run it")) from None
        self.unsupported[op] += 1
        self._unsupported_now = True
        self._noted += 1
        tensors = [x for x in _flatten(args) if isinstance(x, torch.Tensor)]
        returns = func._schema.returns
        if func._schema.is_mutable and tensors:
            return tensors[0]
        if len(returns) == 1 and str(returns[0].type) == "Tensor" and tensors:
            return torch.empty_like(tensors[0])
        if returns and all(str(r.type) == "Tensor" for r in returns) and tensors:
            return tuple(torch.empty_like(tensors[0]) for _ in returns)
        raise UnsupportedOp(self._unsupported_message(op, err, "its output shape cannot be guessed either")) from None

    def _unsupported_message(self, op: str, err: BaseException, why: str) -> str:
        module, phase = self._module_phase()
        where = f"module {module}" if module else "no module"
        if phase == "backward":
            where = f"the backward of {where}"
        line = _program_line(self.program_dir)
        hint = ("; run with --allow-unsupported to record it with a best-guess output and a roofline duration"
                if not self.allow_unsupported else "")
        detail = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        return (f"maya: {op} has no fake (meta) kernel, so {why}: called in {where}"
                f"{f', at {line}' if line else ''} ({type(err).__name__}: {detail}){hint}")

    def emulator_code_until_next_event(self) -> None:
        """The host time from now to the next recorded event is the emulator's, not the program's
        (Python that stands in for C++ a real run would execute, e.g. DDP's all-reduce hook)."""
        self._emulator_code_since = _clock()

    def _gap(self, t_enter: float) -> float:
        """Host CPU time since the last event, less the emulator's own unrecorded work in between."""
        if self._emulator_code_since is not None:
            self._overhead += max(t_enter - self._emulator_code_since, 0.0)
            self._emulator_code_since = None
        own = self._overhead + self.tracker.overhead_s
        self._overhead = self.tracker.overhead_s = 0.0
        if self.memory is not None:
            own += self.memory.overhead_s
            self.memory.overhead_s = 0.0
        in_backward = torch._C._current_graph_task_id() != -1
        # the baseline prices this call's own crossing; the unrecorded ones since the last event are extra
        extra, queries, modules = max(self.crossings - 1, 0), self.device_queries, self.tracker.calls
        self.crossings = self.device_queries = self.tracker.calls = 0
        unpriced = t_enter - self._t_last - own
        self.gap_parts.append((len(self.rows), unpriced, extra, queries, modules, in_backward))
        return self._priced(unpriced, extra, queries, modules, in_backward)

    def _priced(self, unpriced: float, extra: int, queries: int, modules: int, backward: bool) -> float:
        """A gap less the priced emulator work counted in it (never below zero)."""
        baseline = self.gap_baseline_backward if backward else self.gap_baseline
        return max(unpriced - extra * self.crossing_cost - queries * self.device_query_cost
                   - modules * self.module_call_cost - baseline, 0.0)

    def prices(self) -> dict:
        """The per-call prices of the emulator's own cost that gaps are charged (seconds)."""
        return {"device_query": self.device_query_cost, "crossing": self.crossing_cost,
                "module_call": self.module_call_cost,
                "forward": self.gap_baseline, "backward": self.gap_baseline_backward}

    def set_prices(self, prices: dict) -> None:
        self.device_query_cost, self.crossing_cost = prices["device_query"], prices["crossing"]
        self.module_call_cost = prices["module_call"]
        self.gap_baseline, self.gap_baseline_backward = prices["forward"], prices["backward"]

    def reprice(self) -> None:
        """Recompute every recorded gap with the current prices (a row's last `_gap` call wins: an
        event that failed before its row was added left an entry the next one overwrites)."""
        gaps = self.rows.cols["host_gap_s"]
        n = len(gaps)
        for row, *parts in self.gap_parts:
            if row < n:
                gaps[row] = self._priced(*parts)

    def _record_cached(self, row, func, args, kwargs, op, keyed, gap):
        """A repeated signature: the same row fields as its first call, fresh outputs, live bookkeeping.

        `_foreach_*` rows are keyed without their float values (an optimizer's bias corrections
        change every step): their args JSON and hash contribution are rebuilt from this call's
        scalars (the work hash leaves numeric scalars out, so its contribution is the cached one),
        everything per tensor comes from the cache."""
        kind, op, shapes, dtypes, strides, jargs, out_shapes, out_dtypes, flops, nbytes, blocking, hash_part = row
        if jargs is None:
            jargs = json.dumps(signature.describe_call(func, args, kwargs, tensors=False)[4], default=str)
        stream = self.stream_id()
        out, new = self._run_cached(func, args, kwargs, op, keyed)
        self._derive_values(func, args, kwargs, out, kind, keyed)
        if kind == "memcpy":
            out = self._host_copy_with_values(out)
        oom = None
        if self.memory is not None:
            try:
                self._see_outputs(out, new)
            except torch.cuda.OutOfMemoryError as e:
                oom = e
        module, phase = self._module_phase()
        if oom is not None:
            self._out_of_memory_row(op, stream, module, phase, gap)
            raise oom
        self.rows.add_repeat(kind, op, shapes, dtypes, strides, jargs, out_shapes, out_dtypes, flops, nbytes, blocking,
                             hash_part, stream, self.iteration, module, phase, gap, self._mem())
        self._t_last = _clock()
        return out

    def _out_of_memory_row(self, op: str, stream: int, module: str, phase: str, gap: float) -> None:
        """An op whose outputs did not fit never runs on the GPU: a marker row where it was (its host gap
        kept) instead of a kernel, so a program that catches the OOM and goes on is not charged for it."""
        self.rows.add(kind="marker", op="maya::out_of_memory", stream=stream, iteration=self.iteration,
                      module=module, phase=phase, args=json.dumps({"op": op}), host_gap_s=gap, mem=self._mem())
        self._t_last = _clock()

    # ------------------------------------------------------------------ CUDA graphs (cuda_shim.FakeCUDAGraph)
    def begin_capture(self, graph_id: int, pool: int) -> None:
        """A capture begins: what it records goes to the graph; what it allocates comes from `pool`.

        The graph's private memory pool is a pseudo-stream of the caching allocator: the allocator
        reuses a block only on its own stream, so blocks freed inside the capture stay reserved for
        the graph (and graphs sharing a pool), as CUDA's private pools do, and are never handed to
        allocations outside it."""
        with self._lock:
            self._capture = self.rows.checkpoint()
            self._alloc_stream = PRIVATE_POOL_STREAMS + pool

    def end_capture(self, graph_id: int, capture_stream: int) -> list[dict]:
        """The rows of a capture leave the trace (a capture launches nothing) and go to the graph."""
        with self._lock:
            point = self._capture
            self._capture = self._alloc_stream = None
            cols = self.rows.cols
            names = [c for c in cols if c not in ("rank", "seq")]
            captured = [{c: cols[c][i] for c in names} for i in range(point[0], len(self.rows))]
            self.rows.rollback(point)
            # their gaps must not be re-priced onto the rows that take their places (`reprice`)
            self.gap_parts = [part for part in self.gap_parts if part[0] < point[0]]
        self.sync_event("marker", "cuda::graph_capture", capture_stream,
                        args={"graph": graph_id, "rows": len(captured)})
        return captured

    def replay_capture(self, graph_id: int, rows: list[dict], capture_stream: int) -> None:
        """One replay: the captured rows again, launched by one host call (`graph_replay`, the simulator
        charges one launch), on the stream current now (rows captured on another stream keep it), in
        this iteration and phase. Collectives and p2p ops get fresh sequence numbers (each replay issues
        them anew) and the waits inside the graph follow them."""
        t0 = _clock()
        with self._lock:
            gap = self._gap(t0)
            stream = self.stream_id()
            module, phase = self._module_phase()
            self.graph_replays += 1
            renumbered: dict[tuple, int] = {}
            for i, r in enumerate(rows):
                row = dict(r)
                mem = (row.pop("mem_allocated"), row.pop("mem_reserved"))
                if row["kind"] in ("collective", "p2p") and row["coll_seq"] is not None:
                    name = collective_name(row["op"])
                    key = f"{row['group']}|{name}|{row['peer']}" if row["kind"] == "p2p" else row["group"]
                    old, row["coll_seq"] = row["coll_seq"], self.collectives.next(key)
                    renumbered[(row["group"], name if row["kind"] == "p2p" else None, row["peer"], old)] = \
                        row["coll_seq"]
                elif row["kind"] == "event_wait" and row["coll_seq"] is not None:
                    name = collective_name(row["waits_for"]) if row["waits_for"] else None
                    p2p = name in ("send", "recv")
                    row["coll_seq"] = renumbered.get((row["group"], name if p2p else None,
                                                      row["peer"] if p2p else None, row["coll_seq"]), row["coll_seq"])
                row.update(iteration=self.iteration, phase=phase, module=row["module"] or module,
                           stream=stream if row["stream"] == capture_stream else row["stream"],
                           host_gap_s=gap if i == 0 else 0.0, graph_replay=self.graph_replays)
                self.rows.add(mem=mem, **row)
            self._t_last = _clock()

    def record_launch(self, op: str, tensors: list, args: dict, flops: float | None = None,
                      nbytes: float | None = None, writes: bool = False, extra_bytes: float = 0.0,
                      run=None):
        """A kernel launched outside the dispatcher (a compiled graph's Triton kernel, a program's own Triton
        kernel, a C++ kernel Inductor built for this CPU: emulator.capture.compile): one kernel row over its
        tensor arguments; `nbytes` unknown: their sizes (an upper bound); `extra_bytes` the traffic either
        leaves out (a looped reduction's repeated passes). `writes`: the kernel may write any of them, so their
        host values are dropped. `run`: the kernel itself, run here (on the CPU), its time kept out of the
        host gaps and, under `maya profile`, the row's measured duration; returns what it returns."""
        t0 = _clock()
        with self._lock:
            if writes and self.shadows is not None:
                for t in tensors:
                    if isinstance(t, FakeTensor):
                        self.shadows.forget(t)
            gap = self._gap(t0)
            out, duration = None, None
            if run is not None:
                start = time.perf_counter()
                out = run()
                duration = time.perf_counter() - start if self._measure else None
            module, phase = self._module_phase()
            if nbytes is None:
                nbytes = float(sum(t.numel() * t.element_size() for t in tensors))
            nbytes += extra_bytes
            self.rows.add(kind="kernel", op=op, stream=self.stream_id(), iteration=self.iteration, module=module,
                          phase=phase, shapes=[list(t.shape) for t in tensors],
                          dtypes=[str(t.dtype).removeprefix("torch.") for t in tensors],
                          strides=[list(t.stride()) for t in tensors], args=json.dumps(args), flops=flops,
                          bytes=nbytes, host_gap_s=gap, mem=self._mem(), duration_s=duration)
            self._t_last = _clock()
        return out

    def _record_higher_order(self, func, args, kwargs, t_enter):
        """A higher-order op (FlexAttention forward/backward): one kernel row over its tensor inputs.

        On a GPU it is one fused kernel; its score/mask functions are graphs, not arguments a
        benchmark could replay, so only the tensors are recorded (block-mask sparsity is not
        reflected in the FLOP count, which assumes a dense score matrix)."""
        if func is _INDUCTOR_COMPILED_CODE:
            return self._run_compiled_region(*args, **kwargs)
        op = f"aten::{func.name()}"
        with self._lock:
            gap = self._gap(t_enter)
            tensors = [x for x in _flatten(args) + _flatten(list(kwargs.values())) if isinstance(x, torch.Tensor)]
            if self.policy == "emulate":
                # higher-order ops look their rule up by the exact mode type: reuse FakeTensorMode's
                mode_type = type(self.fake_mode)
                if mode_type not in func.python_key_table and FakeTensorMode in func.python_key_table:
                    func.py_impl(mode_type)(func.python_key_table[FakeTensorMode])
                with self.fake_mode:
                    out = func(*args, **kwargs)
            else:
                with torch.utils._python_dispatch._disable_current_modes():
                    out = func(*args, **kwargs)
            out_shapes, out_dtypes, _ = signature.outputs(out)
            if self.memory is not None:
                self._see_outputs(out)
            shapes = [list(t.shape) for t in tensors]
            dtypes = [str(t.dtype).removeprefix("torch.") for t in tensors]
            strides = [list(t.stride()) for t in tensors]
            jargs = {"higher_order": True}
            flops, nbytes = flops_and_bytes(op, shapes, dtypes, out_shapes, out_dtypes, jargs)
            module, phase = self._module_phase()
            self.rows.add(kind="kernel", op=op, stream=self.stream_id(), iteration=self.iteration, module=module,
                          phase=phase, shapes=shapes, dtypes=dtypes, strides=strides, args=json.dumps(jargs),
                          out_shapes=out_shapes, out_dtypes=out_dtypes, flops=flops, bytes=nbytes,
                          host_gap_s=gap, mem=self._mem())
            self._t_last = _clock()
        return out

    def _run_compiled_region(self, func, inputs, *, name=None):
        """Inductor's compiled code as one higher-order op (`wrap_inductor_compiled_regions`, set by
        torchtitan's compiled FlexAttention so that selective activation checkpointing saves the region's
        outputs). On a GPU the op runs the compiled kernels; its fake rule re-runs the original graph
        instead, which is neither what the GPU runs nor fakeable (FlexAttention's own higher-order op).
        Run the compiled code, under this mode again: its Triton launches and extern kernels are the rows."""
        from torch._higher_order_ops.wrap import _resolve_inductor_callable

        _push_mode(self)
        try:
            return _resolve_inductor_callable(func).compiled_callable(inputs)
        finally:
            _pop_mode()

    def _record_op(self, func, args, kwargs, op, t_enter, keyed=None):
        gap = self._gap(t_enter)
        self._placeholder_now = False
        self._unsupported_now = False
        if keyed is not None:
            row = self._row_cache.get(keyed[0])
            if row is not None:
                return self._record_cached(row, func, args, kwargs, op, keyed, gap)
        if self.policy == "emulate":  # sparse, nested, quantized: named, with the program's line
            tensor_kinds.check_call(op, _flatten(args) + list(kwargs.values()), kwargs)
        bound, shapes, dtypes, strides, jargs = signature.describe_call(func, args, kwargs)
        stream = self.stream_id()
        kind, coll = "kernel", {}
        if op.startswith(("c10d::", "_c10d_functional::", "c10d_functional::")):
            kind, coll = self._collective(op, bound, jargs)
        elif op in HOST_DEVICE_COPY_OPS:
            kind, op = self._maybe_memcpy(op, bound, kwargs)
            if kind == "memcpy":
                coll = {"blocking": op == "memcpy::d2h" and not jargs.get("non_blocking", False)}
        duration = None
        oom: BaseException | None = None
        if self._measure:
            if self._cuda_timing:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = self._run(func, args, kwargs, op, keyed=keyed)
            if self._cuda_timing:
                torch.cuda.synchronize()
            duration = time.perf_counter() - t0
        else:
            out = self._run(func, args, kwargs, op, keyed=keyed)
        self._derive_values(func, args, kwargs, out, kind, keyed)
        if kind == "memcpy":
            out = self._host_copy_with_values(out)
        if op == "c10d::broadcast_" and self.exchange is not None and self.shadows is not None:
            self._share_broadcast(bound, coll)
        elif op == "c10d::alltoall_base_" and self.shadows is not None:
            routing.all_to_all_values(self.shadows, bound, coll.get("group_ranks") or [], self.rank)
        elif op == "_c10d_functional::all_to_all_single" and self.shadows is not None:
            routing.functional_all_to_all_values(self.shadows, bound, out, coll.get("group_ranks") or [], self.rank)
        out_shapes, out_dtypes, out_tensors = signature.outputs(out)
        if kind == "kernel" and self.policy == "emulate" and _on_host(args, kwargs, out_tensors):
            kind = "host_op"
        if self.memory is not None:
            try:
                self._see_outputs(out)
            except torch.cuda.OutOfMemoryError as e:
                oom = e
        if kind == "collective" and coll.get("_functional"):
            for t in out_tensors:
                self.tensor_coll[fastpath.storage_key(t)] = (coll["group"], coll["coll_seq"], op)
        coll.pop("_functional", None)
        if op == "_c10d_functional::wait_tensor":
            key = self.tensor_coll.pop(fastpath.storage_key(args[0]), None) if args else None
            if key is not None:
                coll.update(group=key[0], coll_seq=key[1], waits_for=key[2])
        elif kind in ("collective", "p2p") and op.startswith("c10d::"):
            self._open_work(out, (coll["group"], coll["coll_seq"], coll["peer"], op), len(self.rows))
        if self._unsupported_now:
            jargs["unsupported"] = True
        flops, nbytes = (0.0, 0.0) if kind in ("event_wait",) else \
            flops_and_bytes(op, shapes, dtypes, out_shapes, out_dtypes, jargs)
        module, phase = self._module_phase()
        if oom is not None:
            self._out_of_memory_row(op, stream, module, phase, gap)
            raise oom
        jargs = json.dumps(jargs, default=str)
        self.rows.add(kind=kind, op=op, stream=stream, iteration=self.iteration, module=module, phase=phase,
                      shapes=shapes, dtypes=dtypes, strides=strides, args=jargs,
                      out_shapes=out_shapes, out_dtypes=out_dtypes, flops=flops, bytes=nbytes, host_gap_s=gap,
                      mem=self._mem(), duration_s=duration, placeholder=self._placeholder_now, **coll)
        cacheable = kind in ("kernel", "memcpy", "host_op") and set(coll) <= {"blocking"}  # no collective fields
        if keyed is not None and cacheable and not self._placeholder_now \
                and not self._unsupported_now and self._out_specs.get(keyed[0]) is not None:
            # foreach ops are keyed without float values: their args (None here) are rebuilt per call
            cached_args = None if op.startswith("aten::_foreach_") else jargs
            self._row_cache[keyed[0]] = (kind, op, shapes, dtypes, strides, cached_args, out_shapes, out_dtypes,
                                         flops, nbytes, coll.get("blocking"), self.rows.last_hash_part)
        self._t_last = _clock()
        return out

    def _collective(self, op, bound, jargs):
        if op.endswith("wait_tensor"):
            return "event_wait", {}
        info = self.collectives.describe(op, bound)
        jargs.pop("async_op", None)  # in the `async_op` column
        jargs.pop("group_name", None)  # in the `group` column; args stay equal across ranks
        jargs.pop("device_ids", None)  # a barrier's device: the rank's own GPU, not the work
        return info.kind, dict(group=info.group, group_ranks=info.group_ranks, coll_seq=info.coll_seq,
                               coll_bytes=info.coll_bytes, peer=info.peer, async_op=info.async_op,
                               _functional=op.startswith(("_c10d_functional::", "c10d_functional::")))

    def _share_broadcast(self, bound: dict, coll: dict) -> None:
        """A broadcast of device tensors whose values came from the host: the other ranks get the root's.

        Why: programs broadcast small host-made tensors and read them back to agree across ranks
        (DeepSpeed ZeRO-3 checks that every rank traces the same module order, with rank 0's list
        length broadcast and `.item()`-read; seeds, data indices). Without the root's values each
        rank read its own, and a rank that is not the root (DeepSpeed sends -1 from those) failed
        the check a GPU run passes. The values travel as objects do (emulator.distributed.objects):
        a rank waiting for the root tells the launcher to run the group's ranks side by side.
        Tensors without values (activations, anything computed on the device) are left alone."""
        tensors = bound.get("tensors") or []
        values = [self.shadows.value(t, resolve=False) if isinstance(t, FakeTensor) else None for t in tensors]
        ranks = coll.get("group_ranks") or []
        if not values or any(v is None for v in values) or not ranks:
            return
        root = ranks[int(bound.get("root_rank", 0))]
        channel = f"tbcast.{coll['group']}.{root}"
        relative = relative_name("tbcast", ranks, root)
        if self.rank == root:
            self.exchange.put(channel, [v.clone() for v in values], relative)
            return
        # fetched only when read: DDP broadcasts every (host-initialised) parameter at start-up, and
        # waiting for those would make every rank of every DDP program wait for rank 0
        fetch = self.exchange.later(channel, root, relative)
        for i, (t, mine) in enumerate(zip(tensors, values, strict=True)):
            self.shadows.expect(t, functools.partial(_received, fetch, i, mine))

    def _maybe_memcpy(self, op, bound, kwargs):
        """Copies between host and device are memcpy rows (`memcpy::h2d` / `memcpy::d2h`)."""
        if self.policy != "emulate":
            return "kernel", op
        if op == "aten::_to_copy":
            src = bound.get("self")
            dev = kwargs.get("device")
            dst_type = torch.device(dev).type if dev is not None else (src.device.type if src is not None else "cuda")
            src_type = src.device.type if isinstance(src, torch.Tensor) else "cuda"
        else:
            dst, src = bound.get("self"), bound.get("src")
            dst_type = dst.device.type if isinstance(dst, torch.Tensor) else "cuda"
            src_type = src.device.type if isinstance(src, torch.Tensor) else "cuda"
        if src_type == "cpu" and dst_type == "cuda":
            return "memcpy", "memcpy::h2d"
        if src_type == "cuda" and dst_type == "cpu":
            return "memcpy", "memcpy::d2h"
        return "kernel", op

    def _scalar_read(self, func, args, kwargs, t_enter):
        """`.item()` / `bool(t)` on a device tensor: a D2H copy whose value is a placeholder."""
        with self._lock:
            gap = self._gap(t_enter)
            self._placeholder_now = False
            t = args[0]
            known = self.shadows.value(t) if self.shadows is not None and isinstance(t, FakeTensor) else None
            if known is not None:  # data that came from the host: the real value, not a placeholder
                value = known.item()
                self.real_reads += 1
            else:
                value = self._run(func, args, kwargs, "aten::_local_scalar_dense", record=False)
            module, phase = self._module_phase()
            size = dtype_bytes(str(t.dtype))
            self.rows.add(kind="memcpy", op="memcpy::d2h", stream=self.stream_id(), iteration=self.iteration,
                          module=module, phase=phase, shapes=[list(t.shape)], dtypes=[str(t.dtype)[6:]],
                          strides=[list(t.stride())], args=json.dumps({"item": True}), flops=0.0,
                          bytes=float(size), blocking=True, host_gap_s=gap, mem=self._mem(),
                          placeholder=self._placeholder_now or (self.policy == "emulate" and known is None))
            self._t_last = _clock()
            return value


def _received(fetch, i: int, mine: torch.Tensor) -> torch.Tensor:
    """Tensor i of a broadcast from the root, laid over this rank's shadow storage of it (`mine`, a view)."""
    theirs = fetch()[i]
    flat = mine._base.clone() if mine._base is not None else mine.clone().view(-1)
    flat.as_strided(mine.shape, mine.stride(), mine.storage_offset()).copy_(theirs)
    return flat


def _flatten(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out.extend(_flatten(a))
        else:
            out.append(a)
    return out


def _program_line(program_dir: str | None) -> str | None:
    """`file:line` of the innermost frame of the user's program (under `program_dir`, not an installed
    package), else of the innermost frame outside torch and maya; None in autograd's backward thread."""
    import traceback

    frames = traceback.extract_stack()[:-3]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the emulator package
    outside = [f for f in frames if not f.filename.startswith(here) and "/torch/" not in f.filename
               and "<frozen" not in f.filename and "runpy" not in f.filename]
    mine = [f for f in outside if program_dir and f.filename.startswith(program_dir)
            and "site-packages" not in f.filename]
    best = (mine or outside or [None])[-1]
    return f"{best.filename}:{best.lineno} ({best.line})" if best is not None else None


def _on_host(args, kwargs, out_tensors) -> bool:
    """Every fake tensor of a call is a fake *host* tensor: a device tensor's copy to the host, such as
    FSDP1's CPU-offloaded parameters and their optimizer states. On the real machine the host's CPU
    runs the op (a `host_op` row, timed on the host), not a GPU stream."""
    seen = False
    for t in (*_flatten(args), *_flatten(list(kwargs.values())), *out_tensors):
        if isinstance(t, FakeTensor):
            if t.fake_device.type != "cpu":
                return False
            seen = True
    return seen


def _via_functional(func, args, kwargs) -> tuple[bool, object]:
    """An `out=` overload without a fake kernel whose functional overload has one (Inductor calls
    `extern_kernels._scaled_mm(..., out=buf)`, `aten::_scaled_mm.out`, which has no meta kernel while
    `.default` does): the functional overload's fake kernel sizes the result, and the caller's `out`
    tensors take its shape, as an out= kernel resizes them. (False, None) when that does not apply."""
    schema = getattr(func, "_schema", None)
    functional = getattr(getattr(func, "_overloadpacket", None), "default", None)
    if schema is None or functional is None or functional is func:
        return False, None
    params = schema.arguments
    outs = [a.name for a in params if a.is_out]
    if not outs:
        return False, None
    named = dict(kwargs)
    for a, v in zip(params, args, strict=False):
        named[a.name] = v
    out_tensors = [named.pop(n, None) for n in outs]
    if not all(isinstance(t, torch.Tensor) for t in out_tensors):
        return False, None
    accepted = {a.name for a in functional._schema.arguments}
    if not set(named) <= accepted:
        return False, None
    try:
        result = functional(**named)
    except (*_NOT_FAKEABLE, RuntimeError):
        return False, None
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(results) != len(out_tensors) or not all(isinstance(r, torch.Tensor) for r in results):
        return False, None
    for t, r in zip(out_tensors, results, strict=True):
        if t.dtype != r.dtype:
            return False, None
        if t.shape != r.shape:
            t.resize_(r.shape)
    return True, out_tensors[0] if len(out_tensors) == 1 else tuple(out_tensors)


def _missing_kernel(e: BaseException) -> bool:
    """True for "this op has no fake/meta kernel" errors (as opposed to the program's own errors)."""
    msg = str(e)
    return any(s in msg for s in ("no fake impl", "fake kernel", "meta kernel", "Could not run", "does not have a meta",
                                  "NotImplementedError", "not implemented for 'Meta'", "has no meta"))


def _report_progress(steps: int) -> None:
    """Append `STEPS UNIX_TIME` to $MAYA_PROGRESS_FILE (when the launcher asked for it): one line per
    optimizer step; the launcher reads whole lines only."""
    from emulator.trace.layout import PROGRESS_FILE_ENV

    path = os.environ.get(PROGRESS_FILE_ENV)
    if not path:
        return
    try:
        with open(path, "a") as f:
            f.write(f"{steps} {time.time():.3f}\n")
    except OSError:  # progress is a nicety: never a reason for a rank to fail
        pass
