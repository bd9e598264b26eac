"""GPT-2 training the way Hugging Face's `GPT2LMHeadModel` runs it, timed the way NeuSight timed it.

The validation workload behind NeuSight's single-GPU GPT-2 rows (`gpt2_large-train-<seq>-<batch>`):
NeuSight built `AutoModelForCausalLM.from_config(config, attn_implementation="eager")` in fp32 and timed
`model(input_ids)` and `loss.backward()` (`neusight/Tracing/trace.py`, `measure_e2e`: no optimizer, no
`zero_grad`, so every backward after the first accumulates into the gradients; CUDA events around the
forward and around the backward). Outside NeuSight's two timed regions: the `gc.collect()` and
`torch.cuda.empty_cache()` before each step (left out here) and the loss's forward (kept: the backward needs
it, so maya's iteration holds one log-softmax over the logits that NeuSight's time does not). The ops are
those of Hugging Face's GPT-2 modelling code, written in plain PyTorch so the validation needs no
`transformers`:
- `Conv1D` layers: `addmm(bias, x, W)` with `W` stored `[in, out]`, so the GEMM reads its weight
  untransposed (an `nn.Linear` reads `W.t()`: cuBLAS picks other kernels for the two layouts);
- eager attention: `matmul(q, k^T)`, division by a `full([])` scalar, `where` against the causal mask
  buffer and `finfo.min`, softmax, attention dropout, `matmul` with v; heads merged by
  `permute().contiguous()`;
- the `gelu_new` activation as its eight tensor ops (`0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`);
- dropout on the embeddings, the attention output and the MLP output; a bias-free LM head tied to the
  token embedding.

    python hf_gpt2.py --layers 36 --hidden 1280 --heads 20 --seq 1024 --batch 4 --steps 5

It runs on CUDA when `torch.cuda.is_available()`, else on the CPU.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn


class Conv1D(nn.Module):
    """Hugging Face's GPT-2 linear layer: weight `[in, out]`, one `addmm` with the bias."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        out = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return out.view(*x.shape[:-1], self.weight.size(1))


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, max_positions: int, dropout: float):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.c_attn, self.c_proj = Conv1D(hidden, 3 * hidden), Conv1D(hidden, hidden)
        self.attn_dropout, self.resid_dropout = nn.Dropout(dropout), nn.Dropout(dropout)
        mask = torch.tril(torch.ones(max_positions, max_positions, dtype=torch.bool))
        self.register_buffer("bias", mask.view(1, 1, max_positions, max_positions), persistent=False)

    def _heads(self, t):
        return t.view(*t.shape[:-1], self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = (self._heads(t) for t in self.c_attn(x).split(x.size(-1), dim=2))
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        s = q.size(-2)
        floor = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device)
        w = torch.where(self.bias[:, :, :s, :s], w, floor)
        w = self.attn_dropout(F.softmax(w, dim=-1).type(v.dtype))
        out = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        return self.resid_dropout(self.c_proj(out.view(*out.shape[:-2], -1)))


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, max_positions: int, dropout: float):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads, max_positions, dropout)
        self.c_fc, self.c_proj = Conv1D(hidden, 4 * hidden), Conv1D(4 * hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.attn(self.ln_1(x)) + x
        return x + self.dropout(self.c_proj(gelu_new(self.c_fc(self.ln_2(x)))))


class GPT2LMHead(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, vocab: int, max_positions: int, dropout: float):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(max_positions, hidden)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(hidden, heads, max_positions, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        pos = torch.arange(ids.size(-1), device=ids.device).unsqueeze(0)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def forward_backward(model: GPT2LMHead, ids: torch.Tensor) -> None:
    """One timed step of NeuSight's loop: the logits, the cross entropy against the inputs, the backward; the
    gradients are never zeroed, so they accumulate from step to step."""
    logits = model(ids)
    F.cross_entropy(logits.view(-1, logits.size(-1)), ids.view(-1)).backward()


def end_of_iteration() -> None:
    """No optimizer step ends the iteration: tell maya where it ends (nothing happens in a plain run)."""
    try:
        from emulator import mark_iteration
    except ImportError:
        return
    mark_iteration()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--positions", type=int, default=1024, help="the model's n_positions (its causal mask's size)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=5)
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    if a.seq > a.positions:
        raise SystemExit(f"--seq {a.seq} is longer than the model's --positions {a.positions}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = GPT2LMHead(a.layers, a.hidden, a.heads, a.vocab, a.positions, a.dropout).to(device).train()
    ids = torch.ones(a.batch, a.seq, dtype=torch.int64, device=device)
    for step in range(a.steps):
        t0 = time.perf_counter()
        forward_backward(model, ids)
        end_of_iteration()
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(f"step {step} time {time.perf_counter() - t0:.3f}s", flush=True)  # no loss read: NeuSight reads none


if __name__ == "__main__":
    main()
