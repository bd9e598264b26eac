"""Warehouse I/O: atomic chunks, resume, partition swap, corrupt files named, DuckDB views."""

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from maya_models import warehouse as wh
from maya_models.schema import MEASUREMENT_COLUMNS, MEASUREMENT_SCHEMA_VERSION, signature_key


def _rows(n=3, gpu="h100", source="maya-bench", kind="kernel", start=0):
    rows = []
    for i in range(start, start + n):
        shapes = [[64 * (i + 1), 128], [128, 256]]
        rows.append({"kind": kind, "op": "aten::mm" if kind == "kernel" else "c10d::allreduce_",
                     "family": "gemm" if kind == "kernel" else "collective", "shapes": shapes,
                     "dtypes": ["bfloat16", "bfloat16"], "strides": [[128, 1], [1, 128]], "args": "{}",
                     "signature": signature_key("aten::mm", shapes, None, None, None), "duration_s": 1e-5 * (i + 1),
                     "status": "ok", "gpu": gpu, "source": source, "run_id": "r1",
                     "coll_bytes": 1024 if kind != "kernel" else None})
    return pd.DataFrame(rows)


def test_chunks_are_atomic_and_resumable(tmp_path, monkeypatch):
    wh.write_measurements(_rows(), root=tmp_path, gpu="h100", source="maya-bench", run_id="r1", chunk=0)
    wh.write_measurements(_rows(start=3), root=tmp_path, gpu="h100", source="maya-bench", run_id="r1", chunk=1)
    assert wh.completed_chunks("h100", "maya-bench", "r1", root=tmp_path) == {0, 1}
    assert wh.completed_chunks("h100", "maya-bench", "other", root=tmp_path) == set()

    def killed(*a, **k):  # the process dies while writing chunk 2
        raise KeyboardInterrupt

    monkeypatch.setattr(wh.pq, "write_table", killed)
    with pytest.raises(KeyboardInterrupt):
        wh.write_measurements(_rows(start=6), root=tmp_path, gpu="h100", source="maya-bench", run_id="r1", chunk=2)
    monkeypatch.undo()
    part = wh.partition_dir("h100", "maya-bench", tmp_path)
    assert sorted(p.name for p in part.iterdir()) == ["r1-00000.parquet", "r1-00001.parquet"]  # no partial/tmp file
    assert wh.completed_chunks("h100", "maya-bench", "r1", root=tmp_path) == {0, 1}
    # resume: rewriting a chunk replaces it, it never duplicates rows
    wh.write_measurements(_rows(start=6), root=tmp_path, gpu="h100", source="maya-bench", run_id="r1", chunk=2)
    wh.write_measurements(_rows(start=6), root=tmp_path, gpu="h100", source="maya-bench", run_id="r1", chunk=2)
    df = wh.read_measurements(root=tmp_path)
    assert len(df) == 9 and list(df.columns) == MEASUREMENT_COLUMNS
    assert df["shapes"].iloc[0] == [[64, 128], [128, 256]]


def test_bad_input_is_refused_and_writes_nothing(tmp_path):
    with pytest.raises(wh.WarehouseError, match="safe partition name"):
        wh.write_measurements(_rows(), root=tmp_path, gpu="../etc", source="x", run_id="r1")
    with pytest.raises(wh.WarehouseError, match="op"):
        wh.write_measurements(_rows().drop(columns=["op"]), root=tmp_path, gpu="h100", source="maya-bench",
                              run_id="r1")
    with pytest.raises(wh.WarehouseError, match="partition 'a100-80gb'"):
        wh.write_measurements(_rows(), root=tmp_path, gpu="a100-80gb", source="maya-bench", run_id="r1")
    assert wh.measurement_files(tmp_path) == []


def test_replace_source_swaps_a_partition(tmp_path):
    wh.write_measurements(_rows(5, source="ref"), root=tmp_path, gpu="h100", source="ref", run_id="old", chunk=0)
    wh.replace_source("h100", "ref", _rows(2, source="ref"), root=tmp_path)
    df = wh.read_measurements(root=tmp_path, source="ref")
    assert len(df) == 2
    assert [p.name for p in wh.measurement_files(tmp_path)] == ["import-00000.parquet"]
    assert not list((tmp_path / ".staging").iterdir())


def test_corrupt_file_is_named_and_nothing_else_lost(tmp_path):
    good = wh.write_measurements(_rows(), root=tmp_path, gpu="h100", source="maya-bench", run_id="r1", chunk=0)
    bad = wh.write_measurements(_rows(start=3), root=tmp_path, gpu="h100", source="maya-bench", run_id="r1", chunk=1)
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])  # truncated, as after a disk-full copy
    corrupt = wh.scan_corrupt(tmp_path)
    assert [p for p, _ in corrupt] == [bad]
    assert pq.read_table(good).num_rows == 3
    with pytest.raises(wh.WarehouseError, match="r1-00001.parquet"):
        wh.read_measurements(root=tmp_path)
    assert len(wh.read_measurements(root=tmp_path, skip_corrupt=True)) == 3


def test_duckdb_views(tmp_path):
    con = wh.connect(tmp_path)
    assert con.execute("select count(*) from measurements").fetchone()[0] == 0
    con.close()
    wh.write_measurements(_rows(3), root=tmp_path, gpu="h100", source="maya-bench", run_id="r1")
    wh.write_measurements(_rows(2, gpu="a100-80gb", kind="collective"), root=tmp_path, gpu="a100-80gb",
                          source="maya-bench", run_id="r1")
    hw = tmp_path / "hardware" / "gpu=h100"
    hw.mkdir(parents=True)
    (hw / "r1.json").write_text(json.dumps({"name": "NVIDIA H100 80GB HBM3", "driver": "550.54"}))
    con = wh.connect(tmp_path)
    assert con.execute("select count(*) from kernels").fetchone()[0] == 3
    assert con.execute("select gpu, count(*) from collectives group by gpu").fetchall() == [("a100-80gb", 2)]
    assert con.execute("select name from hardware").fetchone()[0] == "NVIDIA H100 80GB HBM3"
    assert con.execute("select version from schema_version").fetchone()[0] == MEASUREMENT_SCHEMA_VERSION
    con.close()
