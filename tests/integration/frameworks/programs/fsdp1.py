"""FSDP1 training of a small GPT, the way the PyTorch FSDP tutorial writes it."""
import argparse
import functools
import os

import torch
import torch.distributed as dist
from gpt import GPT, Block
from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

p = argparse.ArgumentParser()
p.add_argument("--strategy", default="FULL_SHARD")
p.add_argument("--orig-params", type=int, default=1)
p.add_argument("--offload", action="store_true")
p.add_argument("--ac", action="store_true")
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()

dist.init_process_group("nccl")
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)

model = GPT()
wrap = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16)
kw = {}
if args.strategy == "HYBRID_SHARD":
    from torch.distributed.device_mesh import init_device_mesh
    kw["device_mesh"] = init_device_mesh("cuda", (1, dist.get_world_size()))
model = FSDP(model, auto_wrap_policy=wrap, mixed_precision=mp,
             sharding_strategy=getattr(ShardingStrategy, args.strategy),
             use_orig_params=bool(args.orig_params), device_id=torch.cuda.current_device(),
             cpu_offload=CPUOffload(offload_params=args.offload), **kw)
if args.ac:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )
    apply_activation_checkpointing(
        model, checkpoint_wrapper_fn=functools.partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
        check_fn=lambda m: isinstance(m, Block))
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
for step in range(args.steps):
    x = torch.randint(0, 1024, (8, 128), device="cuda")
    y = torch.randint(0, 1024, (8, 128), device="cuda")
    loss = model(x, y)
    loss.backward()
    model.clip_grad_norm_(1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if rank == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)
dist.destroy_process_group()
