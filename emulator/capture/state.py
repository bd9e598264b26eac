"""The active recorder of this process, for the public marker API (`emulator.mark_iteration()`)."""

from __future__ import annotations

_recorder = None


def set_recorder(recorder) -> None:
    global _recorder
    _recorder = recorder


def mark_iteration() -> None:
    """End an iteration in code without a torch.optim optimizer (no-op outside emulation)."""
    if _recorder is not None:
        _recorder.next_iteration()
