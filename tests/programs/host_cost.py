"""A small transformer-like training loop that prints the host CPU time of each step.

Run for real on the CPU, each step's process CPU time is what this machine's host spends on the
step (Python, PyTorch dispatch, autograd, and the tiny kernels themselves): an upper bound on the
host time the emulator should record for the same step.
"""

import argparse
import time

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
args = p.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
d = 8
blocks = nn.Sequential(*[nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                         for _ in range(6)]).to(device)
opt = torch.optim.AdamW(blocks.parameters(), lr=1e-3, foreach=True)
x = torch.randn(2, 4, d, device=device)
for _ in range(args.steps):
    t0 = time.process_time()
    loss = blocks(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step_cpu_s={time.process_time() - t0:.6f}")
