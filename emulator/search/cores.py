"""Cores for concurrent trials: each trial takes a slot of its own cores on its node and pins itself there.

Host gaps are the program's CPU time, so two trials (or two emulated ranks) on one core inflate each
other's host time (8 ranks on 2 cores: 2.8x the host time of 2 at a time). A slot is a lock file per
node (`fcntl.flock`, released when the trial's process ends, even if it is killed); slot i owns cores
[i*k, (i+1)*k) of the node's usable CPUs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from pathlib import Path


def usable_cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def plan_workers(workers: int | None, cores: int) -> tuple[int, int]:
    """(concurrent trials, cores per trial) for `--workers` on a node of `cores` CPUs."""
    n = max(1, min(workers or 1, cores))
    return n, max(1, cores // n)


@contextlib.contextmanager
def core_slot(per_trial: int, lock_dir: Path | None = None, poll_s: float = 0.2):
    """Hold a free slot of `per_trial` cores on this node; yields the core ids."""
    cores = usable_cores()
    slots = max(1, len(cores) // per_trial)
    d = Path(lock_dir or Path(tempfile.gettempdir()) / f"maya-search-cores-{os.getuid()}")
    d.mkdir(parents=True, exist_ok=True)
    while True:
        for i in range(slots):
            f = open(d / f"slot-{i}.lock", "w")  # noqa: SIM115 - held for the with-block
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            try:
                yield cores[i * per_trial:(i + 1) * per_trial]
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
                f.close()
            return
        time.sleep(poll_s)
