"""The measurement schema: one row per timed op signature on one device.

Every row in the warehouse is a real measurement: from maya's benchmark runners on a
device (CPU or GPU) or from a public dataset with provenance (`source`, `provenance`).
The op-signature columns (`op, shapes, dtypes, strides, args, out_shapes, out_dtypes`) are
exactly the trace's (see emulator.core.ops), so features are computed by one function for both.

Warehouse layout (root = $MAYA_WAREHOUSE, default ./warehouse):
    measurements/gpu=<key>/source=<source>/<run_id>-<chunk>.parquet   (hive partitioned)
    reference/                                                        committed public data
    maya.duckdb                                                       views over the above

This module imports only pyarrow so the benchmark runners can use it on a bare GPU node.
"""

from __future__ import annotations

import pyarrow as pa

MEASUREMENT_SCHEMA_VERSION = 1

_shape_list = pa.list_(pa.list_(pa.int64()))

MEASUREMENT_SCHEMA = pa.schema([
    # what was timed (the op signature, same columns as the trace)
    pa.field("kind", pa.string(), nullable=False),  # kernel | collective | p2p | memcpy
    pa.field("op", pa.string(), nullable=False),
    pa.field("family", pa.string(), nullable=False),  # emulator.core.ops.op_family(op)
    pa.field("shapes", _shape_list),
    pa.field("dtypes", pa.list_(pa.string())),
    pa.field("strides", _shape_list),
    pa.field("args", pa.string()),
    pa.field("out_shapes", _shape_list),
    pa.field("out_dtypes", pa.list_(pa.string())),
    pa.field("signature", pa.string(), nullable=False),  # stable hash of the op signature (dedup key)
    # collectives
    pa.field("coll_bytes", pa.int64()),  # nccl-tests convention
    pa.field("group_size", pa.int32()),
    pa.field("nnodes", pa.int32()),
    pa.field("gpus_per_node", pa.int32()),
    # the timing
    pa.field("duration_s", pa.float64()),  # median over repeats (null when status != ok)
    pa.field("duration_min_s", pa.float64()),
    pa.field("spread", pa.float64()),  # (p90 - p10) / median over repeats
    pa.field("repeats", pa.int32()),
    pa.field("status", pa.string(), nullable=False),  # ok | failed
    pa.field("error", pa.string()),  # reason when failed (e.g. "OutOfMemoryError: ...")
    # where and how
    pa.field("gpu", pa.string(), nullable=False),  # maya key (partition column)
    pa.field("source", pa.string(), nullable=False),  # maya-bench | aiconfigurator | vidur | neusight | vtrain ...
    pa.field("device_name", pa.string()),
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("measured_at", pa.timestamp("us", tz="UTC")),
    pa.field("clock_mhz", pa.float64()),  # SM clock sampled around the measurement (NVML), null on CPU
    pa.field("clock_drop", pa.bool_()),  # clock fell >10% below the run's max while timing
    pa.field("threads", pa.int32()),  # CPU threads used (CPU runs)
    pa.field("software", pa.string()),  # torch / CUDA / NCCL versions
    pa.field("provenance", pa.string()),  # repo@commit:path for public data; runner+args for maya-bench
    pa.field("schema_version", pa.int32(), nullable=False),
])

MEASUREMENT_COLUMNS = [f.name for f in MEASUREMENT_SCHEMA]


def signature_key(op: str, shapes, dtypes, strides, args, extra: str = "") -> str:
    """A stable short hash of an op signature (plus e.g. group size for collectives)."""
    import hashlib
    import json

    payload = json.dumps([op, shapes, dtypes, strides, args or "", extra], sort_keys=True, default=str)
    return hashlib.sha1(payload.encode()).hexdigest()[:16]
