"""Runner progress where people look: live in Dagster when an asset launched the runner, stderr on a bare node.

An asset starts a runner inside a Dagster Pipes session (`pipelines.launch.run_runner`), which puts
`DAGSTER_PIPES_CONTEXT` in the runner's environment; the runner then sends each progress line as a
Pipes log message, which Dagster shows in the run's log as it arrives (a calibration of minutes
is no longer silent until the runner exits). Numeric per-chunk progress goes as a custom message
too. Only `dagster-pipes` is imported, never Dagster, so a bare GPU node needs nothing else.
"""

from __future__ import annotations

import atexit
import os
import sys

_state: dict = {}


def pipes():
    """The Pipes context when launched through Dagster Pipes, else None (opened once, closed at exit)."""
    if "ctx" not in _state:
        from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR, open_dagster_pipes

        _state["ctx"] = open_dagster_pipes() if os.environ.get(DAGSTER_PIPES_CONTEXT_ENV_VAR) else None
        if _state["ctx"] is not None:
            atexit.register(close)
    return _state["ctx"]


def say(line: str) -> None:
    """One progress line: a Pipes log message under Dagster, a stderr line otherwise."""
    ctx = pipes()
    if ctx is not None:
        ctx.log.info(line)
    else:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def progress(suite: str, done: int, total: int, **figures) -> None:
    """Numeric progress (chunks done of total, rows so far) as a Pipes custom message; nothing on a bare node."""
    ctx = pipes()
    if ctx is not None:
        ctx.report_custom_message({"suite": suite, "done": done, "total": total, **figures})


def close() -> None:
    ctx = _state.get("ctx")
    if ctx is not None and not ctx.is_closed:
        ctx.close()
