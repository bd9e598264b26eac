"""The emulator's signature cache (emulator.capture.fastpath) and the process-CPU host clock."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from emulator.capture import fastpath

aten = torch.ops.aten


@pytest.fixture(scope="module")
def mode():
    return FakeTensorMode(allow_non_fake_inputs=True)


def _fake(mode, *shape, dtype=torch.float32):
    return mode.from_tensor(torch.empty(*shape, dtype=dtype))


def _same_meta(a, b):
    assert type(a) is type(b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same_meta(x, y)
    elif isinstance(a, torch.Tensor):
        assert (a.shape, a.stride(), a.dtype, a.storage_offset(), a.device) == \
            (b.shape, b.stride(), b.dtype, b.storage_offset(), b.device)
    else:
        assert a == b


@pytest.mark.parametrize("call", [
    lambda x, y: (aten.mm.default, (x, y), {}),
    lambda x, y: (aten.view.default, (x, [2, 32]), {}),  # a view: shares the input's storage
    lambda x, y: (aten.add_.Tensor, (x, x), {}),  # in place: returns the input itself
    lambda x, y: (aten.native_layer_norm.default, (x, [8], None, None, 1e-5), {}),  # a tuple of outputs
    lambda x, y: (aten._foreach_mul.Scalar, ([x, y], 0.5), {}),  # a list of outputs
    lambda x, y: (aten._to_copy.default, (x,), {"dtype": torch.bfloat16}),
])
def test_rebuilt_outputs_match_the_fake_kernel(mode, call):
    x, y = _fake(mode, 8, 8), _fake(mode, 8, 4)
    func, args, kwargs = call(x, y)
    key, inputs = fastpath.call_key(func, args, kwargs)
    with mode:
        out = func(*args, **kwargs)
    spec = fastpath.output_spec(out, inputs)
    new = []
    again = fastpath.rebuild(spec, inputs, mode, new)
    _same_meta(out, again)
    new = [t for t, _nbytes in new]
    outs = list(again) if isinstance(again, (list, tuple)) else [again]
    for o, r in zip(list(out) if isinstance(out, (list, tuple)) else [out], outs, strict=True):
        shares = [o.untyped_storage()._cdata == t.untyped_storage()._cdata for t in inputs]
        assert shares == [r.untyped_storage()._cdata == t.untyped_storage()._cdata for t in inputs]
        assert (o is x) == (r is x)
    assert len(new) == sum(not any(o.untyped_storage()._cdata == t.untyped_storage()._cdata for t in inputs)
                           for o in outs)


def test_key_tells_apart_what_changes_the_output(mode):
    x = _fake(mode, 4, 4)
    k = lambda *a, **kw: fastpath.call_key(aten.add.Tensor, a, kw)[0]  # noqa: E731
    assert k(x, 1) != k(x, 1.0) != k(x, True)  # equal in Python, different result dtypes
    assert k(x, x) != k(x, _fake(mode, 4, 4, dtype=torch.bfloat16))
    assert k(x, x) != k(x, _fake(mode, 4, 4).t())  # strides
    assert k(x, x) == k(x, _fake(mode, 4, 4))
    # foreach keys ignore float values (an optimizer's step sizes change every step), other ops do not
    fk = lambda v: fastpath.call_key(aten._foreach_mul.Scalar, ([x], v), {}, any_float=True)[0]  # noqa: E731
    assert fk(0.1) == fk(0.2)
    assert k(x, 0.1) != k(x, 0.2)


def test_real_tensors_and_metadata_mutations_take_the_exact_path(mode):
    x = _fake(mode, 4, 4)
    assert fastpath.call_key(aten.add.Tensor, (x, torch.ones(4)), {}) is None  # a real CPU tensor
    key, _ = fastpath.call_key(aten.t_.default, (x,), {})
    with mode:
        aten.t_.default(x)
    assert not fastpath.same_inputs(key, aten.t_.default, (x,), {})  # changed its input's strides


