"""A tiny training loop written the ordinary way (device-agnostic), used by the emulator tests."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--autocast", action="store_true")
p.add_argument("--dim", type=int, default=64)
args = p.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
print("device", device, torch.cuda.get_device_name() if device == "cuda" else "cpu")


class Attn(nn.Module):
    def __init__(self, d, h=4):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Net(nn.Module):
    def __init__(self, d, vocab=128):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.attn = Attn(d)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        x = x + self.attn(self.ln(x))
        return self.head(x)


torch.manual_seed(0)
model = Net(args.dim).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=None)
for step in range(args.steps):
    idx = torch.randint(0, 128, (2, 16)).to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=args.autocast):
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), idx.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("step", step, float(loss))
