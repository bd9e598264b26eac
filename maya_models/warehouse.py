"""The measurement warehouse: hive-partitioned Parquet written atomically, DuckDB views over it.

Layout under the root (`$MAYA_WAREHOUSE`, see emulator.core.settings):

    measurements/gpu=<gpu>/source=<source>/<run_id>-<chunk:05d>.parquet
    hardware/gpu=<gpu>/<run_id>.json        hardware inventory written by the pipelines
    maya.duckdb                             views `measurements`, `kernels`, `collectives`, `hardware`

Why chunks and renames: benchmark runs on a GPU node take minutes and get interrupted. Every chunk
is written to a temporary name (not matching `*.parquet`) and renamed into place, so a reader never
sees half a file, and `completed_chunks` tells a restarted run which chunks it can skip.

The DuckDB file holds nothing but views over those files (and the schema version): when it is
damaged, `connect` moves it aside and builds it again, losing nothing; when another process holds
it (a second calibration writing the views), `connect` waits a little, then says who holds it.

Only pyarrow is imported at module import (bare GPU nodes write through this module); duckdb and
pandas are imported by the functions that need them.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from emulator.core.files import atomic_write_parquet
from maya_models.schema import MEASUREMENT_SCHEMA, MEASUREMENT_SCHEMA_VERSION

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_CHUNK_RE = re.compile(r"^(?P<run>.+)-(?P<chunk>\d{5})\.parquet$")


class WarehouseError(ValueError):
    """Bad input to the warehouse (unsafe partition name, table not castable to the schema...)."""


def _root(root) -> Path:
    if root is None:
        from emulator.core.settings import warehouse_root

        return warehouse_root()
    return Path(root)


def _check_name(what: str, value: str) -> str:
    if not isinstance(value, str) or not _SAFE.match(value) or "=" in value:
        raise WarehouseError(f"{what} {value!r} is not a safe partition name (letters, digits, . _ + -)")
    return value


def partition_dir(gpu: str, source: str, root=None) -> Path:
    return _root(root) / "measurements" / f"gpu={_check_name('gpu', gpu)}" / f"source={_check_name('source', source)}"


def to_measurement_table(table, *, gpu: str | None = None, source: str | None = None) -> pa.Table:
    """Cast a pyarrow Table / pandas DataFrame to MEASUREMENT_SCHEMA (missing nullable columns are null).

    `gpu`/`source`, when given, must agree with the rows (they name the partition).
    """
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pandas(table, preserve_index=False)
    n = table.num_rows
    cols = []
    for field in MEASUREMENT_SCHEMA:
        if field.name in table.column_names:
            col = table.column(field.name)
        elif field.name == "schema_version":
            col = pa.array([MEASUREMENT_SCHEMA_VERSION] * n, pa.int32())
        elif field.name == "gpu" and gpu is not None:
            col = pa.array([gpu] * n, pa.string())
        elif field.name == "source" and source is not None:
            col = pa.array([source] * n, pa.string())
        elif field.nullable:
            col = pa.nulls(n, field.type)
        else:
            raise WarehouseError(f"measurement table lacks required column {field.name!r}")
        try:
            col = col.cast(field.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise WarehouseError(f"column {field.name!r} cannot be cast to {field.type}: {e}") from e
        if not field.nullable and col.null_count:
            raise WarehouseError(f"column {field.name!r} has {col.null_count} null values")
        cols.append(col)
    out = pa.Table.from_arrays(cols, schema=MEASUREMENT_SCHEMA)
    for name, want in (("gpu", gpu), ("source", source)):
        if want is not None and n:
            values = set(out.column(name).to_pylist())
            if values != {want}:
                raise WarehouseError(f"rows have {name} {sorted(values)} but are written to partition {want!r}")
    return out


def write_measurements(table, *, root=None, gpu: str, source: str, run_id: str, chunk: int = 0) -> Path:
    """Write one chunk of measurements atomically; returns the file written.

    Re-writing the same (run_id, chunk) replaces that chunk, so a resumed run is idempotent.
    """
    _check_name("run_id", run_id)
    _check_name("gpu", gpu)
    _check_name("source", source)
    if not isinstance(chunk, int) or chunk < 0 or chunk > 99999:
        raise WarehouseError(f"chunk must be an int in 0..99999, got {chunk!r}")
    out = to_measurement_table(table, gpu=gpu, source=source)
    path = partition_dir(gpu, source, root) / f"{run_id}-{chunk:05d}.parquet"
    atomic_write_parquet(out, path)
    return path


def completed_chunks(gpu: str, source: str, run_id: str, root=None) -> set[int]:
    """Chunk numbers of `run_id` already in the warehouse (a resumed run skips them)."""
    d = partition_dir(gpu, source, root)
    if not d.is_dir():
        return set()
    done = set()
    for p in d.iterdir():
        m = _CHUNK_RE.match(p.name)
        if m and m.group("run") == run_id:
            done.add(int(m.group("chunk")))
    return done


def replace_source(gpu: str, source: str, table, *, root=None, run_id: str = "import") -> Path:
    """Replace every file of one (gpu, source) partition by `table`, e.g. a re-import of reference data.

    The new partition is built in a staging folder outside `measurements/` and swapped in with
    renames, so readers see either the old rows or the new ones, never a mix or a half file.
    """
    final = partition_dir(gpu, source, root)
    out = to_measurement_table(table, gpu=gpu, source=source)
    staging_base = _root(root) / ".staging"
    staging = staging_base / f"{gpu}-{source}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        atomic_write_parquet(out, staging / f"{_check_name('run_id', run_id)}-00000.parquet")
        final.parent.mkdir(parents=True, exist_ok=True)
        old = None
        if final.exists():
            old = staging_base / f"old-{gpu}-{source}-{uuid.uuid4().hex[:8]}"
            os.replace(final, old)
        os.replace(staging, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return final


def measurement_files(root=None, gpu: str | None = None, source: str | None = None) -> list[Path]:
    base = _root(root) / "measurements"
    pattern = f"gpu={gpu or '*'}/source={source or '*'}/*.parquet"
    return sorted(p for p in base.glob(pattern) if not p.name.startswith("."))


def scan_corrupt(root=None) -> list[tuple[Path, str]]:
    """Every measurement file that cannot be read in full, with the reason; other files are untouched."""
    bad = []
    for p in measurement_files(root):
        try:
            pq.read_table(p)
        except Exception as e:  # noqa: BLE001 - any failure to read is what we report
            bad.append((p, f"{type(e).__name__}: {e}"))
    return bad


def read_measurements(gpu: str | None = None, source: str | None = None, kind: str | None = None,
                      status: str | None = "ok", *, root=None, skip_corrupt: bool = False):
    """Measurements as a pandas DataFrame in MEASUREMENT_SCHEMA columns (list columns as Python lists).

    A corrupt file raises an error naming it (see `scan_corrupt`), unless `skip_corrupt`.
    """
    import pandas as pd

    tables = []
    for p in measurement_files(root, gpu, source):
        try:
            t = pq.read_table(p)
        except Exception as e:  # noqa: BLE001
            if skip_corrupt:
                continue
            raise WarehouseError(f"corrupt measurement file {p}: {type(e).__name__}: {e}") from e
        tables.append(to_measurement_table(t))
    if not tables:
        return pd.DataFrame({f.name: pd.Series(dtype=object) for f in MEASUREMENT_SCHEMA})
    df = pa.concat_tables(tables).to_pandas(maps_as_pydicts="strict")
    if kind is not None:
        df = df[df["kind"] == kind]
    if status is not None:
        df = df[df["status"] == status]
    for c in ("shapes", "strides", "out_shapes"):
        df[c] = df[c].map(lambda v: [list(map(int, s)) for s in v] if v is not None else None)
    for c in ("dtypes", "out_dtypes"):
        df[c] = df[c].map(lambda v: list(v) if v is not None else None)
    return df.reset_index(drop=True)


def snapshot(df) -> dict:
    """Row counts and a content hash of the rows a model trained on (logged to MLflow)."""
    import hashlib

    h = hashlib.sha1()
    for sig, dur in sorted(zip(df["signature"].astype(str), df["duration_s"].astype(float), strict=True)):
        h.update(f"{sig}:{dur:.6e};".encode())
    counts = df.groupby(["gpu", "source"]).size() if len(df) else {}
    return {"rows": int(len(df)), "hash": h.hexdigest()[:16],
            "by_partition": {f"{g}/{s}": int(n) for (g, s), n in dict(counts).items()}}


LOCK_WAIT_S = 10.0  # how long `connect` waits for another process's connection to the DuckDB file


def _open(duckdb, path: Path, read_only: bool, wait_s: float = LOCK_WAIT_S):
    """A connection to `path`; None when the file is not a readable DuckDB database. Waits up to `wait_s`
    while another process holds it, then raises WarehouseError naming the holder."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as e:
            msg = str(e)
            if "lock" not in msg.lower():
                if "not a valid DuckDB database" in msg or "Could not read" in msg or "Corrupt" in msg:
                    return None
                raise
            if time.monotonic() > deadline:
                raise WarehouseError(f"{path} is in use by another process for {wait_s:.0f} s ({msg}); "
                                     "another calibration writing the warehouse? Retry when it is done") from None
            time.sleep(0.2)


def connect(root=None, read_only: bool = False):
    """DuckDB connection to `<root>/maya.duckdb` with views over the Parquet files and hardware JSON."""
    import duckdb

    r = _root(root)
    r.mkdir(parents=True, exist_ok=True)
    path = r / "maya.duckdb"
    con = _open(duckdb, path, read_only)
    if con is None:  # damaged: nothing in it but views, so it is rebuilt from the Parquet files
        aside = path.with_name(f"{path.name}.damaged-{uuid.uuid4().hex[:8]}")
        os.replace(path, aside)
        print(f"maya: {path} was not a readable DuckDB file; moved it to {aside} and rebuilt its views "
              "(the measurements are the Parquet files: nothing was lost)", file=sys.stderr)
        if read_only:
            connect(r).close()
        con = _open(duckdb, path, read_only)
    if read_only:
        return con
    files = measurement_files(r)
    if files:
        glob = str(r / "measurements" / "*" / "*" / "*.parquet").replace("'", "''")
        con.execute(f"CREATE OR REPLACE VIEW measurements AS SELECT * FROM read_parquet('{glob}', "
                    "hive_partitioning = false, union_by_name = true)")
    else:
        empty = pa.Table.from_batches([], schema=MEASUREMENT_SCHEMA)  # noqa: F841 - referenced by duckdb
        con.execute("CREATE OR REPLACE TABLE _empty_measurements AS SELECT * FROM empty")
        con.execute("CREATE OR REPLACE VIEW measurements AS SELECT * FROM _empty_measurements")
    con.execute("CREATE OR REPLACE VIEW kernels AS SELECT * FROM measurements WHERE kind = 'kernel'")
    con.execute("CREATE OR REPLACE VIEW collectives AS SELECT * FROM measurements "
                "WHERE kind IN ('collective', 'p2p')")
    hw = sorted((r / "hardware").glob("gpu=*/*.json"))
    if hw:
        hglob = str(r / "hardware" / "gpu=*" / "*.json").replace("'", "''")
        con.execute(f"CREATE OR REPLACE VIEW hardware AS SELECT * FROM read_json_auto('{hglob}', "
                    "hive_partitioning = true, union_by_name = true, filename = true)")
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (component VARCHAR PRIMARY KEY, version INTEGER)")
    con.execute("INSERT OR REPLACE INTO schema_version VALUES ('measurements', ?)", [MEASUREMENT_SCHEMA_VERSION])
    return con
