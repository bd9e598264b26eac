"""Launch: run a program as N emulated (or profiled) ranks and merge what they report.

    job.py       what to run and the world layout; the worker command line of a rank
    pool.py      rank processes, `jobs` at a time, each with torchrun's environment
    forkserver.py  rank processes forked from one that booted the device and imported torch once
    roles.py     rank deduplication: emulate the job's distinct roles, map every rank to one
    merge.py     emulation.json (EmulationSummary) from the rank summaries; the terminal lines
    emulate.py   `maya emulate`: the orchestration
    profile.py   `maya profile`: every rank for real on the local device
    worker.py    one rank's process (boots the fake device before `import torch`)
"""
