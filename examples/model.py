"""A small decoder-only transformer in the GPT-2 / Llama mould, readable in one sitting.

One `Transformer` covers both families through `ModelConfig`:
- GPT-2: LayerNorm, learned positions, GELU MLP, tied input/output embeddings;
- Llama: RMSNorm, rotary positions, grouped-query attention, SwiGLU MLP, untied embeddings.

Attention is `F.scaled_dot_product_attention(is_causal=True)`, so the backend (flash,
mem-efficient, math) is whatever PyTorch picks on the device. Heads are derived from tensor
shapes at run time, which is what lets tensor parallelism shard `wq/wk/wv` column-wise
without touching this file.

The model is meant to be built on the meta device (no memory) and then materialised with
`to_empty(device=...)` + `init_weights()`; that way an 8B-parameter preset can be sharded
before any real (or emulated) memory is spent. Layers live in a `ModuleDict` keyed by index
so pipeline stages can delete the layers they do not own and keep the original names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass
class ModelConfig:
    vocab: int = 256
    d_model: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int | None = None  # None: same as heads (no GQA)
    ffn_dim: int | None = None  # None: 4 * d_model (GELU) or Llama's 8/3 rule (SwiGLU)
    seq_len: int = 32
    norm: str = "rmsnorm"  # "rmsnorm" | "layernorm"
    mlp: str = "swiglu"  # "swiglu" | "gelu"
    positions: str = "rope"  # "rope" | "learned"
    tie_embeddings: bool = False
    rope_theta: float = 500000.0
    checkpoint: bool = False  # activation checkpointing per block

    def __post_init__(self):
        if self.kv_heads is None:
            self.kv_heads = self.heads
        if self.ffn_dim is None:
            if self.mlp == "gelu":
                self.ffn_dim = 4 * self.d_model
            else:
                self.ffn_dim = 256 * math.ceil(int(8 * self.d_model / 3) / 256)
        if self.d_model % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"d_model {self.d_model} must divide by heads {self.heads}, "
                             f"and heads by kv_heads {self.kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


# Presets: the sizes people actually train. `tiny` runs for real on a laptop CPU in seconds.
PRESETS: dict[str, dict] = {
    "tiny": dict(vocab=256, d_model=64, layers=2, heads=4, kv_heads=2, seq_len=32),
    "gpt2-small": dict(vocab=50257, d_model=768, layers=12, heads=12, seq_len=1024, norm="layernorm",
                       mlp="gelu", positions="learned", tie_embeddings=True),
    "gpt2-medium": dict(vocab=50257, d_model=1024, layers=24, heads=16, seq_len=1024, norm="layernorm",
                        mlp="gelu", positions="learned", tie_embeddings=True),
    "llama3-1b": dict(vocab=128256, d_model=2048, layers=16, heads=32, kv_heads=8, ffn_dim=8192, seq_len=8192,
                      tie_embeddings=True),
    "llama3-8b": dict(vocab=128256, d_model=4096, layers=32, heads=32, kv_heads=8, ffn_dim=14336, seq_len=8192),
    "llama3-70b": dict(vocab=128256, d_model=8192, layers=80, heads=64, kv_heads=8, ffn_dim=28672, seq_len=8192),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)

    def reset_parameters(self):
        nn.init.ones_(self.weight)


def make_norm(cfg: ModelConfig) -> nn.Module:
    return RMSNorm(cfg.d_model) if cfg.norm == "rmsnorm" else nn.LayerNorm(cfg.d_model)


def rope_tables(cfg: ModelConfig, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of the rotary angles, [seq_len, head_dim]."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, half, device=device, dtype=torch.float32) / half))
    angles = torch.outer(torch.arange(cfg.seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x: [batch, heads, seq, head_dim]; rotate-half form (no complex numbers)."""
    t = x.shape[-2]
    cos, sin = cos[:t].to(x.dtype), sin[:t].to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        kv_dim = cfg.kv_heads * cfg.head_dim
        bias = cfg.norm == "layernorm"  # GPT-2 has biases, Llama does not
        self.wq = nn.Linear(cfg.d_model, cfg.d_model, bias=bias)
        self.wk = nn.Linear(cfg.d_model, kv_dim, bias=bias)
        self.wv = nn.Linear(cfg.d_model, kv_dim, bias=bias)
        self.wo = nn.Linear(cfg.d_model, cfg.d_model, bias=bias)

    def forward(self, x, rope):
        b, t, _ = x.shape
        hd = self.cfg.head_dim
        # -1 heads: under tensor parallelism each rank holds only its share of the heads
        q = self.wq(x).view(b, t, -1, hd).transpose(1, 2)
        k = self.wk(x).view(b, t, -1, hd).transpose(1, 2)
        v = self.wv(x).view(b, t, -1, hd).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.swiglu = cfg.mlp == "swiglu"
        bias = not self.swiglu
        self.w1 = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=bias)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=bias)
        self.w3 = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=False) if self.swiglu else None

    def forward(self, x):
        if self.swiglu:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.checkpoint = cfg.checkpoint
        self.attn_norm = make_norm(cfg)
        self.attn = Attention(cfg)
        self.mlp_norm = make_norm(cfg)
        self.mlp = MLP(cfg)

    def _forward(self, x, rope):
        x = x + self.attn(self.attn_norm(x), rope)
        return x + self.mlp(self.mlp_norm(x))

    def forward(self, x, rope=None):
        if self.checkpoint and torch.is_grad_enabled():
            return checkpoint(self._forward, x, rope, use_reentrant=False)
        return self._forward(x, rope)


class Transformer(nn.Module):
    """Token ids [batch, seq] -> logits [batch, seq, vocab]. Missing parts (None) make a pipeline stage."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model) if cfg.positions == "learned" else None
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.layers)})
        self.norm = make_norm(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        if cfg.positions == "rope":
            self.register_buffer("rope_cos", torch.empty(cfg.seq_len, cfg.head_dim), persistent=False)
            self.register_buffer("rope_sin", torch.empty(cfg.seq_len, cfg.head_dim), persistent=False)
        else:
            self.rope_cos = self.rope_sin = None

    def forward(self, x):
        if self.tok_emb is not None:  # first stage: x holds token ids
            h = self.tok_emb(x)
            if self.pos_emb is not None:
                h = h + self.pos_emb(torch.arange(x.shape[1], device=x.device))
        else:  # later pipeline stage: x holds hidden states
            h = x
        rope = (self.rope_cos, self.rope_sin) if self.rope_cos is not None else None
        for layer in self.layers.values():
            h = layer(h, rope)
        if self.norm is not None:
            h = self.norm(h)
        return self.lm_head(h) if self.lm_head is not None else h

    @torch.no_grad()
    def init_weights(self, seed: int = 0):
        """Initialise after `to_empty`: GPT-2 style N(0, 0.02), residual projections scaled by depth."""
        gen = None
        if self.tok_emb is not None and self.tok_emb.weight.device.type == "cpu":
            gen = torch.Generator().manual_seed(seed)  # same init on every rank of a CPU run
        std_out = 0.02 / math.sqrt(2 * self.cfg.layers)
        for name, mod in self.named_modules():
            if isinstance(mod, nn.Linear):
                std = std_out if name.endswith(("wo", "w2")) else 0.02
                nn.init.normal_(mod.weight, 0.0, std, generator=gen)
                if mod.bias is not None:
                    nn.init.zeros_(mod.bias)
            elif isinstance(mod, nn.Embedding):
                nn.init.normal_(mod.weight, 0.0, 0.02, generator=gen)
            elif isinstance(mod, (nn.LayerNorm, RMSNorm)):
                mod.reset_parameters()
        if self.rope_cos is not None:
            cos, sin = rope_tables(self.cfg, self.rope_cos.device)
            self.rope_cos.copy_(cos)
            self.rope_sin.copy_(sin)


def count_params(model: nn.Module) -> int:
    """Parameters, counting a tied weight once."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
