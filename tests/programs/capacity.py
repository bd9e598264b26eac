"""Print what the emulated device reports, then hold ARGV[1] GiB on it (an OOM past its capacity)."""

import sys

import torch

props = torch.cuda.get_device_properties(0)
print(f"name={props.name}")
print(f"total_memory={props.total_memory}")
x = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda")
print(f"held={x.numel()}")
