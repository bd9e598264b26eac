"""Atomic file writes: a reader sees the old file or the new one, never a partial one.

One helper for every writer in maya (traces, summaries, warehouse chunks, reports): write to a
temporary file in the same folder, then rename over the target.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def _temp_beside(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    return tmp


def _publish(tmp: str, path: Path) -> None:
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; outputs are for everyone to read
    os.replace(tmp, path)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    tmp = _temp_beside(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        _publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_parquet(table: pa.Table, path: Path) -> None:
    path = Path(path)
    tmp = _temp_beside(path)
    try:
        pq.write_table(table, tmp, compression="zstd")
        _publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
