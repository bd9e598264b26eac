"""A small GPT trained with torch.compile, bf16 autocast and fused AdamW (the way nanoGPT does it)."""
import argparse

import torch
from gpt import GPT

p = argparse.ArgumentParser()
p.add_argument("--mode", default=None, help="torch.compile mode (default, reduce-overhead, max-autotune)")
p.add_argument("--eager", action="store_true", help="no torch.compile")
p.add_argument("--steps", type=int, default=3)
p.add_argument("--vocab", type=int, default=1024, help="GPT-2's 50257 is a head no tensor-core alignment divides")
p.add_argument("--ready-compile-pool", action="store_true",
               help="start Inductor's compile-worker pool and wait until it is ready, as it is on a many-core "
                    "machine by the time a backward graph compiles")
args = p.parse_args()

if args.ready_compile_pool:
    from torch._inductor import config
    from torch._inductor.async_compile import AsyncCompile

    with config.patch(compile_threads=2):
        AsyncCompile.wait_pool_ready()

model = GPT(vocab=args.vocab).cuda()
if not args.eager:
    model = torch.compile(model, mode=args.mode)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
for step in range(args.steps):
    x = torch.randint(0, args.vocab, (8, 128), device="cuda")
    y = torch.randint(0, args.vocab, (8, 128), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.3f}", flush=True)
