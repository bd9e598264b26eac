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
