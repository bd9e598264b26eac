"""The designed CPU sweep measures enough of each attention op for the kernel predictor to learn it."""

from collections import Counter

import pandas as pd
import torch

from maya_models.kernels import MIN_SEEN_ROWS
from maya_models.metrics import eval_mask
from pipelines.runners.sweep import designed_sweep


def test_cpu_sweep_leaves_every_attention_op_and_element_size_learnable():
    sigs = [s for s in designed_sweep(torch.device("cpu")) if s.family.startswith("attention")]
    df = pd.DataFrame({"op": [s.op for s in sigs], "family": [s.family for s in sigs],
                       "shapes": [[list(x) for x in s.shapes] for s in sigs], "dtypes": [list(s.dtypes) for s in sigs]})
    train = df[~eval_mask(df)]
    # the trainer keeps an element size the trees saw in fewer than MIN_SEEN_ROWS training rows for the
    # roofline (labelled fallback): with too few configurations SDPA on the CPU was never learned
    per_op_dtype = Counter(zip(train.op, train["dtypes"].map(lambda d: d[0]), strict=True))
    assert {op for op, _ in per_op_dtype} == {"aten::_scaled_dot_product_flash_attention_for_cpu",
                                              "aten::_scaled_dot_product_flash_attention_for_cpu_backward"}
    assert min(per_op_dtype.values()) >= MIN_SEEN_ROWS, per_op_dtype


def test_the_sweep_measures_addmm_in_both_weight_layouts_programs_use():
    """nn.Linear hands addmm its weight transposed; a Conv1D layer (Hugging Face's GPT-2) untransposed. cuBLAS
    serves the two with different kernels, so the trees need both to tell them apart."""
    layouts = Counter()
    for s in designed_sweep(torch.device("cpu")):
        if s.op == "aten::addmm":
            (_, k), (_, n) = s.shapes[1], s.shapes[2]
            layouts[{(1, k): "linear", (n, 1): "conv1d"}[tuple(s.strides[2])]] += 1
    assert layouts["linear"] == layouts["conv1d"] > 0


def test_cpu_sweep_leaves_the_norms_learnable_in_every_element_size():
    """A norm family with fewer than MIN_SEEN_ROWS training rows of an element size is the roofline's (labelled
    fallback) for that size: every CPU LayerNorm was, with the elementwise grid's four shapes."""
    sigs = [s for s in designed_sweep(torch.device("cpu")) if s.family == "norm"]
    df = pd.DataFrame({"op": [s.op for s in sigs], "family": [s.family for s in sigs],
                       "shapes": [[list(x) for x in s.shapes] for s in sigs], "dtypes": [list(s.dtypes) for s in sigs]})
    train = df[~eval_mask(df)]
    per_dtype = Counter(train["dtypes"].map(lambda d: d[0]))
    assert set(per_dtype) == {"float32", "bfloat16"}
    assert min(per_dtype.values()) >= MIN_SEEN_ROWS, per_dtype
