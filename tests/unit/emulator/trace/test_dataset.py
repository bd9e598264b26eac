"""`OUT/trace` reads as one table with pandas, pyarrow's dataset API and DuckDB (hive partitions by rank)."""

import duckdb
import pandas as pd
import pyarrow.dataset as ds

from emulator.bench.synthetic import ddp_rank, write_job


def test_the_trace_folder_is_one_table_for_pandas_pyarrow_and_duckdb(tmp_path):
    tables = {r: ddp_rank(r, 2, iterations=1).table() for r in range(2)}
    out = write_job(tmp_path / "out", tables)
    rows = sum(t.num_rows for t in tables.values())
    df = pd.read_parquet(out / "trace")
    assert len(df) == rows and sorted(df["rank"].astype(int).unique()) == [0, 1]
    table = ds.dataset(out / "trace", partitioning="hive").to_table()
    assert table.num_rows == rows and set(table.column("rank").to_pylist()) == {0, 1}
    glob = str(out / "trace" / "*" / "*.parquet")
    n, ranks = duckdb.sql(f"select count(*), count(distinct rank) from read_parquet('{glob}', "
                          "hive_partitioning = true)").fetchall()[0]
    assert (n, ranks) == (rows, 2)
