"""Exit codes, one table for every maya process: the CLI's subcommands and each emulated rank's worker.

A script gating on `maya predict` reads: 0 the prediction is valid; anything else names why not.
`maya simulate OUT` exits with the code `maya predict` would have given for the run that wrote
OUT (an OOM folder is still an OOM), plus BAD_INPUT for a folder it cannot read. The worker (one
emulated rank) uses the same numbers for what it can know about its own rank.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # the program ran to its end (or to `--iterations`), the outputs are complete
    PROGRAM_FAILED = 1  # the program raised, or exited with a non-zero status, on some rank
    BAD_INPUT = 2  # the command line, a file or a folder maya was given is wrong; nothing ran
    OOM = 3  # the target GPU ran out of memory and that ended a rank
    HANG = 4  # collectives do not match across ranks: the real job would hang
    INTERRUPTED = 130  # Ctrl-C / SIGTERM: stopped, partial outputs marked as such


# What each code means to a user, for `maya --help` and the README ("When things go wrong").
MEANING = {
    Exit.OK: "the prediction (or emulation) is valid",
    Exit.PROGRAM_FAILED: "the program failed on some rank (its traceback is printed)",
    Exit.BAD_INPUT: "bad command line, script, GPU, cluster file or output folder; or no predictors",
    Exit.OOM: "the target GPU runs out of memory and that ends a rank",
    Exit.HANG: "collectives or messages do not match across ranks: the real job would hang",
    Exit.INTERRUPTED: "stopped by Ctrl-C / SIGTERM; the partial outputs are marked interrupted",
}


def outcome(*, interrupted: bool = False, oom: bool = False, failed: bool = False, hang: bool = False) -> Exit:
    """The one code for a run's outcome. An interrupt wins (nothing after it is known), then an OOM (it
    is what ended the rank, and other ranks often fail waiting for it), then a failure, then a hang."""
    if interrupted:
        return Exit.INTERRUPTED
    if oom:
        return Exit.OOM
    if failed:
        return Exit.PROGRAM_FAILED
    if hang:
        return Exit.HANG
    return Exit.OK


def table() -> str:
    """The exit codes as `code  meaning` lines."""
    return "\n".join(f"{int(code):>3}  {text}" for code, text in MEANING.items())
