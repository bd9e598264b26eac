"""A small MLP trained on the CPU with torch.compile (the cpu target's and `maya profile`'s compiled path)."""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.LayerNorm(256), torch.nn.GELU(),
                            torch.nn.Linear(256, 64))
model = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 64), torch.randn(32, 64)
for _ in range(args.steps):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print(f"loss={loss.item():.4f}", flush=True)
