"""Train a GPT with FSDP2 (`fully_shard`): parameters, gradients and optimizer state sharded over all ranks.

The model is built on the meta device, sharded, and only then materialised, so even the
llama3-8b preset never needs the full model in memory on one rank.

    torchrun --nproc-per-node 2 examples/fsdp2.py --model tiny --steps 5
    maya predict --gpu h100 --nproc-per-node 8 examples/fsdp2.py --model llama3-8b --batch-size 1

`--grad-accum N` runs N micro-batches of `--batch-size` sequences per optimizer step (gradient
accumulation; FSDP2 reduce-scatters after every micro-batch's backward, as torchtitan does).
"""

import torch
from common import StepLog, batches, compute_dtype, finish, loss_fn, model_config, optimizer, parser, setup
from model import Transformer, count_params
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    args = p.parse_args()
    device, rank, world = setup()
    cfg = model_config(args)
    torch.manual_seed(args.seed)
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("dp",))

    with torch.device("meta"):
        model = Transformer(cfg)
    if rank == 0:
        print(f"{count_params(model) / 1e6:.1f}M parameters, {world} ranks on {device.type}", flush=True)
    # Mixed precision the FSDP2 way: bf16 compute and all-gathers, fp32 gradient reduction.
    mp = MixedPrecisionPolicy(param_dtype=compute_dtype(device, args.dtype), reduce_dtype=torch.float32)
    for layer in model.layers.values():
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    model.to_empty(device=device)
    model.init_weights(args.seed)

    opt = optimizer(model, args.lr)
    data = batches(cfg, args.batch_size, device, args.seed + rank)
    log = StepLog(rank, args.log_every, world * args.batch_size * args.grad_accum * cfg.seq_len)
    for step in range(args.steps):
        for _ in range(args.grad_accum):
            x, y = next(data)
            loss = loss_fn(model(x), y) / args.grad_accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        log(step, loss)
    finish()


if __name__ == "__main__":
    main()
