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
    for n in [n for n in sys.modules if n == "apex" or n.startswith("apex.")]:
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
    with pytest.raises(ImportError):  # only what megatron's FusedLayerNorm needs is there
        exec("from apex.multi_tensor_apply import multi_tensor_applier", dict(scope))
