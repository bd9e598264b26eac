"""Search results as data, under `<warehouse>/search/`:

    trials/<key>.parquet          one row per trial (emulator.search.trial: knobs-free, shared by every search)
    runs/<search id>/trials.parquet  what one search asked, in order: knobs, outcome (executed / cached /
                                  skipped / infeasible), status, reason, objective, trial key
    runs/<search id>/search.json  how to run the search again (space file text, program, options) and
                                  its last summary and answer
    saved/<name>.json             a search saved by name (`maya search --name`) and the history of its
                                  answers: what the Dagster schedule reruns (pipelines/search/assets.py)
    emulations/<emulation key>/   the traces, so new predictors only re-simulate
    tracebacks/<key>.txt, logs/<key>.log, clusters/<hash>.json

Every file is written atomically (`emulator.core.files`), so a Ctrl-C never leaves half a row; the
cache is the set of trial files. DuckDB views `search_trials` and `search_runs` in
`<warehouse>/maya.duckdb` read them (`create_views`; emulator does not import maya_models, so the
views are made here with duckdb directly, as maya_models.warehouse makes the measurement views).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from emulator.core import settings
from emulator.core.files import atomic_write_bytes, atomic_write_parquet

TRIAL_SCHEMA = pa.schema([
    ("key", pa.string()), ("emulation_key", pa.string()), ("program", pa.string()), ("program_hash", pa.string()),
    ("argv", pa.string()), ("env", pa.string()), ("gpu", pa.string()), ("nnodes", pa.int32()),
    ("nproc_per_node", pa.int32()), ("world_size", pa.int32()), ("cluster", pa.string()),
    ("predictors", pa.string()), ("roofline_only", pa.bool_()), ("status", pa.string()), ("reason", pa.string()),
    ("traceback_path", pa.string()), ("iteration_time_s", pa.float64()), ("tokens_per_iteration", pa.float64()),
    ("tokens_per_s", pa.float64()), ("mfu", pa.float64()), ("peak_memory_bytes", pa.int64()),
    ("peak_memory_bytes_per_rank", pa.string()), ("memory_capacity_bytes", pa.int64()),
    ("cost_per_iteration_usd", pa.float64()), ("cost_per_million_tokens_usd", pa.float64()),
    ("price_per_gpu_hour", pa.float64()), ("command", pa.string()), ("emulation_reused", pa.bool_()),
    ("emulation_wall_s", pa.float64()), ("simulation_wall_s", pa.float64()), ("trial_wall_s", pa.float64()),
    ("estimator", pa.string()), ("bound_by", pa.string()),
    ("iteration_time_low_s", pa.float64()), ("iteration_time_high_s", pa.float64()),  # a host-bound step's range
])
RUN_SCHEMA = pa.schema([
    ("search_id", pa.string()), ("n", pa.int32()), ("knobs", pa.string()), ("outcome", pa.string()),
    ("status", pa.string()), ("reason", pa.string()), ("objective", pa.float64()), ("key", pa.string()),
])


def search_root(warehouse: Path | None = None) -> Path:
    return Path(warehouse or settings.warehouse_root()) / "search"


class Store:
    def __init__(self, root: Path | None = None):
        self.root = Path(root or search_root())

    def trial_path(self, key: str) -> Path:
        return self.root / "trials" / f"{key}.parquet"

    def load(self) -> dict[str, dict]:
        """Every stored trial by key (the cache). An unreadable file is skipped: its trial runs again."""
        out: dict[str, dict] = {}
        for path in sorted((self.root / "trials").glob("*.parquet")):
            try:
                rows = pq.read_table(path).to_pylist()
            except (OSError, pa.ArrowInvalid):
                continue
            for r in rows:
                out[r["key"]] = r
        return out

    def put(self, row: dict) -> Path:
        path = self.trial_path(row["key"])
        table = pa.Table.from_pylist([{f.name: row.get(f.name) for f in TRIAL_SCHEMA}], schema=TRIAL_SCHEMA)
        atomic_write_parquet(table, path)
        return path

    def run_dir(self, search_id: str) -> Path:
        return self.root / "runs" / search_id

    def write_run(self, search_id: str, rows: list[dict]) -> Path:
        path = self.run_dir(search_id) / "trials.parquet"
        table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in RUN_SCHEMA} | {"search_id": search_id}
                                      for r in rows], schema=RUN_SCHEMA)
        atomic_write_parquet(table, path)
        return path

    def write_meta(self, search_id: str, meta: dict) -> Path:
        path = self.run_dir(search_id) / "search.json"
        atomic_write_bytes(path, json.dumps(meta, indent=1, sort_keys=True, default=str).encode())
        return path

    def read_meta(self, search_id: str) -> dict:
        return json.loads((self.run_dir(search_id) / "search.json").read_text())

    def searches(self) -> list[str]:
        return sorted(p.parent.name for p in (self.root / "runs").glob("*/search.json"))

    def save(self, name: str, search_id: str) -> Path:
        """Keep `search_id` under `name` (its answer history is kept when the name is saved again)."""
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"a search name is letters, digits, - and _, got {name!r}")
        path = self.root / "saved" / f"{name}.json"
        doc = json.loads(path.read_text()) if path.exists() else {"answers": []}
        doc.update(name=name, search_id=search_id)
        atomic_write_bytes(path, json.dumps(doc, indent=1, default=str).encode())
        return path

    def saved(self) -> dict[str, dict]:
        return {p.stem: json.loads(p.read_text()) for p in sorted((self.root / "saved").glob("*.json"))}

    def record_answer(self, name: str, answer: dict) -> dict:
        """Append an answer to a saved search's history; returns the previous answer (None the first time)."""
        path = self.root / "saved" / f"{name}.json"
        doc = json.loads(path.read_text())
        previous = doc["answers"][-1] if doc["answers"] else None
        doc["answers"].append(answer)
        atomic_write_bytes(path, json.dumps(doc, indent=1, default=str).encode())
        return previous


def create_views(warehouse: Path | None = None) -> str | None:
    """(Re)create the DuckDB views over the search files; returns a problem note instead of raising (the
    database may be open elsewhere: the Parquet files are the data, the views only a convenience)."""
    import duckdb

    wh = Path(warehouse or settings.warehouse_root())
    root = search_root(wh)
    try:
        con = duckdb.connect(str(wh / "maya.duckdb"))
    except duckdb.Error as e:
        return f"DuckDB views not updated ({e}); the Parquet files under {root} hold the results"
    try:
        for view, pattern, schema in (("search_trials", "trials/*.parquet", TRIAL_SCHEMA),
                                      ("search_runs", "runs/*/trials.parquet", RUN_SCHEMA)):
            if any(root.glob(pattern)):
                glob = str(root / pattern).replace("'", "''")
                con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM read_parquet('{glob}', "
                            "union_by_name = true)")
            else:
                empty = pa.Table.from_batches([], schema=schema)  # noqa: F841 - read by duckdb by name
                con.execute(f"CREATE OR REPLACE TABLE _empty_{view} AS SELECT * FROM empty")
                con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM _empty_{view}")
    finally:
        con.close()
    return None
