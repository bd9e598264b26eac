"""A small GPT trained with torch.compile, bf16 autocast and fused AdamW (the way nanoGPT does it)."""
import argparse

import torch
from gpt import GPT

p = argparse.ArgumentParser()
p.add_argument("--mode", default=None, help="torch.compile mode (default, reduce-overhead, max-autotune)")
p.add_argument("--eager", action="store_true", help="no torch.compile")
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()

model = GPT().cuda()
if not args.eager:
    model = torch.compile(model, mode=args.mode)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
for step in range(args.steps):
    x = torch.randint(0, 1024, (8, 128), device="cuda")
    y = torch.randint(0, 1024, (8, 128), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.3f}", flush=True)
