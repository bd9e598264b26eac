"""Rows of one rank's trace, kept column-wise while recording and turned into a TRACE_SCHEMA table.

Column lists instead of row dicts: appending to ~25 lists is cheaper than building a dict per
event, and the Arrow table is built in one go at the end (or when the worker fails half-way).
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

from emulator.trace.schema import TRACE_SCHEMA

_COLUMNS = [f.name for f in TRACE_SCHEMA]


class TraceRows:
    def __init__(self, rank: int):
        self.rank = rank
        self.cols: dict[str, list] = {c: [] for c in _COLUMNS}
        self._lists = tuple(self.cols[c] for c in _COLUMNS)  # the same lists, in schema order
        self._seq = self.cols["seq"]
        self._hash = hashlib.sha256()

    def __len__(self) -> int:
        return len(self.cols["seq"])

    def add(self, *, kind: str, op: str, stream: int, iteration: int, module: str = "", phase: str = "other",
            shapes=None, dtypes=None, strides=None, args: str = "{}", out_shapes=None, out_dtypes=None,
            flops: float | None = None, bytes: float | None = None, group: str | None = None,  # noqa: A002
            group_ranks=None, coll_seq: int | None = None, coll_bytes: int | None = None, peer: int | None = None,
            event_id: int | None = None, host_gap_s: float = 0.0, mem=(None, None), duration_s: float | None = None,
            placeholder: bool = False, hash_part: bytes | None = None) -> None:
        """Append one event. `hash_part`: this row's op-hash contribution when the caller already
        has it (a repeated signature), saving a json.dumps per row."""
        # The op hash covers what a rank *does*, not who it is: group names and rank ids are left out.
        if hash_part is None:
            coll_name = op if kind in ("collective", "p2p") else ""
            gsize = len(group_ranks) if group_ranks else 0
            hash_part = json.dumps([kind, op, shapes, dtypes, args, coll_name, gsize, coll_bytes],
                                   separators=(",", ":")).encode()
        self._append((self.rank, len(self._seq), iteration, kind, op, int(stream), shapes, dtypes, strides, args,
                      out_shapes, out_dtypes, flops, bytes, module, phase, group, group_ranks, coll_seq, coll_bytes,
                      peer, event_id, host_gap_s, mem[0], mem[1], duration_s, bool(placeholder)), hash_part)

    def add_repeat(self, kind: str, op: str, shapes, dtypes, strides, args: str, out_shapes, out_dtypes, flops,
                   nbytes, hash_part: bytes, stream: int, iteration: int, module: str, phase: str,
                   host_gap_s: float, mem: tuple) -> None:
        """`add` for a kernel row repeating a known signature (the emulator's fast path): positional,
        no collective fields, the op-hash contribution given. Same columns, same values as `add`."""
        self._append((self.rank, len(self._seq), iteration, kind, op, int(stream), shapes, dtypes, strides, args,
                      out_shapes, out_dtypes, flops, nbytes, module, phase, None, None, None, None, None, None,
                      host_gap_s, mem[0], mem[1], None, False), hash_part)

    def _append(self, row: tuple, hash_part: bytes) -> None:
        """One value per column, in TRACE_SCHEMA order."""
        for column, value in zip(self._lists, row, strict=True):
            column.append(value)
        self._hash.update(hash_part)
        self.last_hash_part = hash_part

    @staticmethod
    def kernel_hash_prefix(kind: str, op: str, shapes, dtypes) -> bytes:
        """A kernel row's op-hash contribution up to its args: `kernel_hash_part` completes it with the
        args, giving the bytes `add` would compute (for rows whose args change call to call)."""
        return json.dumps([kind, op, shapes, dtypes], separators=(",", ":"))[:-1].encode() + b","

    @staticmethod
    def kernel_hash_part(prefix: bytes, args: str) -> bytes:
        return prefix + json.dumps(args).encode() + b',"",0,null]'

    def checkpoint(self) -> tuple[int, object, bytes | None]:
        """A point `rollback` can return to (rows added after it are dropped, op hash included)."""
        return len(self), self._hash.copy(), getattr(self, "last_hash_part", None)

    def rollback(self, point: tuple[int, object, bytes | None]) -> None:
        n, digest, last = point
        for col in self.cols.values():
            del col[n:]
        self._hash, self.last_hash_part = digest, last

    def op_hash(self) -> str:
        return self._hash.hexdigest()

    def to_table(self) -> pa.Table:
        return pa.table({c: self.cols[c] for c in _COLUMNS}, schema=TRACE_SCHEMA)
