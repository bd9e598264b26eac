"""Reading and writing an output folder's traces and summaries (paths in `emulator.trace.layout`).

Every write is atomic (a temp file renamed over the target): a reader sees the old file or the
new one, never a partial one. Reads check what they read and name the file when it is wrong: a
truncated or foreign file is a `DamagedFile` (one line for the user), never a pyarrow traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from emulator.core.files import atomic_write_bytes, atomic_write_parquet
from emulator.trace.layout import EMULATION_JSON, emulated_ranks, rank_summary_path, rank_trace_path
from emulator.trace.schema import FILE_SCHEMA, check_schema, conform
from emulator.trace.summaries import EmulationSummary, RankSummary

_RERUN = "re-run `maya emulate` into this folder"


class DamagedFile(ValueError):
    """A file of an output folder that cannot be read as what it should be (truncated, not JSON, not Parquet)."""


def write_json(path: Path, obj: dict) -> None:
    atomic_write_bytes(Path(path), json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DamagedFile(f"{path}: not valid JSON ({e}); the file is truncated or damaged, {_RERUN}") from None


def write_rank_trace(out: Path, rank: int, table: pa.Table) -> Path:
    """Write one rank's trace: every TRACE_SCHEMA column but `rank`, which the folder name carries."""
    path = rank_trace_path(out, rank)
    atomic_write_parquet(table.select(FILE_SCHEMA.names).cast(FILE_SCHEMA), path)
    return path


def read_rank_trace(out: Path, rank: int) -> pa.Table:
    """One rank's trace as TRACE_SCHEMA (the rank column first; a version-1 file upgraded)."""
    path = rank_trace_path(out, rank)
    try:
        table = pq.read_table(path, partitioning=None)
    except FileNotFoundError:
        raise DamagedFile(f"{path}: no such file, although its rank's folder is there; {_RERUN}") from None
    except (pa.ArrowException, OSError) as e:
        raise DamagedFile(f"{path}: not a readable Parquet file ({type(e).__name__}: {_first_line(e)}); "
                          f"the file is truncated or damaged, {_RERUN}") from None
    check_schema(table.schema, str(path))
    try:
        return conform(table, rank)
    except (pa.ArrowException, TypeError) as e:
        raise DamagedFile(f"{path}: a column has the wrong type ({_first_line(e)}); {_RERUN}") from None


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0]


def read_traces(out: Path) -> dict[int, pa.Table]:
    """Every emulated rank's trace, by rank (deduplicated ranks are not expanded here)."""
    return {r: read_rank_trace(out, r) for r in emulated_ranks(out)}


def write_rank_summary(out: Path, summary: RankSummary) -> None:
    write_json(rank_summary_path(out, summary.rank), summary.to_json())


def read_rank_summary(out: Path, rank: int) -> RankSummary:
    return RankSummary.from_json(read_json(rank_summary_path(out, rank)))


def read_summary(out: Path) -> EmulationSummary:
    path = Path(out) / EMULATION_JSON
    if not path.exists():
        raise FileNotFoundError(f"{out}: no {EMULATION_JSON}; is this a `maya emulate` output folder?")
    return EmulationSummary.from_json(read_json(path), str(path))


def write_summary(out: Path, summary: EmulationSummary) -> None:
    write_json(Path(out) / EMULATION_JSON, summary.to_json())
