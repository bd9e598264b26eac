"""The Apex stand-in is served to megatron-core's imports only, and computes Apex's layer norm."""

import importlib.util
import sys

import pytest
import torch

from emulator.capture import apex_standin


@pytest.fixture
def standin():
    if importlib.util.find_spec("apex") is not None:
        pytest.skip("a real Apex is installed")
    before = list(sys.meta_path)
    apex_standin.install()
    yield
    sys.meta_path[:] = before
    for n in [n for n in sys.modules if n in ("apex", "amp_C") or n.startswith("apex.")]:
        del sys.modules[n]


def test_other_importers_still_find_no_apex_and_megatron_gets_torch_layer_norm(standin):
    with pytest.raises(ImportError):  # a test module is not megatron-core
        import apex  # noqa: F401
    scope = {"__name__": "megatron.core.fusions.fused_layer_norm"}
    exec("from apex.normalization.fused_layer_norm import FusedLayerNormAffineFunction as F", scope)
    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    got = scope["F"].apply(x, w, b, torch.Size([8]), 1e-5)
    assert torch.allclose(got, torch.nn.functional.layer_norm(x, (8,), w, b, 1e-5))
    assert sys.modules["apex"].__maya_standin__ is True
    with pytest.raises(ImportError):  # only what megatron-core imports from Apex is there
        exec("from apex.optimizers import FusedAdam", dict(scope))


def test_megatron_gets_apexs_multi_tensor_norm_and_scale(standin):
    with pytest.raises(ImportError):  # Apex's built extension, for megatron-core only
        import amp_C  # noqa: F401
    scope = {"__name__": "megatron.core.optimizer.clip_grads"}
    exec("import amp_C\nfrom apex.multi_tensor_apply import multi_tensor_applier", scope)
    amp_C, applier = scope["amp_C"], scope["multi_tensor_applier"]
    grads = [torch.randn(3, 4), torch.randn(5)]
    flag = torch.zeros(1, dtype=torch.int)
    total, per_tensor = applier(amp_C.multi_tensor_l2norm, flag, [grads], True)
    assert total.shape == (1,) and torch.allclose(total, torch.cat([g.flatten() for g in grads]).norm())
    assert torch.allclose(per_tensor, torch.stack([g.norm() for g in grads]))
    assert applier(amp_C.multi_tensor_l2norm, flag, [grads], False)[1].numel() == 0
    expected = [g * 0.5 for g in grads]
    applier(amp_C.multi_tensor_scale, flag, [grads, grads], 0.5)  # clipping: in place
    assert all(torch.equal(g, e) for g, e in zip(grads, expected, strict=True))
    halves = [torch.empty(3, 4, dtype=torch.float16), torch.empty(5, dtype=torch.float16)]
    applier(amp_C.multi_tensor_scale, flag, [grads, halves], 1.0)  # main weights back into the model
    assert all(torch.equal(h, g.half()) for h, g in zip(halves, grads, strict=True))
