"""The committed public measurements (`warehouse/reference/*.parquet`) and their import into the warehouse.

`curate.py` builds the Parquet files from ../shared/data/reference once; everything else (tests,
bootstrap, the Dagster `reference_measurements` asset) reads the committed copy through here, so a
fresh clone needs nothing outside the repository.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def reference_dir() -> Path:
    """$MAYA_REFERENCE, else `warehouse/reference` in the repository (emulator.core.settings.reference_root)."""
    from emulator.core.settings import reference_root

    return reference_root()


def reference_datasets(directory: Path | None = None) -> list[str]:
    d = Path(directory) if directory else reference_dir()
    return sorted(p.stem for p in d.glob("*.parquet"))


def load_reference_table(datasets: list[str] | None = None, directory: Path | None = None,
                         gpu: str | None = None) -> pa.Table:
    d = Path(directory) if directory else reference_dir()
    names = datasets or reference_datasets(d)
    if not names:
        raise FileNotFoundError(f"no reference Parquet files in {d}; run `python -m maya_models.reference.curate`")
    filters = [("gpu", "=", gpu)] if gpu else None
    return pa.concat_tables([pq.read_table(d / f"{n}.parquet", filters=filters) for n in names])


def load_reference(datasets: list[str] | None = None, directory: Path | None = None, gpu: str | None = None):
    """The committed reference measurements as a pandas DataFrame (MEASUREMENT_SCHEMA columns)."""
    return load_reference_table(datasets, directory, gpu).to_pandas()


def import_reference(root=None, datasets: list[str] | None = None, directory: Path | None = None) -> dict:
    """Write the reference measurements into the warehouse, one atomic partition swap per (gpu, source).

    Returns {"partitions": {"gpu/source": rows}, "rows": total} (Dagster metadata).
    """
    from maya_models.warehouse import replace_source

    table = load_reference_table(datasets, directory)
    df = table.select(["gpu", "source"]).to_pandas()
    parts = {}
    for (gpu, source), idx in df.groupby(["gpu", "source"]).groups.items():
        sub = table.take(pa.array(list(idx)))
        replace_source(gpu, source, sub, root=root, run_id=f"reference-{source}")
        parts[f"{gpu}/{source}"] = sub.num_rows
    return {"partitions": parts, "rows": sum(parts.values())}
