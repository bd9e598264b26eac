"""A small GPT with mixture-of-experts MLPs and expert parallelism (top-2 router, all-to-all dispatch),
written the way MoE tutorials / torchtitan-style code write it."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from gpt import CausalSelfAttention
from torch.distributed._functional_collectives import all_to_all_single_autograd


class Experts(nn.Module):
    """This rank's experts: a batched SwiGLU-less GELU MLP per local expert."""

    def __init__(self, n_local, d, hidden):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(n_local, d, hidden) * 0.02)
        self.w2 = nn.Parameter(torch.randn(n_local, hidden, d) * 0.02)

    def forward(self, x, counts):
        # x: tokens sorted by local expert; counts: tokens per local expert (a list of ints)
        outs = []
        for e, chunk in enumerate(torch.split(x, counts)):
            outs.append(F.gelu(chunk @ self.w1[e]) @ self.w2[e])
        return torch.cat(outs)


class MoE(nn.Module):
    def __init__(self, d, n_experts, top_k, ep_group):
        super().__init__()
        self.ep = ep_group
        self.world = dist.get_world_size(ep_group)
        self.n_experts, self.top_k = n_experts, top_k
        self.n_local = n_experts // self.world
        self.router = nn.Linear(d, n_experts, bias=False)
        self.experts = Experts(self.n_local, d, 4 * d)

    def forward(self, x):
        b, t, d = x.shape
        x = x.view(-1, d)
        probs = F.softmax(self.router(x), dim=-1, dtype=torch.float32)
        weights, idx = torch.topk(probs, self.top_k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        flat_idx = idx.view(-1)
        order = torch.argsort(flat_idx, stable=True)
        tokens = x.repeat_interleave(self.top_k, dim=0)[order]
        # tokens per global expert, then per destination rank
        counts = torch.bincount(flat_idx, minlength=self.n_experts)
        send = counts.view(self.world, self.n_local).sum(1)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=self.ep)
        recv = recv_counts.view(self.world, self.n_local).sum(1)
        send_splits, recv_splits = send.tolist(), recv.tolist()
        received = all_to_all_single_autograd(tokens, recv_splits, send_splits, self.ep)
        # regroup what arrived (source rank major) by local expert
        per_expert = recv_counts.view(self.world, self.n_local)
        local_order = torch.argsort(torch.arange(self.n_local, device=x.device).repeat(self.world)
                                    .repeat_interleave(per_expert.view(-1)), stable=True)
        y = self.experts(received[local_order], per_expert.sum(0).tolist())
        back = torch.empty_like(y)
        back[local_order] = y
        out = all_to_all_single_autograd(back, send_splits, recv_splits, self.ep)
        combined = torch.zeros_like(out)
        combined[order] = out
        combined = (combined.view(-1, self.top_k, d) * weights.unsqueeze(-1)).sum(1)
        return combined.view(b, t, d)


class Block(nn.Module):
    def __init__(self, d, heads, n_experts, top_k, ep):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.moe = MoE(d, n_experts, top_k, ep)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.moe(self.ln2(x))


class MoEGPT(nn.Module):
    def __init__(self, ep, vocab=1024, d=256, layers=2, heads=4, seq=128, n_experts=8, top_k=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads, n_experts, top_k, ep) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = MoEGPT(dist.group.WORLD).cuda()
# dense parameters are replicated: average their gradients; experts are rank-local
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
for step in range(3):
    x = torch.randint(0, 1024, (4, 128), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, x)
    loss.backward()
    for n, p in model.named_parameters():
        if "experts" not in n:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
    opt.step()
    opt.zero_grad()
    if dist.get_rank() == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)
