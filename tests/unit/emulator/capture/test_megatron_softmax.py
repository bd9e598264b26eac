"""Megatron's fused softmax stand-ins are served to megatron's imports only, and compute the fused kernels'
results: a causal (upper-triangular) masked softmax, a masked one and a plain one, each with its backward."""

import importlib.util
import sys

import pytest
import torch

from emulator.capture import megatron_softmax

NAMES = ("scaled_upper_triang_masked_softmax_cuda", "scaled_masked_softmax_cuda", "scaled_softmax_cuda")


@pytest.fixture
def standin():
    if any(importlib.util.find_spec(n) is not None for n in NAMES):
        pytest.skip("Megatron's fused softmax extensions are built here")
    before = list(sys.meta_path)
    megatron_softmax.install()
    yield
    sys.meta_path[:] = before
    for n in NAMES:
        sys.modules.pop(n, None)


def _megatron_import(name: str):
    scope = {"__name__": "megatron.core.fusions.fused_softmax"}
    exec(f"import {name} as k", scope)
    return scope["k"]


def test_other_importers_still_find_no_extension(standin):
    with pytest.raises(ImportError):  # a test module is not megatron
        import scaled_masked_softmax_cuda  # noqa: F401


def test_causal_kernel_is_a_scaled_softmax_over_the_keys_at_or_before_each_query(standin):
    k = _megatron_import("scaled_upper_triang_masked_softmax_cuda")
    x = torch.randn(6, 8, 8)
    scale = 0.5
    probs = k.forward(x, torch.tensor(scale))
    causal = torch.ones(8, 8, dtype=torch.bool).triu(1)
    want = torch.softmax((x * scale).masked_fill(causal, float("-inf")), -1)
    assert probs.shape == x.shape and torch.allclose(probs, want, atol=1e-6)
    assert float(probs[:, 0, 1:].abs().max()) == 0.0  # the first query sees only itself

    g = torch.randn_like(x)
    xr = x.clone().requires_grad_()
    torch.softmax((xr * scale).masked_fill(causal, float("-inf")), -1).backward(g)
    assert torch.allclose(k.backward(g, probs, torch.tensor(scale)), xr.grad, atol=1e-5)


def test_masked_and_plain_kernels_and_the_launch_arithmetic(standin):
    masked = _megatron_import("scaled_masked_softmax_cuda")
    plain = _megatron_import("scaled_softmax_cuda")
    x = torch.randn(2, 3, 4, 16)
    mask = torch.zeros(2, 1, 4, 16, dtype=torch.bool)
    mask[..., 12:] = True  # padding keys
    got = masked.forward(x, mask, 2.0)
    assert torch.allclose(got, torch.softmax((2.0 * x).masked_fill(mask, float("-inf")), -1), atol=1e-6)
    assert torch.allclose(plain.forward(x, 1.0), torch.softmax(x, -1), atol=1e-6)
    # 128 threads a block; a warp as wide as the keys' next power of two (at most 32), two rows a warp up
    # to 128 keys: 4 warps x 1 row at 1,024 keys, 4 x 2 at 128, 8 x 2 at 16
    assert masked.get_batch_per_block(1024, 1024, 4, 16) == 4
    assert masked.get_batch_per_block(128, 128, 4, 16) == 8
    assert masked.get_batch_per_block(16, 16, 4, 16) == 16
