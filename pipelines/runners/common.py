"""What every runner shares: run folders, plans, measurement rows, chunked writes, progress.

A run is identified by `run_id`. Its plan (the ordered list of work, cut into chunks) is written
once to `<warehouse>/runs/gpu=<gpu>/<run_id>/<suite>.plan.json`; a resumed run reads that plan
back, so chunk N means the same work on every attempt and `completed_chunks` (from
`maya_models.warehouse`) can be trusted to skip finished chunks. Chunks are written to the
warehouse atomically, so an interrupted run leaves whole chunks or nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from maya_models.schema import MEASUREMENT_SCHEMA_VERSION
from pipelines.runners import pipes

SOURCE = "maya-bench"


def run_dir(root: Path, gpu: str, run_id: str) -> Path:
    return Path(root) / "runs" / f"gpu={gpu}" / run_id


def write_json_atomic(path: Path, obj) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, default=str)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_or_write_plan(path: Path, make_plan) -> tuple[list, bool]:
    """The run's plan: read back when resuming (True), else made by `make_plan()` and saved (False)."""
    path = Path(path)
    if path.exists():
        with open(path) as f:
            return json.load(f)["chunks"], True
    chunks = make_plan()
    write_json_atomic(path, {"created_at": now().isoformat(), "chunks": chunks})
    return chunks, False


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def base_row(*, gpu: str, run_id: str, device_name: str, software: str, threads: int | None) -> dict:
    """Columns every row of one run shares (where and how it was measured)."""
    return {"gpu": gpu, "source": SOURCE, "run_id": run_id, "device_name": device_name, "software": software,
            "threads": threads, "schema_version": MEASUREMENT_SCHEMA_VERSION}


def timing_columns(t) -> dict:
    return {"duration_s": t.median_s, "duration_min_s": t.min_s, "spread": t.spread, "repeats": t.repeats,
            "status": "ok", "error": None, "clock_mhz": t.clock_mhz, "clock_drop": bool(t.clock_drop),
            "power_w": t.power_w, "timing": t.timing, "measured_at": now()}


def failed_columns(reason: str) -> dict:
    return {"duration_s": None, "duration_min_s": None, "spread": None, "repeats": 0, "status": "failed",
            "error": reason, "clock_mhz": None, "clock_drop": False, "measured_at": now()}


def rows_to_table(rows: list[dict]):
    import pyarrow as pa

    from maya_models.warehouse import to_measurement_table

    return to_measurement_table(pa.Table.from_pylist(rows))


class Progress:
    """A one-line progress bar on stderr (a plain line per update when not a terminal); under Dagster each
    update is a live Pipes log line and a numeric progress message (`pipelines.runners.pipes`)."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.done, self.t0 = max(total, 1), label, 0, time.monotonic()
        self.tty = sys.stderr.isatty() and pipes.pipes() is None

    def update(self, done: int, note: str = "", **figures) -> None:
        self.done = done
        frac = min(done / self.total, 1.0)
        bar = "#" * int(frac * 30)
        line = f"{self.label} [{bar:<30}] {done}/{self.total} {time.monotonic() - self.t0:6.1f}s {note}"
        pipes.progress(self.label, done, self.total, elapsed_s=round(time.monotonic() - self.t0, 1), **figures)
        if self.tty:
            sys.stderr.write("\r" + line[:150])
            sys.stderr.flush()
        else:
            pipes.say(line)

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def emit_summary(summary: dict, path: str | None) -> None:
    """The runner's result: a JSON file for the asset that launched it, and a last stdout line."""
    if path:
        write_json_atomic(Path(path), summary)
    if pipes.pipes() is not None:
        pipes.say(f"{summary.get('suite', 'runner')} done: " + ", ".join(
            f"{k}={v}" for k, v in summary.items() if isinstance(v, int | float | str) and k != "suite"))
    print("MAYA-SUMMARY " + json.dumps(summary, default=str), flush=True)
