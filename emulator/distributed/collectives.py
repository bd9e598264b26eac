"""What a recorded collective or p2p op means: its group, ranks, size, peer and sequence number.

Every ProcessGroup method and functional collective reaches the recorder as a dispatcher op
(`c10d::allreduce_`, `_c10d_functional::all_gather_into_tensor`, ...). This module turns one
such call into the trace's collective columns. Sizes follow the nccl-tests convention of
`emulator.core.ops` (all_gather: gathered output; reduce_scatter: pre-scatter input; the rest: the
buffer sent). Group ranks are global ranks in group order, so the collator can match the same
collective across ranks by (group, coll_seq).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from emulator.core.ops import collective_name, dtype_bytes

_INPUT_NAMES = ("input_tensor", "input_tensors", "inputs", "input", "tensors", "tensor", "self")
_OUTPUT_NAMES = ("output_tensor", "output_tensors", "outputs", "output", "out")
_PEER_ARGS = {"send": "dst", "recv": "src"}


def _tensor_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * dtype_bytes(str(value.dtype))
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _group_of(bound: dict):
    """The ProcessGroup of a call: a ProcessGroup object or a functional collective's group name."""
    pg = bound.get("process_group")
    if pg is not None:
        if not isinstance(pg, dist.ProcessGroup):
            pg = dist.ProcessGroup.unbox(pg) if hasattr(dist.ProcessGroup, "unbox") else pg
        return pg
    name = bound.get("group_name")
    if name is not None:
        from torch.distributed.distributed_c10d import _resolve_process_group
        return _resolve_process_group(name if isinstance(name, str) else str(name))
    return None


def group_label(pg) -> str:
    """A name for a group that is the same on every member rank (torch's group_name is)."""
    try:
        return str(pg.group_name)
    except Exception:  # noqa: BLE001 - exotic groups: fall back to the ranks
        return "ranks:" + ",".join(map(str, dist.get_process_group_ranks(pg)))


@dataclass
class CollectiveInfo:
    kind: str  # collective | p2p | event_wait
    group: str | None = None
    group_ranks: list[int] = field(default_factory=list)
    coll_seq: int | None = None
    coll_bytes: int = 0
    peer: int | None = None
    async_op: bool = False


class CollectiveCounter:
    """Per-group sequence numbers (collectives) and per-(group, peer, direction) numbers (p2p)."""

    def __init__(self):
        self.seq: dict[str, int] = {}

    def next(self, key: str) -> int:
        n = self.seq.get(key, 0)
        self.seq[key] = n + 1
        return n

    def describe(self, op: str, bound: dict) -> CollectiveInfo:
        """Collective columns for a c10d / functional-collective op with its bound arguments."""
        name = collective_name(op)
        pg = _group_of(bound)
        label = group_label(pg) if pg is not None else "unknown"
        ranks = list(dist.get_process_group_ranks(pg)) if pg is not None else []
        functional = op.startswith(("_c10d_functional::", "c10d_functional::"))
        async_op = True if functional else bool(bound.get("async_op", False))
        if name in ("send", "recv"):
            group_peer = bound.get(_PEER_ARGS[name])
            peer = ranks[group_peer] if (group_peer is not None and 0 <= group_peer < len(ranks)) else group_peer
            seq = self.next(f"{label}|{name}|{peer}")
            return CollectiveInfo("p2p", label, ranks, seq, _tensor_bytes(_first(bound, _INPUT_NAMES)), peer,
                                  async_op)
        if name == "all_gather":
            out = _first(bound, _OUTPUT_NAMES)
            nbytes = _tensor_bytes(out) if out is not None else \
                _tensor_bytes(_first(bound, _INPUT_NAMES)) * int(bound.get("group_size") or len(ranks) or 1)
        elif name == "barrier":
            nbytes = 0
        elif name in ("scatter", "gather"):
            # the whole scattered/gathered buffer: the same on every rank (the root's list is local)
            side = _OUTPUT_NAMES if name == "scatter" else _INPUT_NAMES
            nbytes = _tensor_bytes(_first(bound, side)) * max(len(ranks), 1)
        else:
            nbytes = _tensor_bytes(_first(bound, _INPUT_NAMES))
        return CollectiveInfo("collective", label, ranks, self.next(label), nbytes, None, async_op)


def _first(bound: dict, names: tuple[str, ...]):
    for n in names:
        if n in bound and bound[n] is not None:
            return bound[n]
    return None
