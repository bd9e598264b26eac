"""Harvest op signatures from emulator output folders (trace-driven calibration).

A workload's trace lists exactly the kernels it needs on the target GPU; benchmarking those very
signatures on that GPU removes the predictor's interpolation error for them. Only pyarrow is
needed, so a bare GPU node can harvest the traces it was given.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from emulator.core.ops import canonical_op, is_view_op
from pipelines.runners.replay import Signature

_COLUMNS = ["kind", "op", "shapes", "dtypes", "strides", "args", "out_shapes", "out_dtypes"]
TIMED_KINDS = ("kernel", "memset", "memcpy")


def trace_files(folder: Path) -> list[Path]:
    """Every rank's trace file under an emulation output folder (or a folder of such folders)."""
    folder = Path(folder)
    direct = sorted(folder.glob("trace/rank=*/part-*.parquet"))
    return direct or sorted(folder.glob("*/trace/rank=*/part-*.parquet"))


def harvest(folders, origin_prefix: str = "trace") -> list[Signature]:
    """Unique timed signatures (kernels, memsets, memcpys) in the traces, in first-seen order."""
    out: dict[str, Signature] = {}
    for folder in folders:
        files = trace_files(Path(folder))
        if not files:
            raise FileNotFoundError(f"{folder}: no trace/rank=*/part-*.parquet (is it a `maya emulate` output?)")
        for f in files:
            table = pq.read_table(f, columns=[c for c in _COLUMNS if c in pq.read_schema(f).names])
            for row in table.to_pylist():
                sig = signature_of_row(row, f"{origin_prefix}:{Path(folder).name}")
                if sig is not None and sig.key not in out:
                    out[sig.key] = sig
    return list(out.values())


def signature_of_row(row: dict, origin: str, generated: bool = False) -> Signature | None:
    """The timed signature a trace row records (None for rows no benchmark times: views, host calls, ...).
    `generated`: keep Inductor's C++ kernels too (`cpp::*`: timed where a profile ran them; a replay has no op
    to call for them)."""
    kind, op = row.get("kind"), row.get("op") or ""
    if kind not in TIMED_KINDS:
        return None
    if not op.startswith("memcpy::"):
        op = canonical_op(op)
        if is_view_op(op) or not op.startswith(("aten::", "cpp::") if generated else "aten::"):
            return None
    shapes = row.get("shapes") or []
    strides = row.get("strides")
    if strides is not None and len(strides) != len(shapes):
        strides = None
    try:
        return Signature.make(op, shapes, row.get("dtypes") or [], strides, row.get("args") or {},
                              kind="memcpy" if kind == "memcpy" else "kernel",
                              out_shapes=tuple(tuple(s) for s in row["out_shapes"]) if row.get("out_shapes") else None,
                              out_dtypes=tuple(row["out_dtypes"]) if row.get("out_dtypes") else None,
                              origin=origin)
    except (TypeError, ValueError):
        return None


def to_json(sig: Signature) -> dict:
    return {"op": sig.op, "shapes": [list(s) for s in sig.shapes], "dtypes": list(sig.dtypes),
            "strides": None if sig.strides is None else [list(s) for s in sig.strides], "args": sig.args,
            "kind": sig.kind, "out_shapes": None if sig.out_shapes is None else [list(s) for s in sig.out_shapes],
            "out_dtypes": None if sig.out_dtypes is None else list(sig.out_dtypes), "origin": sig.origin}


def from_json(d: dict) -> Signature:
    return Signature.make(d["op"], d["shapes"], d["dtypes"], d.get("strides"), json.loads(d.get("args") or "{}"),
                          kind=d.get("kind", "kernel"),
                          out_shapes=tuple(tuple(s) for s in d["out_shapes"]) if d.get("out_shapes") else None,
                          out_dtypes=tuple(d["out_dtypes"]) if d.get("out_dtypes") else None,
                          origin=d.get("origin", "sweep"))
