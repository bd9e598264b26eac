"""The trace: the contract between emulation, collation, estimation and simulation.

Layout of an emulation output folder `OUT/`:
    OUT/trace/rank=R/part-0.parquet   one row per device-side event of rank R (TRACE_SCHEMA)
    OUT/emulation.json                the run summary (see `EmulationSummary` in emulator.trace.io)

Only the ranks actually emulated have a folder; `emulation.json["rank_map"]` maps every
rank of the job to the emulated rank whose trace it shares (rank deduplication).
"""

from __future__ import annotations

import pyarrow as pa

TRACE_SCHEMA_VERSION = 1

KINDS = ("kernel", "collective", "p2p", "memcpy", "memset", "event_record", "event_wait",
         "stream_sync", "device_sync", "marker")
PHASES = ("forward", "backward", "optimizer", "other")

_shape_list = pa.list_(pa.list_(pa.int64()))

TRACE_SCHEMA = pa.schema([
    pa.field("rank", pa.int32(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),  # host order on this rank
    pa.field("iteration", pa.int32(), nullable=False),  # -1 before the first optimizer step
    pa.field("kind", pa.string(), nullable=False),  # one of KINDS
    pa.field("op", pa.string(), nullable=False),  # emulator.core.ops.canonical_op form
    pa.field("stream", pa.int32(), nullable=False),  # stream id on this rank (0 = default)
    pa.field("shapes", _shape_list),
    pa.field("dtypes", pa.list_(pa.string())),
    pa.field("strides", _shape_list),
    pa.field("args", pa.string()),  # JSON object of non-tensor args
    pa.field("out_shapes", _shape_list),
    pa.field("out_dtypes", pa.list_(pa.string())),
    pa.field("flops", pa.float64()),
    pa.field("bytes", pa.float64()),
    pa.field("module", pa.string()),  # nn.Module path, "" when outside any module
    pa.field("phase", pa.string()),  # one of PHASES
    pa.field("group", pa.string()),  # process group name (collectives, p2p)
    pa.field("group_ranks", pa.list_(pa.int32())),  # global ranks of the group, in group order
    pa.field("coll_seq", pa.int64()),  # per-group sequence number of this collective on this rank
    pa.field("coll_bytes", pa.int64()),  # nccl-tests convention, see emulator.core.ops
    pa.field("peer", pa.int32()),  # global rank of the p2p peer
    pa.field("event_id", pa.int64()),  # event record/wait
    pa.field("host_gap_s", pa.float64()),  # host time since the previous device call (emulator overhead excluded)
    pa.field("mem_allocated", pa.int64()),  # allocator state after the event
    pa.field("mem_reserved", pa.int64()),
    pa.field("duration_s", pa.float64()),  # measured, profile mode only (null in emulation)
    pa.field("placeholder", pa.bool_()),  # a data-dependent value was replaced by a placeholder here
], metadata={b"maya.trace_schema_version": str(TRACE_SCHEMA_VERSION).encode()})

COLUMNS = [f.name for f in TRACE_SCHEMA]


class TraceSchemaError(ValueError):
    """A trace written by another (incompatible) schema version, or missing columns."""


def check_schema(schema: pa.Schema, where: str = "trace") -> None:
    """Raise TraceSchemaError naming `where` if `schema` is not a compatible trace schema."""
    meta = schema.metadata or {}
    version = meta.get(b"maya.trace_schema_version")
    if version is not None and int(version) != TRACE_SCHEMA_VERSION:
        raise TraceSchemaError(
            f"{where}: trace schema version {int(version)}, this maya reads version {TRACE_SCHEMA_VERSION}; "
            "re-run `maya emulate` with this version")
    missing = [c for c in ("rank", "seq", "iteration", "kind", "op", "stream") if c not in schema.names]
    if missing:
        raise TraceSchemaError(f"{where}: not a maya trace, missing columns {missing}")
