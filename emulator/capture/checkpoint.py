"""`torch.save` of emulated (fake) tensors: record the checkpoint, write a stub.

Why: fake tensors have no data and cannot be pickled, yet training scripts save checkpoints.
A real GPU run would copy every tensor to the host and write it out; the trace gets one
`marker` row `io::save` with the byte count (so the simulator can charge it), and the file
gets a small stub describing the tensors, so code that checks the file exists keeps working.
Loading such a stub returns that description, not tensors (documented limitation).
"""

from __future__ import annotations

import functools

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_flatten


def install(recorder, stream_id) -> None:
    original = torch.save
    if getattr(original, "_maya", False):
        return

    @functools.wraps(original)
    def save(obj, f, *args, **kwargs):
        leaves = tree_flatten(obj)[0]
        fakes = [x for x in leaves if isinstance(x, FakeTensor)]
        if not fakes:
            return original(obj, f, *args, **kwargs)
        nbytes = sum(t.numel() * t.element_size() for t in fakes)
        stub = {"maya_emulated_checkpoint": True, "bytes": nbytes,
                "tensors": [(list(t.shape), str(t.dtype).removeprefix("torch.")) for t in fakes]}
        recorder.sync_event("marker", "io::save", stream_id(), args={"bytes": nbytes, "tensors": len(fakes)})
        return original(stub, f, *args, **kwargs)

    save._maya = True
    torch.save = save
