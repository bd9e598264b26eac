"""Object collectives between emulated ranks (send/recv_object_list, broadcast_object_list, all_gather_object).

Why: these move *Python values* that the receiving program uses (pipelining exchanges stage
output shapes with `send_object_list`/`recv_object_list` before the first step). The fake
process group delivers nothing, and the receive side would read a fake tensor's data. So the
values travel through files in a folder shared by the ranks of one emulation
(`$MAYA_EXCHANGE_DIR`, default `OUT/.exchange/<run id>`); the c10d send/recv rows of the
transfer are still recorded by the original functions. A receiver waits for the sender up to
`$MAYA_EXCHANGE_TIMEOUT_S` (default 120 s) and then fails with an error that says which rank's
value it needed, so a rank emulated alone fails clearly instead of hanging. The launcher says
which ranks run during a batch (`$MAYA_EXCHANGE_PEERS`); a value from any other rank that is not
already written can never come, and the receiver fails at once: the launcher then starts the ranks
that exchange objects side by side without waiting out the timeout. A peer of the batch that has
not started yet (more ranks than cores) is waited for, up to the timeout.

Stand-ins: every value is also written under its *group-relative* name (the group's shape, the
sender's and receiver's positions in it, the count), which is the same for every group of one
partition (every pipeline of a TP x PP x DP job). Once one such group has run side by side, a rank
emulated without its peers (`$MAYA_EXCHANGE_STANDIN=1`, set by the launcher's deduplication) reads
what the same position of that group sent. That is exact for what these collectives carry in
training programs (shapes, dtypes, flags of a rank's peers), and it is the same assumption rank
deduplication makes; a value that names global ranks would be read from another group.
"""

from __future__ import annotations

import functools
import os
import pickle
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


class ObjectExchangeTimeout(RuntimeError):
    pass


class Exchange:
    def __init__(self, root: Path, rank: int, timeout_s: float, stand_in: bool = False,
                 peers: frozenset[int] | None = None):
        self.root = Path(root)
        self.rank = rank
        self.timeout_s = timeout_s
        self.stand_in = stand_in  # read a missing peer's value from the same position of another group
        self.peers = peers  # the ranks that run during this batch, when the launcher says (None: unknown)
        self.counters: dict[str, int] = {}

    def _key(self, channel: str) -> Path:
        n = self.counters.get(channel, 0)
        self.counters[channel] = n + 1
        return self.root / f"{channel}.{n}.pkl"

    def put(self, channel: str, value, relative: str | None = None) -> None:
        """Write the channel's next value, and under `relative` (its group-relative name) for stand-ins."""
        paths = [self._key(channel)] + ([self._key(relative)] if relative else [])
        self.root.mkdir(parents=True, exist_ok=True)  # only programs that exchange objects get the folder
        data = pickle.dumps(value)
        for path in paths:
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)

    def get(self, channel: str, from_rank: int, relative: str | None = None):
        return self.later(channel, from_rank, relative)()

    def later(self, channel: str, from_rank: int, relative: str | None = None):
        """`get`, deferred: takes the channel's next value's place now and returns a function that
        reads it (waiting for it then), so a value nobody reads never makes the ranks wait."""
        path = self._key(channel)
        stand_in = self._key(relative) if relative else None
        return lambda: self._read(path, channel, from_rank, stand_in if self.stand_in else None)

    def _read(self, path: Path, channel: str, from_rank: int, stand_in: Path | None = None):
        deadline = time.monotonic() + self.timeout_s
        delay = 0.005
        absent = self.peers is not None and from_rank not in self.peers  # then it can only have sent already
        while not path.exists():
            if stand_in is not None and stand_in.exists():
                path = stand_in
                break
            if absent or time.monotonic() > deadline:
                why = "does not run in this batch" if absent else f"did not send it within {self.timeout_s:.0f} s"
                raise ObjectExchangeTimeout(
                    f"maya: rank {self.rank} needs a Python object from rank {from_rank} ({channel}); rank "
                    f"{from_rank} {why}. Object collectives need the "
                    "ranks emulated at the same time (e.g. `maya emulate --no-dedup` with enough --jobs).")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        with open(path, "rb") as f:
            return pickle.load(f)


def _global(group, group_rank: int | None, global_rank: int | None) -> int:
    if global_rank is not None:
        return int(global_rank)
    if group_rank is None:
        raise ValueError("a source/destination rank is required")
    return c10d.get_global_rank(group or c10d._get_default_group(), group_rank)


def _group_name(group) -> str:
    pg = group or c10d._get_default_group()
    return str(pg.group_name)


def _relative(kind: str, group, *members: int) -> str:
    return relative_name(kind, c10d.get_process_group_ranks(group or c10d._get_default_group()), *members)


def relative_name(kind: str, group_ranks, *members: int) -> str:
    """A channel's group-relative name: the group's shape (size, then the steps between its sorted
    ranks, which tell a TP group from a PP group of the same size) and the members' positions in it."""
    ranks = sorted(group_ranks)
    steps = sorted({b - a for a, b in zip(ranks, ranks[1:], strict=False)})
    shape = f"{len(ranks)}s{'_'.join(map(str, steps))}"
    return f"rel.{kind}.{shape}." + "-".join(str(ranks.index(m)) for m in members)


def _sizes(object_list, group) -> list[int]:
    """Pickled sizes as torch's object collectives compute them (what goes over the wire)."""
    return [int(c10d._object_to_tensor(o, torch.device("cpu"), group)[1].item()) for o in object_list]


def _device(device):
    if device is not None:
        return torch.device(device)
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def install(out: Path, rank: int) -> Exchange:
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "maya")
    root = Path(os.environ.get("MAYA_EXCHANGE_DIR") or Path(out) / ".exchange" / run_id)
    peers = os.environ.get("MAYA_EXCHANGE_PEERS")
    ex = Exchange(root, rank, float(os.environ.get("MAYA_EXCHANGE_TIMEOUT_S", "120")),
                  stand_in=os.environ.get("MAYA_EXCHANGE_STANDIN") == "1",
                  peers=frozenset(int(r) for r in peers.split(",")) if peers else None)
    send_o, recv_o = c10d.send_object_list, c10d.recv_object_list
    bcast_o, gather_o = c10d.broadcast_object_list, c10d.all_gather_object

    @functools.wraps(send_o)
    def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None, **kw):
        peer = _global(group, group_dst, dst)
        ex.put(f"p2p.{_group_name(group)}.{rank}-{peer}", (list(object_list), _sizes(object_list, group)),
               _relative("p2p", group, rank, peer))
        return send_o(object_list, dst=dst, group=group, device=device, group_dst=group_dst, **kw)

    @functools.wraps(recv_o)
    def recv_object_list(object_list, src=None, group=None, device=None, group_src=None, **kw):
        peer = _global(group, group_src, src)
        values, sizes = ex.get(f"p2p.{_group_name(group)}.{peer}-{rank}", peer, _relative("p2p", group, peer, rank))
        # the transfer torch would do (sizes, then the pickled bytes), so its rows have the real sizes
        dev = _device(device)
        dist.recv(torch.tensor(sizes, dtype=torch.long, device=dev), src=peer, group=group)
        dist.recv(torch.empty(sum(sizes), dtype=torch.uint8, device=dev), src=peer, group=group)
        object_list[:len(values)] = values
        return peer

    @functools.wraps(bcast_o)
    def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None, **kw):
        root = _global(group, group_src, src)
        channel = f"bcast.{_group_name(group)}.{root}"
        relative = _relative("bcast", group, root)
        if rank == root:
            ex.put(channel, list(object_list), relative)
        try:
            bcast_o(object_list, src=src, group=group, device=device, group_src=group_src, **kw)
        except Exception:  # noqa: BLE001
            pass
        if rank != root:
            values = ex.get(channel, root, relative)
            object_list[:len(values)] = values

    @functools.wraps(gather_o)
    def all_gather_object(object_list, obj, group=None):
        pg = group or c10d._get_default_group()
        ranks = c10d.get_process_group_ranks(pg)
        name = _group_name(group)
        ex.put(f"ag.{name}.{rank}", obj, relative_name("ag", ranks, rank))
        try:
            gather_o(object_list, obj, group=group)
        except Exception:  # noqa: BLE001
            pass
        for i, r in enumerate(ranks):
            object_list[i] = obj if r == rank else ex.get(f"ag.{name}.{r}", r, relative_name("ag", ranks, r))

    for mod in (c10d, dist):
        mod.send_object_list = send_object_list
        mod.recv_object_list = recv_object_list
        mod.broadcast_object_list = broadcast_object_list
        mod.all_gather_object = all_gather_object
    return ex
