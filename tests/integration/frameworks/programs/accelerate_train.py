"""Training a small GPT with HF Accelerate, the way Accelerate's examples write it: the model, optimizer and
data loader go through `accelerator.prepare`, the loop calls `accelerator.backward`. The sharding plugin is
chosen here (FSDP or DeepSpeed ZeRO-3) as an `accelerate launch --config_file` would choose it."""
import argparse

import torch
from accelerate import Accelerator, DeepSpeedPlugin, FullyShardedDataParallelPlugin
from gpt import GPT, Block
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--plugin", choices=["fsdp", "deepspeed"], default="fsdp")
p.add_argument("--fsdp-version", type=int, default=1)
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()

if args.plugin == "fsdp":
    plugin = FullyShardedDataParallelPlugin(fsdp_version=args.fsdp_version, auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=["Block"], use_orig_params=True,
                                            reshard_after_forward=True if args.fsdp_version == 2 else None)
    accelerator = Accelerator(mixed_precision="bf16", fsdp_plugin=plugin)
else:
    plugin = DeepSpeedPlugin(zero_stage=3, gradient_clipping=1.0)
    accelerator = Accelerator(mixed_precision="bf16", deepspeed_plugin=plugin)

model = GPT()
assert Block  # the layer class FSDP wraps
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
tokens = torch.randint(0, 1024, (8 * args.steps * accelerator.num_processes, 128))
loader = DataLoader(TensorDataset(tokens), batch_size=8, shuffle=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
model.train()
for step, (x,) in enumerate(loader):
    loss = model(x, x)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    accelerator.print(f"step {step} loss {loss.item():.3f} device={accelerator.device}")
