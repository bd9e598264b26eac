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

MEASUREMENT_SCHEMA_VERSION = 2

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
    pa.field("clock_mhz", pa.float64()),  # SM clock the measurement ran at (NVML samples, or the locked clock)
    pa.field("clock_drop", pa.bool_()),  # clock fell >10% below the run's max while timing
    pa.field("power_w", pa.float64()),  # board power sampled while timing (NVML), null when not sampled
    # how the time was taken (TIMINGS): conditions a training step does not share are a feature, never mixed in
    pa.field("timing", pa.string()),
    pa.field("implementation", pa.string()),  # the kernel library when it is not the one PyTorch runs (IMPLEMENTATIONS)
    pa.field("evaluation_only", pa.bool_()),  # kept out of training: rows that check a correction
    pa.field("threads", pa.int32()),  # CPU threads used (CPU runs)
    pa.field("software", pa.string()),  # torch / CUDA / NCCL versions
    pa.field("provenance", pa.string()),  # repo@commit:path for public data; runner+args for maya-bench
    pa.field("schema_version", pa.int32(), nullable=False),
])

MEASUREMENT_COLUMNS = [f.name for f in MEASUREMENT_SCHEMA]

# How a row was timed. "Isolated" conditions run one op alone (warm-up, repeats, often CUDA-graph replay
# and locked clocks); "in situ" ones time it where a real program ran it; "sustained" back-to-back
# loops long enough for the clock to settle under the power limit.
TIMINGS = {
    "isolated_graph_locked": "CUDA-graph replay, application clocks locked at max, a few ms per shape (aiconfigurator)",
    "isolated_events": "CUDA events around eager calls, default clocks (NeuSight, FlashAttention benchmarks)",
    "back_to_back": "back-to-back launches after a heat soak, default clocks, no L2 flush (maya-bench on a GPU)",
    "host_timer": "a host clock around a synchronous call (maya-bench on the CPU)",
    "in_situ_forward": "kernel durations from a profiler trace of a model's forward pass (vidur)",
    "in_inference": "kernel durations from a profiler trace of an inference run (TraceLens)",
    "in_training": "op durations from a profile of training steps (HTA traces on GPUs, `maya profile` on the CPU)",
    "sustained": "back-to-back iterations long enough to reach the power-limited clock (MAMF)",
    "nccl_tests": "nccl-tests timings",
}
IN_SITU_TIMINGS = frozenset({"in_situ_forward", "in_inference", "in_training"})
# Kernel libraries that differ from what PyTorch runs for the same ATen op: `scaled_dot_product_attention`'s
# flash backend is FlashAttention-2; TensorRT-LLM's FMHA and FlashAttention-3 are other kernels.
IMPLEMENTATIONS = ("fa2", "trtllm_fmha", "fa3")


def signature_key(op: str, shapes, dtypes, strides, args, extra: str = "") -> str:
    """A stable short hash of an op signature (plus e.g. group size for collectives)."""
    import hashlib
    import json

    payload = json.dumps([op, shapes, dtypes, strides, args or "", extra], sort_keys=True, default=str)
    return hashlib.sha1(payload.encode()).hexdigest()[:16]
