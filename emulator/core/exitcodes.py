"""Exit codes, one table for every maya process: the CLI's subcommands and each emulated rank's worker.

A script gating on `maya predict` reads: 0 the prediction is valid; anything else names why not.
The worker (one emulated rank) uses the same numbers for what it can know about its own rank.
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
