"""`dist._broadcast_coalesced` on fake tensors: the kernels and the collective of torch's C++, from Python.

Why: DDP broadcasts every parameter from rank 0 when it is built (and its buffers before each
forward); torch does it in C++ (`c10d::broadcast_coalesced`): per bucket of at most `buffer_size`
bytes, flatten the tensors into one (`cat` of `t.contiguous().view(-1)`), broadcast it, and, two
buckets later, copy each tensor back from its slice of the flat one (`narrow(0, offset, numel).view`).
Each slice starts at another storage offset, so every copy is a first-time signature for the
emulator's per-signature cache (`emulator.capture.fastpath`) and goes through FakeTensorMode's slow
path (1.7 ms a call on average here): a 30-layer model spent seconds of every emulated rank in this setup step.

On fake tensors there is no data, so where in the flat tensor a copy reads from cannot change a
result: here each tensor copies back from the *start* of its bucket's flat tensor, a view of the same
shape, dtype and strides, whose signature repeats from one layer to the next. Everything the trace
records is the C++ path's: the same buckets (torch's own `_compute_bucket_assignment_by_size`), the
same order (at most two broadcasts in flight), one `cat` per bucket of more than one tensor, one
`c10d::broadcast_` of the flat tensor per bucket, one `copy_` per non-empty tensor; like the C++
path, no wait row (C++ waits on the work itself). The Python standing in for the C++ loop is charged
to the emulator, not to the program's host time. Installed only on the fake process group
(`emulator.distributed.fake_pg.install`) and only when the recorder's shortcuts are on
(`MAYA_EMULATOR_FASTPATH`): a real run (`maya profile`) keeps torch's C++.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensor

_MAX_IN_FLIGHT = 2  # as torch's c10d::broadcast_coalesced


def install(recorder) -> None:
    """Replace `dist._broadcast_coalesced` (looked up at call time by DDP and `torch.distributed.utils`)."""
    original = dist._broadcast_coalesced
    if getattr(original, "_maya", False) or recorder is None or not recorder.shortcuts:
        return

    def broadcast_coalesced(process_group, tensors, buffer_size, src=0):
        tensors = list(tensors)
        if not tensors or not all(type(t) is FakeTensor and t.layout is torch.strided for t in tensors):
            return original(process_group, tensors, buffer_size, src)
        _emulated(process_group, tensors, buffer_size, src, recorder)
        return None

    broadcast_coalesced._maya = True
    dist._broadcast_coalesced = broadcast_coalesced


def _emulated(process_group, tensors: list, buffer_size: int, src: int, recorder) -> None:
    buckets, _ = dist._compute_bucket_assignment_by_size(tensors, [buffer_size])
    opts = dist.BroadcastOptions()
    opts.rootRank = src
    in_flight: deque = deque()
    for bucket in buckets:
        if len(in_flight) >= _MAX_IN_FLIGHT:
            _copy_back(*in_flight.popleft(), recorder)
        members = [tensors[i] for i in bucket]
        flats = [t.contiguous().view(-1) for t in members]
        recorder.emulator_code_until_next_event()
        flat = flats[0] if len(flats) == 1 else torch.cat(flats)
        recorder.emulator_code_until_next_event()
        process_group.broadcast([flat], opts)
        in_flight.append((members, flat))
    while in_flight:
        _copy_back(*in_flight.popleft(), recorder)


def _copy_back(members: list, flat: torch.Tensor, recorder) -> None:
    for t in members:
        n = t.numel()
        if n:
            source = flat.narrow(0, 0, n).view(t.shape)  # see the module docstring: no data, no offset
            recorder.emulator_code_until_next_event()
            t.copy_(source, non_blocking=True)
