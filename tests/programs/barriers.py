"""Barriers between two all-reduces: every rank's (or only rank 0's, `--rank0-only`: a real job hangs),
then, on a gloo group, a monitored_barrier."""

import argparse
import os

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--backend", default="nccl")
p.add_argument("--rank0-only", action="store_true")
a = p.parse_args()
dist.init_process_group(a.backend)
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
if not a.rank0_only or dist.get_rank() == 0:
    dist.barrier()
if a.backend == "gloo":
    dist.monitored_barrier()
dist.all_reduce(x)
dist.destroy_process_group()
