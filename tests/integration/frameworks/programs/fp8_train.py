"""FP8 training with torchao, the way its README shows it: a bf16 model, `convert_to_float8_training` swaps
the nn.Linear layers for Float8Linear (dynamic scaling, tensorwise or rowwise recipe), then an ordinary
AdamW loop. `--no-fp8` trains the same bf16 model without the conversion."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--recipe", default="tensorwise", help="torchao recipe: tensorwise, rowwise, rowwise_with_gw_hp")
p.add_argument("--no-fp8", action="store_true", help="train in bf16, no float8 conversion")
p.add_argument("--compile", action="store_true", help="torch.compile the model after the conversion")
p.add_argument("--dim", type=int, default=2048)
p.add_argument("--layers", type=int, default=4)
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()


class Block(nn.Module):
    def __init__(self, dim: int, heads: int = 16):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, dim: int, layers: int, vocab: int = 32000):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


model = Model(args.dim, args.layers).to(device="cuda", dtype=torch.bfloat16)

if not args.no_fp8:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    def module_filter_fn(mod: nn.Module, fqn: str) -> bool:
        # torchao's advice: keep the output projection in high precision, and only convert layers whose
        # dimensions the fp8 GEMM kernels accept (multiples of 16)
        if fqn == "head":
            return False
        return isinstance(mod, nn.Linear) and mod.in_features % 16 == 0 and mod.out_features % 16 == 0

    config = Float8LinearConfig.from_recipe_name(args.recipe)
    convert_to_float8_training(model, config=config, module_filter_fn=module_filter_fn)

if args.compile:
    model = torch.compile(model)

opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
for step in range(args.steps):
    tokens = torch.randint(0, 32000, (args.batch_size, args.seq), device="cuda")
    logits = model(tokens)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.3f}", flush=True)
