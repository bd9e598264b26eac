"""Some device work, then a wait: a program to stop from outside (fault-injection tests).

Prints `ready pid=<its process id>` once its work is recorded, then sleeps `--sleep` seconds
(`--sleep-rank0` on rank 0)."""

import argparse
import os
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--sleep", type=float, default=120.0)
p.add_argument("--sleep-rank0", type=float, default=None)
a = p.parse_args()
x = torch.randn(256, 256, device="cuda")
for _ in range(4):
    x = x @ x
print(f"ready pid={os.getpid()}", flush=True)
rank0 = os.environ.get("RANK", "0") == "0"
time.sleep(a.sleep_rank0 if rank0 and a.sleep_rank0 is not None else a.sleep)
