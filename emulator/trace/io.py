"""Reading and writing emulation output folders (traces + summaries), atomically.

    OUT/trace/rank=R/part-0.parquet   rows in TRACE_SCHEMA, one file per emulated rank
    OUT/ranks/rank=R.json             per-rank summary written by the worker that ran rank R
    OUT/emulation.json                the job summary written by the launcher

`emulation.json` keys (a contract; more are welcome):
    schema_version, ok, complete, script, module, argv, gpu, gpu_name, world_size, nnodes,
    nproc_per_node, torch_version, iterations_requested, iterations_found,
    peak_allocated_bytes{rank: int}, peak_reserved_bytes{rank: int}, oom, oom_ranks,
    unsupported_ops{op: count}, placeholders{kind: count}, emulation_wall_s,
    ranks_emulated[list], rank_map{rank: representative rank}, groups[{name, ranks}],
    failed_rank, error (the failing rank's original traceback)
Per-rank json keys: rank, ok, error, oom, peak_allocated, peak_reserved, iterations,
    unsupported_ops, placeholders, wall_s, op_hash, groups, n_events, torch_version, gpu
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from emulator.core.files import atomic_write_bytes, atomic_write_parquet
from emulator.trace.schema import TRACE_SCHEMA, check_schema

EMULATION_JSON = "emulation.json"


def write_json(path: Path, obj: dict) -> None:
    atomic_write_bytes(Path(path), json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def read_json(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)


def rank_trace_path(out: Path, rank: int) -> Path:
    return Path(out) / "trace" / f"rank={rank}" / "part-0.parquet"


def rank_summary_path(out: Path, rank: int) -> Path:
    return Path(out) / "ranks" / f"rank={rank}.json"


def write_rank_trace(out: Path, rank: int, table: pa.Table) -> Path:
    """Write one rank's trace (cast to TRACE_SCHEMA) via a temp file + rename."""
    path = rank_trace_path(out, rank)
    atomic_write_parquet(table.select(TRACE_SCHEMA.names).cast(TRACE_SCHEMA), path)
    return path


def read_rank_trace(out: Path, rank: int) -> pa.Table:
    path = rank_trace_path(out, rank)
    table = pq.read_table(path)
    check_schema(table.schema, str(path))
    return table


def emulated_ranks(out: Path) -> list[int]:
    base = Path(out) / "trace"
    if not base.is_dir():
        return []
    return sorted(int(p.name.split("=", 1)[1]) for p in base.iterdir() if p.name.startswith("rank="))


def read_traces(out: Path) -> dict[int, pa.Table]:
    """Every emulated rank's trace, by rank (deduplicated ranks are not expanded here)."""
    return {r: read_rank_trace(out, r) for r in emulated_ranks(out)}


def read_summary(out: Path) -> dict:
    path = Path(out) / EMULATION_JSON
    if not path.exists():
        raise FileNotFoundError(f"{out}: no {EMULATION_JSON}; is this a `maya emulate` output folder?")
    return read_json(path)


def write_summary(out: Path, summary: dict) -> None:
    write_json(Path(out) / EMULATION_JSON, summary)
