"""The work hash: one hash of what a rank's trace asks the device to do, blind to who the rank is.

Rank deduplication (`emulator.launch.roles`) compares ranks by it: two ranks with the same work
hash do the same work with different peers. It covers, per row, the kind, op, input shapes and
dtypes, the non-tensor arguments without what legitimately differs between ranks of one role
(device indices: `cuda:3` is the local rank; numeric scalar operands: RNG offsets, seeds, per-rank
constants, which do not change how much work a kernel does; floats inside lists: an optimizer's
per-step bias corrections), the group size and the collective's bytes; never rank ids or group
names. Integer lists stay (sizes, list lengths): they can change the work.

The recorder hashes rows as it appends them (`emulator.capture.trace_rows`); `work_hash(table)`
hashes a finished table the same way, with the same `row_part`.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache

import pyarrow as pa

_DEVICE_INDEX = re.compile(r"\b(cuda|cpu|meta):\d+")


@lru_cache(maxsize=65536)
def normal_args(raw: str | None) -> str:
    """A row's args JSON without device indices and numeric scalars (see the module docstring)."""
    if not raw:
        return ""
    try:
        args = json.loads(raw)
    except ValueError:
        return _DEVICE_INDEX.sub(r"\1", raw)
    if not isinstance(args, dict):
        return _DEVICE_INDEX.sub(r"\1", raw)
    kept = {k: _without_floats(v) for k, v in args.items() if isinstance(v, (str, bool, list, dict)) or v is None}
    return _DEVICE_INDEX.sub(r"\1", json.dumps(kept, sort_keys=True, separators=(",", ":")))


def _without_floats(v):
    if isinstance(v, list):
        return [_without_floats(x) for x in v if not isinstance(x, float)]
    return v


def row_part(kind, op, shapes, dtypes, args: str | None, group_size: int, coll_bytes) -> bytes:
    """One row's contribution to the work hash."""
    return json.dumps([kind, op, shapes, dtypes, normal_args(args), group_size, coll_bytes],
                      separators=(",", ":")).encode()


def work_hash(table: pa.Table) -> str:
    """The work hash of a finished trace table (the recorder's running hash gives the same value)."""
    n = table.num_rows
    col = lambda c: table.column(c).to_pylist() if c in table.column_names else [None] * n  # noqa: E731
    kinds, ops, shapes, dtypes, args, granks, cbytes = (col(c) for c in ("kind", "op", "shapes", "dtypes", "args",
                                                                         "group_ranks", "coll_bytes"))
    h = hashlib.sha256()
    for i in range(n):
        h.update(row_part(kinds[i], ops[i], shapes[i], dtypes[i], args[i], len(granks[i]) if granks[i] else 0,
                          cbytes[i]))
    return h.hexdigest()
