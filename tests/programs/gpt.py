"""A nanoGPT-style GPT-2 (tied embeddings, causal SDPA, bf16 autocast, AdamW) for emulator tests and timing.

    python gpt.py --layers 12 --dim 768 --heads 12 --batch 8 --seq 1024 --steps 3   # GPT-2 small
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=2)
p.add_argument("--dim", type=int, default=128)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--vocab", type=int, default=50257)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--seq", type=int, default=64)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--checkpoint", action="store_true", help="activation checkpointing per block")
args = p.parse_args()


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def attn(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(args.vocab, args.dim)
        self.wpe = nn.Embedding(args.seq, args.dim)
        self.h = nn.ModuleList(Block(args.dim, args.heads) for _ in range(args.layers))
        self.ln_f = nn.LayerNorm(args.dim)
        self.lm_head = nn.Linear(args.dim, args.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            if args.checkpoint:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.lm_head(self.ln_f(x))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT().to(device)
n_params = sum(p.numel() for p in model.parameters())
print(f"params={n_params}")
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
for _ in range(args.steps):
    idx = torch.randint(0, args.vocab, (args.batch, args.seq)).to(device, non_blocking=True)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), idx.view(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
print(f"peak_allocated={torch.cuda.max_memory_allocated() if device == 'cuda' else 0}")
print(f"loss_is_finite={math.isfinite(float(loss))}")
