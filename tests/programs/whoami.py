"""Some recorded work that depends on the rank, then `key=value` lines saying which process ran it.

A global set at import counts how often this module's body ran in the process: forked ranks must
import the program themselves (once each), never inherit it."""

import os

import torch

RUNS = globals().get("RUNS", 0) + 1
x = torch.randn(64, 64 * (1 + int(os.environ["RANK"])), device="cuda" if torch.cuda.is_available() else "cpu")
for _ in range(3):
    x = torch.relu(x @ x.T @ x)
print(f"rank={os.environ['RANK']}")
print(f"local_rank={os.environ['LOCAL_RANK']}")
print(f"pid={os.getpid()}")
print(f"parent={os.getppid()}")
print(f"runs={RUNS}")
print(f"marker={os.environ.get('WHOAMI_MARKER', '')}")
