"""Rows of one rank's trace, kept column-wise while recording and turned into a TRACE_SCHEMA table.

Column lists instead of row dicts: appending to ~25 lists is cheaper than building a dict per
event, and the Arrow table is built in one go at the end (or when the worker fails half-way).
"""

from __future__ import annotations

import hashlib

import pyarrow as pa

from emulator.trace.schema import TRACE_SCHEMA
from emulator.trace.workhash import row_part

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
            async_op: bool | None = None, waits_for: str | None = None, blocking: bool | None = None,
            event_id: int | None = None, host_gap_s: float = 0.0, mem=(None, None), duration_s: float | None = None,
            placeholder: bool = False, graph_replay: int | None = None, hash_part: bytes | None = None) -> None:
        """Append one event. `hash_part`: this row's work-hash contribution when the caller already
        has it (a repeated signature), saving a json.dumps per row."""
        if hash_part is None:
            hash_part = row_part(kind, op, shapes, dtypes, args, len(group_ranks) if group_ranks else 0, coll_bytes)
        self._append((self.rank, len(self._seq), iteration, kind, op, int(stream), shapes, dtypes, strides, args,
                      out_shapes, out_dtypes, flops, bytes, module, phase, group, group_ranks, coll_seq, coll_bytes,
                      peer, async_op, waits_for, blocking, event_id, host_gap_s, mem[0], mem[1], duration_s,
                      bool(placeholder), graph_replay), hash_part)

    def add_repeat(self, kind: str, op: str, shapes, dtypes, strides, args: str, out_shapes, out_dtypes, flops,
                   nbytes, blocking: bool | None, hash_part: bytes, stream: int, iteration: int, module: str,
                   phase: str, host_gap_s: float, mem: tuple) -> None:
        """`add` for a kernel row repeating a known signature (the emulator's fast path): positional,
        no collective fields, the op-hash contribution given. Same columns, same values as `add`."""
        self._append((self.rank, len(self._seq), iteration, kind, op, int(stream), shapes, dtypes, strides, args,
                      out_shapes, out_dtypes, flops, nbytes, module, phase, None, None, None, None, None, None, None,
                      blocking, None, host_gap_s, mem[0], mem[1], None, False, None), hash_part)

    def _append(self, row: tuple, hash_part: bytes) -> None:
        """One value per column, in TRACE_SCHEMA order."""
        for column, value in zip(self._lists, row, strict=True):
            column.append(value)
        self._hash.update(hash_part)
        self.last_hash_part = hash_part

    def checkpoint(self) -> tuple[int, object, bytes | None]:
        """A point `rollback` can return to (rows added after it are dropped, op hash included)."""
        return len(self), self._hash.copy(), getattr(self, "last_hash_part", None)

    def rollback(self, point: tuple[int, object, bytes | None]) -> None:
        n, digest, last = point
        for col in self.cols.values():
            del col[n:]
        self._hash, self.last_hash_part = digest, last

    def drop_empty_ranges(self) -> int:
        """Drop NVTX ranges that enclose no other row (a push right before its pop, nested ones too);
        their host gaps go to the next row kept, so the host time is unchanged. Returns how many rows went.

        Why: libraries wrap host functions in ranges for profilers (DeepSpeed's `instrument_w_nvtx`:
        8.7k push/pop rows per ZeRO-3 step of a 4-layer GPT, most around code that launches
        nothing). A range that holds device work stays, with everything in it. Called once, when
        the rank's rows are written (the work hash was taken over every row as recorded)."""
        kinds, ops = self.cols["kind"], self.cols["op"]
        n = len(kinds)
        keep = [True] * n
        open_ranges: list[list] = []  # [push row, holds a kept row]
        for i in range(n):
            if kinds[i] == "marker" and ops[i] == "nvtx::range_push":
                open_ranges.append([i, False])
                continue
            if kinds[i] == "marker" and ops[i] == "nvtx::range_pop" and open_ranges:
                j, holds = open_ranges.pop()
                if not holds:
                    keep[i] = keep[j] = False
                    continue
            if open_ranges:
                open_ranges[-1][1] = True
        dropped = n - sum(keep)
        if not dropped:
            return 0
        gaps = self.cols["host_gap_s"]
        carry = 0.0
        for i in range(n):
            if not keep[i]:
                carry += gaps[i] or 0.0
            elif carry:
                gaps[i] = (gaps[i] or 0.0) + carry
                carry = 0.0
        for col in self.cols.values():
            col[:] = [v for v, k in zip(col, keep, strict=True) if k]
        self.cols["seq"][:] = range(len(self.cols["seq"]))
        return dropped

    def work_hash(self) -> str:
        """`emulator.trace.workhash.work_hash` of the rows so far, kept as they were appended."""
        return self._hash.hexdigest()

    def to_table(self) -> pa.Table:
        return pa.table({c: self.cols[c] for c in _COLUMNS}, schema=TRACE_SCHEMA)
