"""The check of generated kernels against KernelBench's compiled H100 timings: evaluation data kept out of
training, and the comparison a reader sees."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from emulator.core.hardware import get_gpu
from emulator.core.roofline import kernel_time
from maya_models.reference import reference_datasets
from pipelines.validation import generated_kernels as gk

SHAPE = [1024, 4096]
BYTES = 2 * 1024 * 4096 * 4.0


def _problem(name: str, loads: int, measured_s: float) -> dict:
    kernel = {"op": "triton::pointwise", "shapes": [SHAPE, SHAPE], "dtypes": ["float32"] * 2, "bytes": BYTES,
              "flops": 1024 * 4096.0, "args": json.dumps({"kernel": "k", "loads": loads, "stores": 1})}
    return {"problem": name, "measured_s": measured_s, "eager_s": measured_s, "kernels": json.dumps([kernel])}


def test_the_curated_timings_are_evaluation_data_never_imported():
    assert "kernelbench_compiled_h100" not in reference_datasets()  # the warehouse imports top-level files only
    df = pd.read_parquet(gk.kernelbench_path())
    assert len(df) >= 40 and set(df.hardware) == {gk.HARDWARE}
    assert all(k["op"].startswith("triton::") for ks in df.kernels for k in json.loads(ks))


def test_the_comparison_gives_the_fallbacks_error_and_names_stencils():
    roof = kernel_time(1024 * 4096.0, BYTES, "float32", "generated", get_gpu("h100"))
    cmp = gk.compare(pd.DataFrame([_problem("relu", 1, roof / 1.25), _problem("pool", 8, roof)]))
    assert list(cmp.kinds) == ["pointwise", "pointwise_stencil"]  # 8 loads of 2 buffers: a pooling window
    assert cmp.fallback_error.tolist() == pytest.approx([0.25, 0.0])
    assert "maya_error" not in cmp.columns  # no predictor given: the fallback alone
    s = gk.summary(cmp)
    assert s.loc["all", "problems"] == 2 and s.loc["all", "fallback MAPE"] == pytest.approx(0.125)


def test_a_problem_that_failed_to_emulate_is_dropped_with_its_error(tmp_path):
    error = ('Traceback (most recent call last):\n  File "kernelbench_problem.py", line 25, in <module>\n'
             "    compiled(*inputs)\nNotImplementedError: Could not run 'aten::empty.memory_format' with arguments "
             "from the 'CUDA' backend.\n\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace\n")
    (tmp_path / "emulation.json").write_text(json.dumps({"ok": False, "error": error}))
    assert gk._emulate(tmp_path / "unused.py", tmp_path).startswith("NotImplementedError: Could not run")
    (tmp_path / "emulation.json").write_text(json.dumps({"ok": True, "error": None}))
    assert gk._emulate(tmp_path / "unused.py", tmp_path) is None
