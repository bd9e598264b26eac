"""`torch.cuda` answering as the target GPU.

Why: training scripts (and PyTorch itself: FSDP2, autocast, GradScaler, DDP) ask `torch.cuda`
what the device is, which stream is current, how much memory is used. On a CPU build these
calls assert "Torch not compiled with CUDA enabled"; on a CUDA build without a GPU they say
"no device". Here every such call answers as the target `GPUSpec` would, streams and events
become ids that the recorder writes into the trace, memory statistics come from the emulated
caching allocator, and any CUDA runtime API we do not emulate fails with an error naming it
(never a silent 0). Timing events are the one documented exception: emulated events carry no
time, so `Event.elapsed_time` returns ELAPSED_TIME_PLACEHOLDER_MS, counted under the rank's
`placeholders` (`elapsed_time`) and marked in the trace, where `maya predict` reads the simulated
time between the two events instead.

The shim talks to the rest of the emulator through a `DeviceEvents` sink (the recorder).
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from emulator.core.hardware import GPUSpec
from emulator.trace.schema import ELAPSED_TIME_MARKER


class UnsupportedCudaAPI(AttributeError, NotImplementedError):
    """A CUDA runtime API the emulator does not provide (subclass of AttributeError so hasattr() works)."""


class DeviceEvents(Protocol):
    """What the shim reports: stream/event/sync rows and marker rows (implemented by the recorder)."""

    def sync_event(self, kind: str, op: str, stream: int, event_id: int | None = None,
                   args: dict | None = None) -> None: ...

    def note_placeholder(self, kind: str) -> None: ...

    def memory_stats(self) -> dict: ...

    def reset_peak(self) -> None: ...

    def empty_cache(self) -> None: ...

    def begin_capture(self, graph_id: int, pool: int) -> None: ...

    def end_capture(self, graph_id: int, capture_stream: int) -> list[dict]: ...

    def replay_capture(self, graph_id: int, rows: list[dict], capture_stream: int) -> None: ...


@dataclass
class FakeDeviceProperties:
    """Mirrors `torch.cuda.get_device_properties()` fields scripts read."""

    name: str
    total_memory: int
    multi_processor_count: int
    major: int
    minor: int
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    L2_cache_size: int = 50 * 2**20
    max_threads_per_multi_processor: int = 2048
    warp_size: int = 32
    gcnArchName: str = "NVIDIA"
    uuid: str = "00000000-0000-0000-0000-000000000000"
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 2**20}MB, multi_processor_count={self.multi_processor_count})")


# What `Event.elapsed_time` returns in emulation (milliseconds). Not 0: step timers divide by it.
ELAPSED_TIME_PLACEHOLDER_MS = 1.0

_stream_ids = itertools.count(1)
_event_ids = itertools.count(1)
_state: dict[str, Any] = {}


class FakeStream(torch.Stream):
    """A CUDA stream that is only an id; work "on" it is tagged with that id in the trace."""

    def __new__(cls, device=None, priority: int = 0, stream_id: int | None = None, **_ignored):
        idx = _device_index(device)
        sid = next(_stream_ids) if stream_id is None else stream_id
        self = super().__new__(cls, stream_id=sid, device_index=idx, device_type=1)
        self._priority = priority
        return self

    def __init__(self, *args, **kwargs):
        pass

    @property
    def priority(self) -> int:
        return getattr(self, "_priority", 0)

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    def wait_event(self, event: FakeEvent) -> None:
        _sink().sync_event("event_wait", "cuda::stream_wait_event", self.stream_id, event.event_id)

    def wait_stream(self, stream: torch.Stream) -> None:
        ev = FakeEvent()
        ev.record(stream)
        self.wait_event(ev)

    def record_event(self, event: FakeEvent | None = None) -> FakeEvent:
        event = event or FakeEvent()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        _sink().sync_event("stream_sync", "cuda::stream_synchronize", self.stream_id)

    def __enter__(self):
        self._prev = current_stream()
        set_stream(self)
        return self

    def __exit__(self, *exc):
        set_stream(self._prev)
        return False

    def __eq__(self, other):
        return isinstance(other, torch.Stream) and other.stream_id == self.stream_id \
            and other.device_index == self.device_index

    def __hash__(self):
        return hash((self.stream_id, self.device_index))

    def __repr__(self) -> str:
        return f"<maya FakeStream device=cuda:{self.device_index} id={self.stream_id}>"


class FakeEvent:
    """A CUDA event: record/wait become trace rows linked by `event_id`; timing is not available."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 **_ignored):
        self.event_id = next(_event_ids)
        self.enable_timing = enable_timing
        self._recorded = False

    def record(self, stream: torch.Stream | None = None) -> None:
        sid = (stream or current_stream()).stream_id
        self._recorded = True
        _sink().sync_event("event_record", "cuda::event_record", sid, self.event_id)

    def wait(self, stream: torch.Stream | None = None) -> None:
        sid = (stream or current_stream()).stream_id
        _sink().sync_event("event_wait", "cuda::stream_wait_event", sid, self.event_id)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        _sink().sync_event("stream_sync", "cuda::event_synchronize", 0, self.event_id)

    def elapsed_time(self, end_event: FakeEvent) -> float:
        """The placeholder (see the module docstring); torch's own errors for events that cannot be timed."""
        if not (self.enable_timing and getattr(end_event, "enable_timing", False)):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self._recorded and getattr(end_event, "_recorded", False)):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        sink = _sink()
        sink.note_placeholder("elapsed_time")
        sink.sync_event("marker", ELAPSED_TIME_MARKER, current_stream_id(),
                        args={"start": self.event_id, "end": end_event.event_id})
        return ELAPSED_TIME_PLACEHOLDER_MS


def _sink() -> DeviceEvents:
    return _state["sink"]


def _device_index(device) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return device.index if device.index is not None else current_device()
    raise TypeError(f"not a CUDA device: {device!r}")


def current_device() -> int:
    return _state["device"]


def set_device(device) -> None:
    idx = _device_index(device)
    if not 0 <= idx < _state["count"]:
        raise RuntimeError(f"CUDA error: invalid device ordinal (device {idx}, the emulated node has "
                           f"{_state['count']} GPUs)")
    _state["device"] = idx
    if _state.get("native_guard"):  # our C++ guard (CPU build); a CUDA build's guard would touch the driver
        torch._C._accelerator_setDeviceIndex(idx)


def _exchange_device(device: int) -> int:
    old = _state["device"]
    if device is not None and device >= 0:
        set_device(device)
    return old


def _maybe_exchange_device(device: int) -> int:
    # a function of its own, not `_exchange_device` again: Dynamo keys its handlers of torch.cuda's
    # functions by function object and refuses a second registration of one ("Handler already registered")
    return _exchange_device(device)


def current_stream(device=None) -> FakeStream:
    idx = _device_index(device)
    return _state["streams"].setdefault(idx, _default_stream(idx))


def _default_stream(idx: int) -> FakeStream:
    return _state["defaults"].setdefault(idx, FakeStream(idx, stream_id=0))


def default_stream(device=None) -> FakeStream:
    return _default_stream(_device_index(device))


def set_stream(stream: torch.Stream | None) -> None:
    if stream is None:
        return
    if not isinstance(stream, FakeStream):
        stream = FakeStream(stream.device_index, stream_id=stream.stream_id)
    _state["streams"][stream.device_index] = stream


@contextlib.contextmanager
def stream(s: torch.Stream | None):
    if s is None:
        yield
        return
    prev = current_stream(s.device_index)
    set_stream(s)
    try:
        yield
    finally:
        set_stream(prev)


def current_stream_id() -> int:
    """The id of the stream work is issued on now (what the recorder tags op rows with)."""
    st = _state["streams"].get(_state["device"])
    return st.stream_id if st is not None else 0


def synchronize(device=None) -> None:
    _sink().sync_event("device_sync", "cuda::device_synchronize", current_stream_id())


class _DeviceCtx:
    """`torch.cuda.device(i)`: switch the current device for a block."""

    def __init__(self, device):
        self.idx = _device_index(device) if device is not None and device != -1 else None

    def __enter__(self):
        self.prev = current_device()
        if self.idx is not None:
            set_device(self.idx)

    def __exit__(self, *exc):
        set_device(self.prev)
        return False


# ---- memory: answers come from the emulated caching allocator (through the sink) ----

def memory_stats(device=None) -> dict:
    return dict(_sink().memory_stats())


def memory_allocated(device=None) -> int:
    return int(memory_stats().get("allocated_bytes.all.current", 0))


def max_memory_allocated(device=None) -> int:
    return int(memory_stats().get("allocated_bytes.all.peak", 0))


def memory_reserved(device=None) -> int:
    return int(memory_stats().get("reserved_bytes.all.current", 0))


def max_memory_reserved(device=None) -> int:
    return int(memory_stats().get("reserved_bytes.all.peak", 0))


def reset_peak_memory_stats(device=None) -> None:
    _sink().reset_peak()


def empty_cache() -> None:
    _sink().empty_cache()


def mem_get_info(device=None) -> tuple[int, int]:
    total = _state["spec"].memory_bytes
    return total - memory_reserved(), total


def memory_summary(device=None, abbreviated: bool = False) -> str:
    s = memory_stats()
    return "\n".join(f"{k}: {v}" for k, v in sorted(s.items()))


# ---- RNG: fake tensors draw no numbers; keep the seed API consistent ----

def manual_seed(seed: int) -> None:
    _state["seed"] = int(seed)


def initial_seed() -> int:
    return _state.get("seed", 0)


def get_rng_state(device="cuda") -> torch.Tensor:
    """A CPU byte tensor, like CUDA's. While the recorder runs it is a *fake* CPU tensor: a real one
    (or one carrying a constant) moved `.to("cuda")`, as DTensor's RNG tracker does, would make the
    fake mode constant-fold the copy on the real CUDA runtime of a CUDA build.

    One state per fake mode, made once: making it costs ~300 us of fake-mode plumbing, and activation
    checkpointing asks for it around every block (a real GPU answers in microseconds; the state is
    never read, `set_rng_state` ignores it)."""
    from torch.utils._python_dispatch import _disable_current_modes

    fake_mode = getattr(_state.get("sink"), "fake_mode", None)
    cached = _state.get("rng_state")
    if cached is not None and cached[0] is fake_mode:
        return cached[1]
    with _disable_current_modes():
        rng = torch.zeros(16, dtype=torch.uint8)
        rng = fake_mode.from_tensor(rng, static_shapes=True) if fake_mode is not None else rng
    _state["rng_state"] = (fake_mode, rng)
    return rng


def set_rng_state(new_state, device="cuda") -> None:
    return None


class FakeGenerator:
    """`torch.cuda.default_generators[i]`: fake tensors draw no numbers, so the state API only has to
    answer consistently (megatron-core's RNG tracker gets and sets every device generator's state,
    graph-safely too). A CPU build has no CUDA generators (`default_generators` is empty)."""

    def __init__(self, index: int):
        self.device = torch.device("cuda", index)
        self._seed = 0

    def manual_seed(self, seed: int) -> FakeGenerator:
        self._seed = int(seed)
        return self

    def seed(self) -> int:
        return self._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> torch.Tensor:
        return get_rng_state()

    def set_state(self, new_state) -> FakeGenerator:
        return self

    graphsafe_get_state = get_state
    graphsafe_set_state = set_state

    def clone_state(self) -> FakeGenerator:
        return FakeGenerator(self.device.index).manual_seed(self._seed)

    def get_offset(self) -> int:
        return 0

    def set_offset(self, offset: int) -> FakeGenerator:
        return self


# ---- NVTX: ranges become marker rows ----

class _Nvtx:
    def range_push(self, msg: str) -> int:
        _sink().sync_event("marker", "nvtx::range_push", current_stream_id(), args={"message": str(msg)})
        return 0

    def range_pop(self) -> int:
        _sink().sync_event("marker", "nvtx::range_pop", current_stream_id())
        return 0

    def mark(self, msg: str) -> None:
        _sink().sync_event("marker", "nvtx::mark", current_stream_id(), args={"message": str(msg)})

    @contextlib.contextmanager
    def range(self, msg: str, *args, **kwargs):
        self.range_push(msg.format(*args, **kwargs) if (args or kwargs) else msg)
        try:
            yield
        finally:
            self.range_pop()

    def range_start(self, msg: str) -> int:
        self.mark(msg)
        return 0

    def range_end(self, range_id: int) -> None:
        return None


_graph_ids = itertools.count(1)


class FakeCUDAGraph:
    """`torch.cuda.CUDAGraph`: capture records once, replay re-emits the captured rows.

    On a GPU a capture launches nothing (the kernels are recorded into the graph) and a replay
    launches them all with one host call, on the stream current at replay, with no per-kernel
    launch cost. Here the fake kernels do run during capture (outputs need their metadata, and
    the program's static tensors their memory), but their rows leave the trace and stay with the
    graph (one `cuda::graph_capture` marker instead); each `replay()` appends them again with one
    `graph_replay` number (the simulator charges one launch for them), the first carrying the
    replay's host gap, the rest none. What a capture allocates comes from the graph's private
    pool (`pool()`, shared when `capture_begin(pool=...)` names another graph's or
    `graph_pool_handle()`), which the recorder keeps apart in the emulated allocator. torch's own
    `torch.cuda.graph` context manager and `make_graphed_callables` drive this class.
    Not modelled: the "operation not permitted when stream is capturing" errors (a sync or
    `.item()` inside a capture passes here), and a graph's pool is never released (`reset()`
    forgets the rows only)."""

    def __init__(self, keep_graph: bool = False):
        self.graph_id = next(_graph_ids)
        self._pool = self.graph_id
        self._rows: list[dict] | None = None
        self._capture_stream = 0

    def capture_begin(self, pool=None, capture_error_mode: str = "global", **_ignored) -> None:
        self._capture_stream = current_stream_id()
        if pool is not None:  # (0, id) of graph_pool_handle() or another graph's pool()
            self._pool = int(pool[1]) if isinstance(pool, tuple) else int(pool)
        _state["capturing"] = self.graph_id
        _sink().begin_capture(self.graph_id, self._pool)

    def capture_end(self) -> None:
        _state["capturing"] = None
        self._rows = _sink().end_capture(self.graph_id, self._capture_stream)

    def instantiate(self) -> None:
        return None

    def replay(self) -> None:
        if self._rows is None:
            raise RuntimeError("CUDA graph replayed before its capture ended")
        _sink().replay_capture(self.graph_id, self._rows, self._capture_stream)

    def reset(self) -> None:
        self._rows = None

    def pool(self):
        return (0, self._pool)

    def enable_debug_mode(self) -> None:
        return None

    def debug_dump(self, debug_path: str) -> None:
        raise UnsupportedCudaAPI("torch.cuda.CUDAGraph.debug_dump: an emulated graph has no CUDA graph to dump")


def _missing_c_attr(name: str):
    """torch._C.__getattr__: CUDA runtime bindings a CPU build lacks, reported by name."""
    if name.startswith(("_cuda", "_cudnn", "_nccl", "_CudaStreamBase", "_CudaEventBase")):
        raise UnsupportedCudaAPI(
            f"maya: the script uses torch._C.{name}, a CUDA runtime API the emulated GPU does not provide; "
            "please report it (the emulator covers the torch.cuda calls training scripts commonly make)")
    raise AttributeError(f"module 'torch._C' has no attribute '{name}'")


def install(spec: GPUSpec, device_count: int, sink: DeviceEvents) -> None:
    """Patch torch.cuda (and torch.cuda.memory / torch.accelerator helpers) to answer as `spec`."""
    from emulator.device import boot

    _state.update(spec=spec, count=int(device_count), sink=sink, device=0, streams={}, defaults={},
                  native_guard=boot.is_booted())
    props = [FakeDeviceProperties(name=spec.name, total_memory=int(spec.memory_bytes),
                                  multi_processor_count=int(spec.sm_count), major=spec.capability[0],
                                  minor=spec.capability[1], pci_bus_id=i) for i in range(int(device_count))]
    cap = tuple(spec.capability)
    cuda = torch.cuda
    patches: dict[str, Any] = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_lazy_init": lambda: None,
        "init": lambda: None,
        "_is_compiled": lambda: True,
        "device_count": lambda: _state["count"],
        "current_device": current_device,
        "set_device": set_device,
        "_exchange_device": _exchange_device,
        "_maybe_exchange_device": _maybe_exchange_device,
        "device": _DeviceCtx,
        "device_of": lambda t: _DeviceCtx(t.get_device() if t.is_cuda else None),
        "get_device_properties": lambda device=None: props[_device_index(device)],
        "get_device_name": lambda device=None: props[_device_index(device)].name,
        "get_device_capability": lambda device=None: cap,
        "get_arch_list": lambda: [f"sm_{cap[0]}{cap[1]}"],
        "is_bf16_supported": lambda including_emulation=True: cap >= (8, 0),
        "is_tf32_supported": lambda: cap >= (8, 0),
        "synchronize": synchronize,
        "Stream": FakeStream,
        "Event": FakeEvent,
        "current_stream": current_stream,
        "default_stream": default_stream,
        "set_stream": set_stream,
        "stream": stream,
        "memory_stats": memory_stats,
        "memory_allocated": memory_allocated,
        "max_memory_allocated": max_memory_allocated,
        "memory_reserved": memory_reserved,
        "max_memory_reserved": max_memory_reserved,
        "memory_cached": memory_reserved,
        "max_memory_cached": max_memory_reserved,
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_max_memory_allocated": reset_peak_memory_stats,
        "reset_max_memory_cached": reset_peak_memory_stats,
        "empty_cache": empty_cache,
        "mem_get_info": mem_get_info,
        "memory_summary": memory_summary,
        "manual_seed": manual_seed,
        "manual_seed_all": manual_seed,
        "seed": lambda: None,
        "seed_all": lambda: None,
        "initial_seed": initial_seed,
        "get_rng_state": get_rng_state,
        "get_rng_state_all": lambda: [get_rng_state() for _ in range(_state["count"])],
        "set_rng_state": set_rng_state,
        "set_rng_state_all": lambda states: None,
        "nvtx": _Nvtx(),
        "is_current_stream_capturing": lambda: _state.get("capturing") is not None,
        "graph_pool_handle": lambda: (0, next(_graph_ids)),
        "CUDAGraph": FakeCUDAGraph,
        # torch's own context manager and make_graphed_callables, driving FakeCUDAGraph
        "graph": cuda.graphs.graph,
        "make_graphed_callables": cuda.graphs.make_graphed_callables,
    }
    for name, fn in patches.items():
        setattr(cuda, name, fn)
    cuda.default_generators = tuple(FakeGenerator(i) for i in range(int(device_count)))
    cuda._initialized = True
    import torch.cuda.memory as cmem
    for name in ("memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
                 "max_memory_reserved", "reset_peak_memory_stats", "empty_cache", "mem_get_info",
                 "memory_summary", "reset_max_memory_allocated"):
        setattr(cmem, name, patches[name])
    import torch.cuda.random as crandom
    for name in ("manual_seed", "manual_seed_all", "get_rng_state", "set_rng_state", "initial_seed"):
        setattr(crandom, name, patches[name])
    import torch.cuda.streams as cstreams
    cstreams.Stream, cstreams.Event = FakeStream, FakeEvent
    cuda.graphs.CUDAGraph, cuda.graphs.graph_pool_handle = FakeCUDAGraph, patches["graph_pool_handle"]
    if not hasattr(torch._C, "_host_emptyCache"):  # torch.cuda.graph's __enter__ calls it
        torch._C._host_emptyCache = lambda: None
    if not hasattr(torch._C, "_cuda_cudaCachingAllocator_is_enabled"):  # Inductor asks before it captures graphs
        torch._C._cuda_cudaCachingAllocator_is_enabled = lambda: True  # the emulated allocator caches
    if not hasattr(torch._C, "_cuda_getDeviceCount"):  # CPU build: name unknown CUDA bindings clearly
        torch._C.__getattr__ = _missing_c_attr
    set_device(0)
