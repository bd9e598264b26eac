"""Kernels torch.compile generates: a pointwise one that loads each buffer once is timed by the part's learned
elementwise family (it reads and writes its buffers once, as an ATen elementwise kernel does); a pointwise
stencil (pooling) and a reduction, whose extra reads the bytes do not count, stay the labelled fallback."""

import math

import pandas as pd
import pytest

from emulator.core.hardware import get_gpu
from emulator.core.ops import flops_and_bytes
from emulator.core.roofline import kernel_time
from maya_models.features import featurize
from maya_models.kernels import FamilyModel, KernelPredictor

H100 = get_gpu("h100")
SHAPE = [64, 1024, 1024]
ARGS = '{"kernel": "triton_poi_fused_add_mul_0", "loads": 2, "stores": 1, "numel": 67108864, "rnumel": 1}'


def _row(op: str, args: str = ARGS) -> dict:
    return {"kind": "kernel", "op": op, "shapes": [SHAPE] * 3, "dtypes": ["bfloat16"] * 3,
            "strides": [[1 << 20, 1024, 1]] * 3, "args": args}


def _elementwise_family_at(ratio: float) -> KernelPredictor:
    """The H100 with one learned family, elementwise, that runs at `ratio` x its roofline."""
    add = {"kind": "kernel", "op": "aten::add", "shapes": [SHAPE, SHAPE], "dtypes": ["bfloat16"] * 2,
           "strides": [[1 << 20, 1024, 1]] * 2, "args": "{}", "out_shapes": [SHAPE], "out_dtypes": ["bfloat16"]}
    features = list(featurize(pd.DataFrame([add]), H100).columns)
    model = FamilyModel("elementwise", None, features, "own", 100, bias=math.log(ratio))
    return KernelPredictor("h100", {"elementwise": model})


def test_a_generated_pointwise_kernel_is_timed_by_the_learned_elementwise_family():
    stencil = _row("triton::pointwise", ARGS.replace('"loads": 2', '"loads": 8'))  # a max-pool's window
    out = _elementwise_family_at(1.1).predict(pd.DataFrame([_row("triton::pointwise"), _row("triton::reduction"),
                                                            stencil]))
    flops, nbytes = flops_and_bytes("triton::pointwise", [SHAPE] * 3, ["bfloat16"] * 3)
    assert nbytes == 3 * math.prod(SHAPE) * 2  # two loads and a store, each buffer once
    assert out.source[0] == "learned"
    assert out.duration_s[0] == pytest.approx(1.1 * kernel_time(flops, nbytes, "bfloat16", "elementwise", H100))
    assert out.source[1] == "fallback"  # no learned family stands for a generated reduction
    assert out.source[2] == "fallback"
