"""emulator."""


def mark_iteration() -> None:
    """Mark the end of a training iteration for loops without a torch.optim optimizer.

    Under `maya emulate`/`maya profile` this cuts an iteration in the trace (and counts toward
    `--iterations`); in a normal run it does nothing.
    """
    from emulator.capture.state import mark_iteration as _mark

    _mark()
