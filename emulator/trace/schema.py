"""The trace: the contract between emulation, collation, estimation and simulation.

One row per device-side event of a rank. Files live under `OUT/trace/rank=R/part-0.parquet`
(`emulator.trace.layout`), hive-partitioned by rank: as hive readers expect, the partition
column `rank` is in the folder name, not in the file, so pandas, pyarrow datasets and DuckDB
(`hive_partitioning=true`) read the whole folder as one table. In memory (`read_rank_trace`)
every table has the `rank` column first, as TRACE_SCHEMA says.

Version 2 moved what the simulator needs out of the `args` JSON into typed columns:
`async_op` (a collective/p2p whose issuing stream does not wait for it), `waits_for` (the op a
completion-wait row waits for) and `blocking` (a device-to-host copy the host waits for).
Version-1 files still read: `upgrade` derives the three columns from their `args`.
Version 3 added `graph_replay`: the rows one CUDA-graph replay launched share its number, and the
host launches them with one call (older files: null, every row launched on its own), and the
`host_op` kind (an op the host's CPU runs on offloaded tensors; older files recorded those as
kernels).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

TRACE_SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)

KINDS = ("kernel", "collective", "p2p", "memcpy", "memset", "event_record", "event_wait",
         "stream_sync", "device_sync", "marker", "host_op")
PHASES = ("forward", "backward", "optimizer", "other")
# A marker row: the program read `torch.cuda.Event.elapsed_time` (args: the start and end event ids).
ELAPSED_TIME_MARKER = "cuda::event_elapsed_time"
DEVICE_KINDS = frozenset({"kernel", "memset", "memcpy"})  # rows that run on a stream of the device
# an op on host tensors the program moved off the device (CPU offload: FSDP1's optimizer step on offloaded
# parameters): the host runs it, in program order, on its own time; it launches nothing
HOST_KINDS = frozenset({"host_op"})
COMM_KINDS = frozenset({"collective", "p2p"})

_shape_list = pa.list_(pa.list_(pa.int64()))

TRACE_SCHEMA = pa.schema([
    pa.field("rank", pa.int32(), nullable=False),  # the hive partition: in the folder name, not in the file
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
    pa.field("async_op", pa.bool_()),  # collective/p2p: the issuing stream goes on without waiting for it
    pa.field("waits_for", pa.string()),  # event_wait of a collective/p2p: the op it waits for
    pa.field("blocking", pa.bool_()),  # memcpy: a device-to-host copy the host waits for
    pa.field("event_id", pa.int64()),  # event record/wait
    pa.field("host_gap_s", pa.float64()),  # host time since the previous device call (emulator overhead excluded)
    pa.field("mem_allocated", pa.int64()),  # allocator state after the event
    pa.field("mem_reserved", pa.int64()),
    pa.field("duration_s", pa.float64()),  # measured, profile mode only (null in emulation)
    pa.field("placeholder", pa.bool_()),  # a data-dependent value was replaced by a placeholder here
    pa.field("graph_replay", pa.int64()),  # the CUDA-graph replay (per rank, from 1) that launched this row
], metadata={b"maya.trace_schema_version": str(TRACE_SCHEMA_VERSION).encode()})

COLUMNS = [f.name for f in TRACE_SCHEMA]
FILE_SCHEMA = TRACE_SCHEMA.remove(0).with_metadata(TRACE_SCHEMA.metadata)  # a file holds every column but rank
_V2_COLUMNS = ("async_op", "waits_for", "blocking")


class TraceSchemaError(ValueError):
    """A trace written by another (incompatible) schema version, or missing columns."""


def schema_version(schema: pa.Schema) -> int:
    meta = schema.metadata or {}
    raw = meta.get(b"maya.trace_schema_version")
    return int(raw) if raw is not None else TRACE_SCHEMA_VERSION


def check_schema(schema: pa.Schema, where: str = "trace") -> None:
    """Raise TraceSchemaError naming `where` if `schema` is not a trace this maya reads."""
    version = schema_version(schema)
    if version not in READABLE_VERSIONS:
        raise TraceSchemaError(
            f"{where}: trace schema version {version}, this maya reads versions {list(READABLE_VERSIONS)}; "
            "re-run `maya emulate` with this version")
    missing = [c for c in ("seq", "iteration", "kind", "op", "stream") if c not in schema.names]
    if missing:
        raise TraceSchemaError(f"{where}: not a maya trace, missing columns {missing}")


def _args(raw) -> dict:
    try:
        out = json.loads(raw) if raw else {}
    except (TypeError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def blocking_copy(op: str, args: dict) -> bool:
    """A device-to-host copy the host waits for (what version-1 traces said only through op and args)."""
    o = op.lower()
    to_host = "d2h" in o or "dtoh" in o or "device_to_host" in o or args.get("direction") in ("d2h", "DtoH")
    return to_host and not args.get("non_blocking", False)


def upgrade(table: pa.Table) -> pa.Table:
    """A version-1 table with the version-2 columns derived from its `args` (version 2 is returned as is)."""
    if all(c in table.column_names for c in _V2_COLUMNS):
        return table
    kinds, ops = table.column("kind").to_pylist(), table.column("op").to_pylist()
    args = [_args(a) for a in (table.column("args").to_pylist() if "args" in table.column_names
                               else [None] * table.num_rows)]
    derived = {
        "async_op": [bool(a.get("async_op", False)) if k in ("collective", "p2p") else None
                     for k, a in zip(kinds, args, strict=True)],
        "waits_for": [a.get("waits_for") if k == "event_wait" else None for k, a in zip(kinds, args, strict=True)],
        "blocking": [blocking_copy(o, a) if k == "memcpy" else None for k, o, a in zip(kinds, ops, args, strict=True)],
    }
    for name, values in derived.items():
        if name not in table.column_names:
            table = table.append_column(TRACE_SCHEMA.field(name), pa.array(values, type=TRACE_SCHEMA.field(name).type))
    return table


def conform(table: pa.Table, rank: int) -> pa.Table:
    """Any readable trace table as TRACE_SCHEMA: the rank column first, missing columns null, upgraded."""
    table = upgrade(table)
    if "rank" in table.column_names:
        table = table.drop_columns(["rank"])
    n = table.num_rows
    cols = [pa.array([rank] * n, type=pa.int32())]
    for f in TRACE_SCHEMA:
        if f.name == "rank":
            continue
        if f.name in table.column_names:
            cols.append(pc.cast(table.column(f.name), f.type))
        else:
            cols.append(pa.nulls(n, type=f.type))
    return pa.Table.from_arrays(cols, schema=TRACE_SCHEMA)
