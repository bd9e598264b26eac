"""What sits on a simulated stream, and the keys that match collectives and messages across ranks.

Stream items, in FIFO order on one stream of one rank:
- a plain `int`: a device op (kernel, memset, memcpy), its trace row; the host's launch time is in the
  rank's `issue` list (kernels are most of the items, and an int is the cheapest item there is);
- `Record`: resolves `token` with the time the stream's prior work ends (an event record, a sync point);
- `Wait`: holds the stream until `token` is resolved (an event wait, a collective's completion);
- `Collective`: trace row `row` joins the collective or message `key` with `expected` arrivals.

Streams are the program's stream ids (ints) plus `SideStream`s the simulator adds: one per
(rank, group) for asynchronous collectives and one per (rank, direction, peer) for p2p, so a
batched send+recv between two pipeline stages does not deadlock.

Keys are small named tuples (hashable like tuples, so dict lookups stay C-speed).
"""

from __future__ import annotations

from typing import NamedTuple


class Record(NamedTuple):
    token: int


class Wait(NamedTuple):
    token: int


class CollectiveKey(NamedTuple):
    """A collective: matched across the group's members by (group, per-group sequence number)."""

    group: str | None
    seq: int | None


class MessageKey(NamedTuple):
    """The n-th p2p message from `src` to `dst`: the n-th send of src to dst meets dst's n-th recv from src."""

    src: int
    dst: int
    n: int


class P2PWaitKey(NamedTuple):
    """What a recorded completion wait of a p2p op names: its group, sequence number, peer and direction."""

    group: str | None
    seq: int | None
    peer: int | None
    op: str


class Collective(NamedTuple):
    row: int
    issue: float
    key: CollectiveKey | MessageKey
    expected: int  # arrivals that complete it (members simulated)


class SideStream(NamedTuple):
    """A stream the simulator adds: `kind` "comm" (async collectives of `of` = a group), "send" or "recv"
    (p2p with `of` = the peer rank)."""

    kind: str
    of: object
