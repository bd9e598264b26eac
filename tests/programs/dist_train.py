"""Distributed training written the ordinary torchrun way: --mode ddp | fsdp | tp | pp | coll."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--mode", default="ddp")
p.add_argument("--steps", type=int, default=2)
args = p.parse_args()

rank, world, local_rank = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
use_cuda = torch.cuda.is_available()
device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
if use_cuda:
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if use_cuda else "gloo")
print(f"backend={dist.get_backend()}")


def mlp(d=64):
    return nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))


if args.mode in ("ddp", "ddp_bn"):  # ddp_bn: buffers too, which DDP broadcasts before every forward
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = mlp() if args.mode == "ddp" else nn.Sequential(mlp(), nn.BatchNorm1d(64), mlp(), nn.BatchNorm1d(64))
    model = DDP(net.to(device), device_ids=[local_rank] if use_cuda else None)
    if args.mode == "ddp_bn":  # buckets of at most 4 KiB: more than two in flight, one- and many-tensor buckets
        dist._broadcast_coalesced(dist.group.WORLD, [p.detach() for p in model.parameters()], 4096, 0)
elif args.mode == "fsdp":
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = mlp().to(device)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
elif args.mode == "tp":
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device.type, (world,))
    model = parallelize_module(mlp().to(device), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
elif args.mode == "fsdp_tp":  # 2-D: TP inside pairs of ranks, FSDP across them
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device.type, (world // 2, 2), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(mlp().to(device), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
elif args.mode == "coll":
    x = torch.ones(1024, device=device)
    dist.all_reduce(x)
    out = torch.empty(1024 * world, device=device)
    dist.all_gather_into_tensor(out, x)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    sub = dist.new_group([0, 1]) if world >= 2 else None
    if sub is not None and rank in (0, 1):
        dist.broadcast(x, src=0, group=sub)
    import torch.distributed._functional_collectives as funcol

    y = funcol.all_reduce(x, "sum", dist.group.WORLD)
    y = y * 2
    dist.destroy_process_group()
    raise SystemExit(0)

if args.mode != "pp":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=args.mode in ("ddp", "ddp_bn", "fsdp"))
    for _ in range(args.steps):
        x = torch.randn(8, 64, device=device)
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
else:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    stage_mod = mlp().to(device)
    stage = PipelineStage(stage_mod, rank, world, device)
    schedule = Schedule1F1B if os.environ.get("PP_SCHEDULE") == "1f1b" else ScheduleGPipe
    sched = schedule(stage, n_microbatches=4 if schedule is Schedule1F1B else 2, loss_fn=lambda out, tgt: out.sum())
    opt = torch.optim.AdamW(stage_mod.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(8, 64, device=device)
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=x)
        else:
            sched.step()
        opt.step()
        opt.zero_grad()
dist.destroy_process_group()
