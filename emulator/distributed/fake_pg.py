"""The recording process group: any `init_process_group` becomes torch's fake backend.

Why: an emulated rank runs alone. torch ships a "fake" backend (FakeProcessGroup + FakeStore)
whose collectives complete immediately without talking to anyone, and every ProcessGroup call
still goes through the dispatcher, where the recorder sees it. So `init_process_group("nccl")`
(or gloo, or none) is redirected to `fake` with this worker's rank and world size, and
`is_nccl_available()` says True so scripts take their GPU path. `dist.get_backend()` answers with
the backend the program asked for ("nccl" when it named none), as on the GPU cluster: library
code that branches on a fake group (torch 2.14's pipelining refuses metadata inference across
ranks of a "fake" group; DeviceMesh skips device setup) takes the path the real job takes.

Barriers: `dist.barrier()` reaches the recorder as `c10d::barrier` (recorded as a collective of
its group although torch gives a fake group a CPU token tensor). `monitored_barrier`, which torch
runs only on gloo groups through gloo's own send/recv protocol, becomes that same barrier after
torch's own checks. (torch 2.13's `destroy_process_group` issues no barrier, so none is recorded.)

DDP's parameter and buffer broadcasts (`dist._broadcast_coalesced`) run as the same kernels and
collective from Python on fake tensors (`emulator.distributed.coalesced`: why).

DDP needs three patches on top (each is a place where DDP reads real data or CUDA timers):
  1. `_verify_param_shape_across_processes` reads parameter data -> skipped;
  2. the C++ reducer's built-in allreduce hook expects a value in the Work's future, which the
     fake backend leaves empty -> a Python hook that all-reduces the bucket (still recorded as
     `c10d::allreduce_`) and returns a completed future;
  3. `logger.set_runtime_stats_and_log` asserts on the missing CUDA timer -> skipped.

Every group the program creates is listed (creation order, full rank lists, membership) for the
launcher's rank deduplication, including groups this rank is not a member of.
"""

from __future__ import annotations

import functools
import sys

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from emulator.distributed import coalesced


class _GroupLog:
    def __init__(self, rank: int):
        self.rank = rank
        self.groups: list[dict] = []
        self._in_split = 0

    def add(self, name, ranks: list[int]) -> None:
        entry = {"name": str(name), "ranks": [int(r) for r in ranks], "member": self.rank in ranks}
        if entry not in self.groups:
            self.groups.append(entry)


_log: _GroupLog | None = None


def groups() -> list[dict]:
    return list(_log.groups) if _log is not None else []


def _install_group_log(rank: int, world_size: int, fake: bool = True) -> None:
    """Log every group made; with `fake`, every new group is a fake one too, whatever backend it asks for:
    `new_group(backend="gloo")` (megatron-core makes a gloo twin of each group for host tensors) would
    build a real ProcessGroupGloo over the FakeStore ("Not implemented"). Collectives on host tensors
    are not recorded (no device work), so such a group only has to exist."""
    global _log
    _log = _GroupLog(rank)
    helper = c10d._new_process_group_helper
    split = c10d.split_group

    @functools.wraps(helper)
    def new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, store, group_name,
                                 *args, **kwargs):
        if fake and str(backend).lower() != "fake":
            backend = c10d.Backend("fake")
            kwargs.pop("backend_options", None)  # NCCL / gloo options mean nothing to the fake group
        out = helper(group_size, group_rank, global_ranks_in_group, backend, store, group_name, *args, **kwargs)
        if not _log._in_split:
            ranks = list(global_ranks_in_group) or list(range(world_size))
            _log.add(group_name, ranks)
        return out

    @functools.wraps(split)
    def split_group(parent_pg=None, split_ranks=None, *args, **kwargs):
        parent = parent_pg or c10d._get_default_group()
        to_global = c10d.get_process_group_ranks(parent)
        _log._in_split += 1
        try:
            out = split(parent_pg, split_ranks, *args, **kwargs)
        finally:
            _log._in_split -= 1
        for part in split_ranks or []:
            _log.add(c10d._process_group_name(list(part), use_hashed_name=True), [to_global[r] for r in part])
        return out

    c10d._new_process_group_helper = new_process_group_helper
    c10d.split_group = split_group
    dist.split_group = split_group
    import torch.distributed.device_mesh as dm
    if hasattr(dm, "split_group"):
        dm.split_group = split_group


class _NoNcclBackend:
    """What `distributed_c10d.ProcessGroupNCCL` names on a build without NCCL once `is_nccl_available()`
    says True: a class no backend is an instance of (the emulated groups are fake groups). The
    program's `torch.distributed` keeps not having the name, as on this build."""


_recorder = None  # the rank's recorder, for the Python that stands in for C++ (the DDP hook below)


def install(rank: int, world_size: int, recorder=None, real: bool = False) -> None:
    """Redirect process-group creation (fake backend unless `real`), patch DDP, log groups, record waits."""
    _install_group_log(rank, world_size, fake=not real)
    dist.is_nccl_available = lambda: True
    c10d.is_nccl_available = lambda: True
    if not hasattr(c10d, "ProcessGroupNCCL"):
        # torch's own code then asks `isinstance(backend, ProcessGroupNCCL)`, a name a CPU build leaves
        # undefined (Inductor's cache hits extend every NCCL group's timeout): no group here is one
        c10d.ProcessGroupNCCL = _NoNcclBackend
    original = c10d.init_process_group

    @functools.wraps(original)
    def init_process_group(backend=None, init_method=None, timeout=None, world_size_=None, rank_=None,
                           store=None, *args, **kwargs):
        kwargs.pop("world_size", None)
        kwargs.pop("rank", None)
        kwargs.pop("device_id", None)
        if real:
            be = "gloo" if not torch.cuda.is_available() else (backend or "nccl")
            return original(backend=be, timeout=timeout, rank=rank, world_size=world_size, **kwargs)
        from torch.testing._internal.distributed.fake_pg import FakeStore

        _reported_backend[0] = _visible_backend(backend)
        # backend-specific options (NCCL pg_options, ...) mean nothing to the fake group: not passed
        return original(backend="fake", store=FakeStore(), rank=rank, world_size=world_size,
                         **({"timeout": timeout} if timeout is not None else {}))

    c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group
    if not real:
        _patch_get_backend()
        _patch_monitored_barrier()
        _patch_ddp()
        _register_coalesced_meta()
        coalesced.install(recorder)
    global _recorder
    _recorder = recorder
    if recorder is not None:
        _patch_work_wait(recorder)


_reported_backend = ["nccl"]


def _visible_backend(requested) -> str:
    """What `get_backend()` says on the real cluster for `init_process_group(requested)`."""
    if requested is None:
        return "nccl"
    name = str(requested).lower()
    return "nccl" if "nccl" in name or name == "fake" else name


def _patch_get_backend() -> None:
    original = c10d.get_backend
    if getattr(original, "_maya", False):
        return

    @functools.wraps(original)
    def get_backend(group=None):
        name = original(group)
        return _reported_backend[0] if str(name) == "fake" else name

    get_backend._maya = True
    c10d.get_backend = get_backend
    dist.get_backend = get_backend


def _patch_monitored_barrier() -> None:
    """`monitored_barrier` on the fake group: torch's checks (members only, gloo groups only), then a barrier."""
    if getattr(c10d.monitored_barrier, "_maya", False):
        return

    @functools.wraps(c10d.monitored_barrier)
    def monitored_barrier(group=None, timeout=None, wait_all_ranks: bool = False):
        if c10d._rank_not_in_group(group):
            return None
        if c10d.get_backend(group) != dist.Backend.GLOO:
            raise ValueError("monitored_barrier is only implemented for GLOO backend.")
        return c10d.barrier(group)

    monitored_barrier._maya = True
    c10d.monitored_barrier = monitored_barrier
    dist.monitored_barrier = monitored_barrier


def work_only_kernel(func):
    """The Meta kernel of a c10d collective that only makes a FakeWork (torch's own registrations in
    `torch.distributed._meta_registrations`, which return the first argument and a completed
    FakeWork, or the work alone), or None: the recorder may call it without FakeTensorMode. Only
    torch's table counts; `monitored_barrier_`, whose kernel returns nothing, is left to the mode."""
    from torch.distributed import _meta_registrations as meta

    namespace, _, name = func.name().partition("::")
    kernels = getattr(meta, "_META_FUNCTIONS", {})
    if namespace != "c10d" or name not in kernels or name == "monitored_barrier_":
        return None
    return kernels[name]


_COALESCED = ("allreduce_coalesced_", "allgather_coalesced_", "allgather_into_tensor_coalesced_",
              "reduce_scatter_tensor_coalesced_")
_coalesced_lib: list = []


def _register_coalesced_meta() -> None:
    """Meta kernels for the coalesced collectives: torch registers them for every other c10d op
    (torch/distributed/_meta_registrations.py) but left these out, so on fake tensors they had no
    kernel at all (megatron-core's gradient finalisation all-reduces through `allreduce_coalesced`).
    Like the others, they return a completed FakeWork; the outputs are written in place."""
    if _coalesced_lib:
        return
    from torch.distributed._meta_registrations import create_fakework

    lib = torch.library.Library("c10d", "IMPL")
    for op in _COALESCED:
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"c10d::{op}", "Meta"):
            lib.impl(op, lambda *args: create_fakework(args, return_first_arg=False), "Meta")
    _coalesced_lib.append(lib)  # the registrations live as long as the library object


def _patch_work_wait(recorder) -> None:
    """`Work.wait()`: record the completion wait (matched to its collective by Work identity, see
    Recorder.wait_collective)."""
    from torch._C import _distributed_c10d as cd

    for cls in {dist.Work, getattr(cd, "FakeWork", dist.Work)}:
        original = cls.wait
        if getattr(original, "_maya", False):
            continue

        def wait(self, *args, _orig=original, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            recorder.wait_collective(self, "c10d::wait", internal=caller.endswith("distributed_c10d.py"))
            return _orig(self, *args, **kwargs)

        wait._maya = True
        try:
            cls.wait = wait
        except (TypeError, AttributeError):
            pass


class _QuietLogger:
    """DDP's logger minus the CUDA-timer statistics a CPU build cannot give (DDP patch 3)."""

    def __init__(self, inner):
        self._inner = inner

    def set_runtime_stats_and_log(self, *args, **kwargs):
        return None

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _allreduce_hook(process_group, bucket):
    """DDP patch 2: what the reducer's built-in hook does (average then all-reduce), as Python.

    The reducer does this in C++; the Python of `dist.all_reduce` between the two ops is the
    emulator's, so it is not charged to the program's host time."""
    pg = process_group or c10d._get_default_group()
    buf = bucket.buffer()
    buf.div_(pg.size())
    if _recorder is not None:
        _recorder.emulator_code_until_next_event()
    dist.all_reduce(buf, group=pg)
    fut = torch.futures.Future()
    fut.set_result(buf)
    return fut


def _patch_ddp() -> None:
    import torch.distributed.utils as dutils
    import torch.nn.parallel.distributed as ddp_mod

    noop = lambda *a, **k: None  # noqa: E731
    dutils._verify_param_shape_across_processes = noop
    ddp_mod._verify_param_shape_across_processes = noop
    DDP = ddp_mod.DistributedDataParallel
    if getattr(DDP.__init__, "_maya", False):
        return
    init, register = DDP.__init__, DDP.register_comm_hook

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if getattr(self, "logger", None) is not None:
            self.logger = _QuietLogger(self.logger)
        self._maya_user_hook = None
        ddp = self

        def dispatch_hook(state, bucket):
            if ddp._maya_user_hook is not None:
                user_state, user_hook = ddp._maya_user_hook
                return user_hook(user_state, bucket)
            return _allreduce_hook(state, bucket)

        register(self, self.process_group, dispatch_hook)

    def register_comm_hook(self, state, hook):
        # The reducer takes one hook; ours dispatches to the script's own once it registers one.
        self._maya_user_hook = (state, hook)

    __init__._maya = True
    DDP.__init__ = __init__
    DDP.register_comm_hook = register_comm_hook


def shutdown() -> None:
    """Destroy the process group quietly (end of run, or `--iterations` stop)."""
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - teardown of a fake group must never mask the real outcome
        pass
