"""Around a compiled call the emulator swaps dispatch-mode stacks: that work must never reach a host gap."""

import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from emulator.capture import compile as inductor
from emulator.capture.recorder import Recorder

BURN_S = 0.02


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


class _Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_swapping_the_modes_is_charged_to_the_recorder_and_the_body_is_not(monkeypatch):
    rec = Recorder(0, policy="cpu")  # its own-time account, nothing recorded
    push, pop = inductor._push_mode, inductor._pop_mode
    # a slow swap: what a compiled call's wrappers cost the emulator, made large enough to see
    monkeypatch.setattr(inductor, "_push_mode", lambda m: (_burn(BURN_S), push(m)))
    monkeypatch.setattr(inductor, "_pop_mode", lambda: (_burn(BURN_S), pop())[1])
    mode, outer = _Mode(), _Mode()
    with outer:
        with inductor.only_these_modes(rec, [mode]):
            assert _get_current_dispatch_mode_stack() == [mode]  # the program's other modes are off
            _burn(10 * BURN_S)  # the compiled function's own work: the program's host time
        assert _get_current_dispatch_mode_stack() == [outer]
    assert 2 * BURN_S <= rec._overhead < 5 * BURN_S


def test_the_modes_come_back_when_the_compiled_call_fails():
    rec = Recorder(0, policy="cpu")  # its own-time account, nothing recorded
    outer = _Mode()
    with outer:
        try:
            with inductor.only_these_modes(rec, [_Mode()]):
                raise RuntimeError("the program's own error")
        except RuntimeError:
            pass
        assert _get_current_dispatch_mode_stack() == [outer]
        assert torch.ones(2).sum().item() == 2
