"""Report: the answer of a simulation.

    prediction.py  Prediction (prediction.json: key names are a contract), memory, MFU, tokens, cost
    table.py       the terminal table; bad news (OOM, hang, failed emulation) first
    timeline.py    timeline.json for Perfetto: a process per rank, a thread per stream, flows per collective
"""
