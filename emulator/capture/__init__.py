"""Capture of one rank: record every device event of an unmodified program into the trace.

    session.py     one rank's run: install everything, run the program, always write the outputs
    recorder.py    the recording TorchDispatchMode (selective fake, kinds, collectives, host gaps)
    signature.py   an op call as (shapes, dtypes, strides, args) in schema order (replayable)
    trace_rows.py  column-wise row store -> TRACE_SCHEMA table, and the rank's work hash
    modules.py     module path and forward/backward attribution
    checkpoint.py  torch.save of fake tensors
    state.py       the active recorder, for `emulator.mark_iteration()`
"""
