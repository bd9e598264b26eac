"""An op call's arguments as the trace stores them: equal calls keep equal signatures."""

import torch

from emulator.capture.signature import describe_call


def test_a_generator_argument_is_recorded_without_its_address():
    """A data loader's `torch.randint(..., generator=g)`: two generators give the same signature, so the calls'
    rows group as one (their measurements were one row per call, each keyed by the object's address)."""
    op = torch.ops.aten.randint.low_generator
    calls = [describe_call(op, (0, 2048, [3, 129]), {"generator": torch.Generator()}, tensors=False)[4]
             for _ in range(2)]
    assert calls[0] == calls[1]
    assert calls[0]["generator"] == "generator:cpu" and "0x" not in str(calls[0])


def test_an_object_argument_keeps_its_type_but_not_its_address():
    class Opaque:
        pass

    op = torch.ops.aten.randint.low_generator
    args = describe_call(op, (0, 10, [2]), {"generator": None}, tensors=False)[4]
    assert args["generator"] is None
    from emulator.capture.signature import _json_value

    text = _json_value(Opaque())
    assert "Opaque" in text and "0x" not in text and text == _json_value(Opaque())
