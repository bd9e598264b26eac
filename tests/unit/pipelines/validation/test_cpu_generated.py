"""Leaving one compiled CPU program out: every program is scored by a model that never saw its rows."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from emulator.core.hardware import get_gpu
from maya_models.features import featurize
from pipelines.validation import cpu_generated


def _program(name: str, width: int, seconds_per_byte: float) -> list[dict]:
    rows = []
    for i in range(32):  # 16 of each kind: in two programs, past MIN_SEEN_ROWS after the held-out split
        n = 4096 * (i + 1) * width // 64
        work = {"loads": 2 + i % 3, "stores": 1, "transcendental": i % 2, "read_bytes": 8 * n, "write_bytes": 4 * n,
                "step_elems": 3 * n, "transcendental_elems": n * (i % 2), "numel": n}
        rows.append({"gpu": "cpu", "kind": "kernel", "family": "generated", "status": "ok", "timing": "in_training",
                     "op": "cpp::reduction" if i % 2 else "cpp::pointwise", "shapes": [[n // width, width]] * 2,
                     "dtypes": ["float32"] * 2, "strides": [[width, 1]] * 2, "args": json.dumps(work),
                     "signature": f"{name}-{i}", "source": "maya-in-training", "run_id": "r1",
                     "duration_s": 12 * n * seconds_per_byte, "repeats": 4.0,
                     "provenance": f"maya profile examples/gpt_single.py {name}"})
    return rows


def test_each_program_is_predicted_by_a_model_trained_on_the_others():
    # two programs whose kernels take 1e-10 s a byte and one at twice that: the left-out slow one is timed at the
    # others' rate, which a model that had seen its rows would not do
    rows = pd.DataFrame(_program("a", 64, 1e-10) + _program("b", 128, 1e-10) + _program("slow", 256, 2e-10))
    results = cpu_generated.leave_one_program_out(rows)
    assert [r["program"].rsplit(" ", 1)[-1] for r in results] == ["a", "b", "slow"]
    for r in results:
        assert r["kernels"] == 32 and r["learned_share"] == 1.0
        one = rows[rows.provenance == r["program"]].reset_index(drop=True)
        assert r["roofline_s"] == pytest.approx((featurize(one, get_gpu("cpu"))["roofline_s"] * 4).sum())
    assert results[2]["learned_s"] == pytest.approx(results[2]["measured_s"] / 2, rel=0.15)
    assert "mean |error|" in cpu_generated.report(results)


def test_a_warehouse_without_compiled_programs_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_generated, "compiled_rows", lambda root: pd.DataFrame())
    with pytest.raises(SystemExit, match="maya calibrate --gpu cpu"):
        cpu_generated.main(["--root", str(tmp_path)])
