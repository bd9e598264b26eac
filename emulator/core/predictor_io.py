"""The predictor contract: which columns a predictor reads from trace rows and what it returns.

Predictors (the learned ones in the MLflow registry, `maya_models.pyfunc`, and the analytical
fallback, `emulator.estimate.roofline`) take a pandas frame of trace rows and return one
duration per row. One list of columns, here, for the emulator that builds the frames and for
the models that read them.

Input: `kind, op, shapes, dtypes, strides, args, out_shapes, out_dtypes` (list columns as JSON
strings: MLflow signatures cannot express ragged nested lists), `flops, bytes`, and for
collective/p2p rows `collective, coll_bytes, group_size, nnodes, gpus_per_node`.
Output: `duration_s` (seconds, > 0) and `source` (`learned` | `fallback`); optionally `adjustment_s`, the
seconds of `duration_s` an analytical training-condition adjustment added (maya_models.kernels: the
sustained clock), which reports count apart.
"""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

STRING_COLUMNS = ("kind", "op", "shapes", "dtypes", "strides", "args", "out_shapes", "out_dtypes")
NUMERIC_COLUMNS = ("flops", "bytes")
SIGNATURE_COLUMNS = (*STRING_COLUMNS, *NUMERIC_COLUMNS)
JSON_COLUMNS = ("shapes", "dtypes", "strides", "out_shapes", "out_dtypes")
COMM_STRING_COLUMNS = ("collective",)
COMM_NUMERIC_COLUMNS = ("coll_bytes", "group_size", "nnodes", "gpus_per_node")
COMM_COLUMNS = (*COMM_STRING_COLUMNS, *COMM_NUMERIC_COLUMNS)
OUTPUT_COLUMNS = ("duration_s", "source")
OPTIONAL_OUTPUT_COLUMNS = ("adjustment_s",)
LEARNED, FALLBACK = "learned", "fallback"


def _json(v) -> str:
    return json.dumps(v, separators=(",", ":")) if v is not None else "[]"


_UNSAFE = r"[^A-Za-z0-9_.:/ -]"  # characters outside this set (JSON might escape them) take the slow path


def _joined(offsets: pa.Array, items: pa.Array, null: pa.Array, none: str) -> pa.Array:
    """Per list (given by `offsets` over `items`, JSON texts), "[" + items joined by "," + "]"; `none` for null."""
    lists = pa.ListArray.from_arrays(offsets, items, mask=null)
    body = pc.binary_join(lists, ",")
    return pc.fill_null(pc.binary_join_element_wise("[", body, "]", ""), none)


def json_lists(column: pa.ChunkedArray | pa.Array) -> list[str] | None:
    """`_json` of every value of a list<list<int64>> or list<string> column, computed by Arrow (the same text,
    about 100x faster than json.dumps per row); None for a column it does not cover (the caller falls back)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_list(arr.type) or arr.offset:
        return None
    inner = arr.values
    if pa.types.is_list(inner.type) and pa.types.is_integer(inner.type.value_type) and not inner.offset:
        items = _joined(inner.offsets, pc.cast(inner.values, pa.string()), inner.is_null(), "null")
    elif pa.types.is_string(inner.type):
        if pc.any(pc.match_substring_regex(inner, _UNSAFE)).as_py():
            return None
        items = pc.fill_null(pc.binary_join_element_wise('"', inner, '"', ""), "null")
    else:
        return None
    return _joined(arr.offsets, items, arr.is_null(), "[]").to_pylist()


def signature_frame(table: pa.Table, rows: list[int]) -> pd.DataFrame:
    """Trace rows `rows` of a pyarrow table as a predictor's input frame (list columns as JSON)."""
    sub = table.select([c for c in SIGNATURE_COLUMNS if c in table.column_names]).take(pa.array(rows, type=pa.int64()))
    data = {}
    for c in SIGNATURE_COLUMNS:
        if c in JSON_COLUMNS and c in sub.column_names:
            vals = json_lists(sub.column(c))
            if vals is not None:
                data[c] = vals
                continue
        vals = sub.column(c).to_pylist() if c in sub.column_names else [None] * len(rows)
        if c in JSON_COLUMNS:
            vals = [_json(v) for v in vals]
        elif c == "args":
            vals = [v if v else "{}" for v in vals]
        elif c in NUMERIC_COLUMNS:
            vals = [float(v) if v is not None else 0.0 for v in vals]
        data[c] = vals
    return pd.DataFrame(data)
