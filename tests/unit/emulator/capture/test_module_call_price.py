"""The module tracker's hooks make every nn.Module call slower than a native one; a gap must not keep that."""

import time

import pytest
import torch

from emulator.capture.recorder import Recorder

PRICE = 2e-5  # per call; each gap below is the program's 5 ms plus the calls


def _program_work(seconds: float = 0.005) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


class _Wrap(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, y):
        return self.inner(y)


def _gaps_by_module_calls(rec: Recorder) -> dict[int, float]:
    """module calls counted in a gap -> the gap as recorded (rows of the loop below)."""
    gaps = rec.rows.cols["host_gap_s"]
    return {modules: gaps[row] for row, _unpriced, _extra, _queries, modules, _bwd in rec.gap_parts[1:]}


def test_each_module_call_in_a_gap_is_charged_its_price_and_repricing_follows():
    rec = Recorder(0, policy="cpu")
    nest = torch.nn.Identity()
    for _ in range(3):
        nest = _Wrap(nest)  # four module calls per call of `nest`
    x = torch.ones(4)
    with rec:
        rec.set_prices({"device_query": 0.0, "crossing": 0.0, "module_call": 0.0, "forward": 0.0, "backward": 0.0})
        torch.add(x, x)
        _program_work()
        torch.add(nest(x), x)
        _program_work()
        torch.add(nest(nest(x)), x)
        unpriced = dict(_gaps_by_module_calls(rec))
        rec.set_prices({**rec.prices(), "module_call": PRICE})
        rec.reprice()
    assert sorted(unpriced) == [4, 8]  # the tracker counted each call in the gap it fell in
    priced = _gaps_by_module_calls(rec)
    for calls in (4, 8):
        assert unpriced[calls] >= 0.005
        assert priced[calls] == pytest.approx(unpriced[calls] - calls * PRICE)
