"""Fault injection on the warehouse: a corrupt measurement file and a damaged DuckDB file.

What must hold: the damaged file is named; every other chunk is still read in full; training on the
partition refuses rather than train on less, so the registry's champion does not move; the DuckDB
file (views only) is rebuilt from the Parquet files, losing nothing."""

import pyarrow as pa
import pytest

from maya_models.reference import load_reference
from maya_models.warehouse import (
    WarehouseError,
    connect,
    partition_dir,
    read_measurements,
    scan_corrupt,
    write_measurements,
)

ROWS = 300  # per chunk


@pytest.fixture
def wh(tmp_path, monkeypatch):
    """A warehouse with two chunks of H100 GEMM measurements."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MAYA_MODEL_CACHE", str(tmp_path / "model_cache"))
    gemm = load_reference(["aiconfigurator_gemm"], gpu="h100")
    gemm = gemm[gemm["op"] == "aten::mm"].sample(2 * ROWS, random_state=0).assign(source="maya-bench")
    root = tmp_path / "warehouse"
    for chunk in range(2):
        part = gemm.iloc[chunk * ROWS:(chunk + 1) * ROWS].reset_index(drop=True)
        write_measurements(pa.Table.from_pandas(part, preserve_index=False), root=root, gpu="h100",
                           source="maya-bench", run_id="run1", chunk=chunk)
    return root


def corrupt(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 3: len(data) // 3 + 64] = b"\xff" * 64  # a damaged page in the middle
    data[-12:] = b"\x00" * 12  # and the footer
    path.write_bytes(bytes(data))


def test_a_corrupt_chunk_is_named_the_rest_kept_and_the_champion_does_not_move(wh):
    from maya_models.registry import champion_version, latest_version
    from maya_models.train import publish, train_kernel_predictor
    from pipelines.calibration.checks import parquet_integrity

    train_kernel_predictor("h100", root=wh, num_rounds=5)
    assert publish("h100", kind="kernels", root=wh)["promoted"] and champion_version("kernels", "h100") == "1"
    bad = partition_dir("h100", "maya-bench", wh) / "run1-00001.parquet"
    corrupt(bad)
    assert [p for p, _ in scan_corrupt(wh)] == [bad]
    check = parquet_integrity(scan_corrupt(wh))  # the Dagster check that blocks training downstream
    assert not check.passed and str(bad) in check.description
    with pytest.raises(WarehouseError, match="run1-00001.parquet"):
        read_measurements(root=wh)
    assert len(read_measurements(root=wh, skip_corrupt=True)) == ROWS  # the whole other chunk, nothing less
    with pytest.raises(WarehouseError, match="corrupt measurement file .*run1-00001.parquet"):
        train_kernel_predictor("h100", root=wh, num_rounds=5)
    assert champion_version("kernels", "h100") == "1" and latest_version("kernels", "h100") == "1"


def test_a_damaged_duckdb_file_is_rebuilt_from_the_parquet_files(wh, capsys):
    connect(wh).close()
    db = wh / "maya.duckdb"
    db.write_bytes(b"not a database" * 1000)
    con = connect(wh, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM measurements").fetchone()[0] == 2 * ROWS
    finally:
        con.close()
    err = capsys.readouterr().err
    assert f"{db} was not a readable DuckDB file" in err and "nothing was lost" in err
    assert len(list(wh.glob("maya.duckdb.damaged-*"))) == 1  # kept aside for a look, never read again
