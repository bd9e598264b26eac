"""Fixtures for the calibration pipeline tests: a throw-away warehouse and a small recorded trace."""

import json
from pathlib import Path

import pyarrow as pa
import pytest

from emulator.trace.io import write_rank_trace
from emulator.trace.schema import TRACE_SCHEMA


@pytest.fixture
def wh(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "warehouse"
    monkeypatch.setenv("MAYA_WAREHOUSE", str(root))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return root


def _row(seq, op, shapes, dtypes, strides=None, args=None, kind="kernel"):
    return {"rank": 0, "seq": seq, "iteration": 0, "kind": kind, "op": op, "stream": 0, "shapes": shapes,
            "dtypes": dtypes, "strides": strides, "args": json.dumps(args or {}), "module": "", "phase": "forward"}


# Rows as the emulator records them: schema-order tensors, every passed non-tensor arg by name.
TRACE_ROWS = [
    _row(0, "aten::mm", [[64, 96], [96, 128]], ["float32", "float32"], [[96, 1], [1, 96]]),  # Linear forward
    _row(1, "aten::view", [[64, 128]], ["float32"], [[128, 1]], {"size": [8, 8, 128]}),  # no kernel: skipped
    _row(2, "aten::embedding", [[500, 32], [4, 16]], ["float32", "int64"], [[32, 1], [16, 1]]),
    _row(3, "aten::nll_loss_forward", [[8, 100], [8]], ["float32", "int64"], [[100, 1], [1]],
         {"weight": None, "reduction": 1, "ignore_index": -100}),
    _row(4, "aten::_fused_adamw_", [[16, 16], [16, 16], [16, 16], [16, 16], []], ["float32"] * 5,
         [[16, 1]] * 4 + [[]],
         {"list_lengths": [1, 1, 1, 1, 0, 1], "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.01,
          "eps": 1e-8, "amsgrad": False, "maximize": False, "grad_scale": None, "found_inf": None}),
    _row(5, "aten::_scaled_dot_product_flash_attention", [[1, 2, 64, 32]] * 3, ["bfloat16"] * 3,
         [[4096, 2048, 32, 1]] * 3, {"is_causal": True}),  # a CUDA-only kernel name
    _row(6, "c10d::allreduce_", [[1024]], ["float32"], [[1]], {}, kind="collective"),  # not a kernel
    _row(7, "aten::mm", [[64, 96], [96, 128]], ["float32", "float32"], [[96, 1], [1, 96]]),  # repeat: one row
]


@pytest.fixture
def trace_dir(tmp_path) -> Path:
    out = tmp_path / "emulated-run"
    write_rank_trace(out, 0, pa.Table.from_pylist(TRACE_ROWS, schema=TRACE_SCHEMA))
    (out / "emulation.json").write_text(json.dumps({"gpu": "cpu", "ok": True, "world_size": 1}))
    return out
