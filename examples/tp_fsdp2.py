"""Train a Llama with 2-D parallelism: tensor + sequence parallel inside a node, FSDP2 across.

The world is a (dp, tp) DeviceMesh. Within each tp group the attention and MLP projections are
split Megatron-style (`ColwiseParallel` for wq/wk/wv/w1/w3, `RowwiseParallel` for wo/w2), the
norms run sequence-parallel on a slice of the sequence, the embedding is split over the
vocabulary and the output projection over its columns (torchtitan's plan). Every parameter is
then a DTensor on the tp mesh, and `fully_shard` shards it again over dp.

    torchrun --nproc-per-node 4 examples/tp_fsdp2.py --tp 2 --model tiny --steps 5
    maya predict --gpu h100 --nproc-per-node 8 --nnodes 2 examples/tp_fsdp2.py --tp 8 --model llama3-8b
"""

import torch
from common import StepLog, batches, compute_dtype, finish, loss_fn, model_config, optimizer, parser, setup
from model import Transformer, count_params
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)


def tensor_parallel(model: Transformer, tp_mesh) -> None:
    """Shard `model` in place over `tp_mesh`; activations between blocks stay split along the sequence."""
    root_plan = {
        "tok_emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    # a pipeline stage may lack some of these (examples/pipeline.py reuses this plan)
    parallelize_module(model, tp_mesh, {k: v for k, v in root_plan.items() if getattr(model, k) is not None})
    block_plan = {
        "attn_norm": SequenceParallel(),
        "attn": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
        "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
        "mlp_norm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.w1": ColwiseParallel(), "mlp.w3": ColwiseParallel(),
        "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
    for layer in model.layers.values():
        parallelize_module(layer, tp_mesh, block_plan)


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel degree (ranks per tp group)")
    args = p.parse_args()
    device, rank, world = setup()
    tp = min(args.tp, world)
    cfg = model_config(args)
    if world % tp or cfg.kv_heads % tp or cfg.seq_len % tp or cfg.vocab % tp:
        raise SystemExit(f"--tp {tp} must divide the world size {world}, the {cfg.kv_heads} kv heads, "
                         f"the sequence length {cfg.seq_len} and the vocabulary {cfg.vocab}")
    if cfg.positions != "rope" or cfg.mlp != "swiglu":
        raise SystemExit("this example's tensor-parallel plan is for Llama-style presets (rope, swiglu)")
    torch.manual_seed(args.seed)
    mesh = init_device_mesh(device.type, (world // tp, tp), mesh_dim_names=("dp", "tp"))

    with torch.device("meta"):
        model = Transformer(cfg)
    if rank == 0:
        print(f"{count_params(model) / 1e6:.1f}M parameters, dp={world // tp} x tp={tp} on {device.type}", flush=True)
    tensor_parallel(model, mesh["tp"])
    mp = MixedPrecisionPolicy(param_dtype=compute_dtype(device, args.dtype), reduce_dtype=torch.float32)
    for layer in model.layers.values():
        fully_shard(layer, mesh=mesh["dp"], mp_policy=mp)
    fully_shard(model, mesh=mesh["dp"], mp_policy=mp)
    model.to_empty(device=device)
    model.init_weights(args.seed)

    opt = optimizer(model, args.lr)
    data = batches(cfg, args.batch_size, device, args.seed + mesh["dp"].get_local_rank())  # a tp group shares data
    log = StepLog(rank, args.log_every, (world // tp) * args.batch_size * cfg.seq_len)
    for step in range(args.steps):
        x, y = next(data)
        loss = loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        log(step, loss)
    finish()


if __name__ == "__main__":
    main()
