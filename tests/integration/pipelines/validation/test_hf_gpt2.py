"""The NeuSight single-GPU program runs Hugging Face's GPT-2 ops, with NeuSight's loop."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.paths import REPO

PROGRAM = REPO / "examples" / "validation" / "hf_gpt2.py"
TINY = dict(layers=2, hidden=64, heads=4, vocab=1000, max_positions=64, dropout=0.0)


def _program():
    spec = importlib.util.spec_from_file_location("hf_gpt2", PROGRAM)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops, self.addmm_weights = Counter(), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        if name == "addmm":
            self.addmm_weights.append((tuple(args[2].shape), args[2].stride()))
        return func(*args, **(kwargs or {}))


def test_forward_runs_hugging_faces_gpt2_ops():
    hf = _program()
    torch.manual_seed(0)
    model = hf.GPT2LMHead(**TINY)
    ids = torch.randint(0, TINY["vocab"], (2, 16))
    with _Ops() as rec:
        model(ids)
    # Conv1D: the weight is stored [in, out] and read as is (an nn.Linear would hand addmm a transposed view)
    assert len(rec.addmm_weights) == 4 * TINY["layers"]
    assert all(stride == (shape[1], 1) for shape, stride in rec.addmm_weights)
    # gelu_new as its tensor ops, eager attention with a `where` against the mask, one softmax per block
    assert rec.ops["tanh"] == rec.ops["pow"] == TINY["layers"] and "gelu" not in rec.ops
    assert rec.ops["where"] == rec.ops["_softmax"] == TINY["layers"]
    assert rec.ops["bmm"] == 2 * TINY["layers"]
    assert rec.ops["mm"] == 1  # the tied, bias-free head


def test_gradients_accumulate_across_steps_as_in_neusights_loop():
    hf = _program()
    torch.manual_seed(0)
    model = hf.GPT2LMHead(**TINY)
    ids = torch.randint(0, TINY["vocab"], (2, 16))
    hf.forward_backward(model, ids)
    once = model.h[0].c_fc.weight.grad.clone()
    hf.forward_backward(model, ids)  # no optimizer, no zero_grad: the second backward adds into the first
    assert torch.allclose(model.h[0].c_fc.weight.grad, 2 * once, rtol=1e-4, atol=1e-6)
    assert model.lm_head.weight is model.wte.weight


def test_program_runs_from_the_command_line():
    p = subprocess.run([sys.executable, str(PROGRAM), "--layers", "2", "--hidden", "64", "--heads", "4",
                        "--vocab", "1000", "--seq", "32", "--batch", "2", "--steps", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.count("step ") == 2
    bad = subprocess.run([sys.executable, str(PROGRAM), "--seq", "2048"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0 and "longer than the model's --positions" in bad.stderr
