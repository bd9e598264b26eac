"""Train a Llama with pipeline parallelism (`torch.distributed.pipelining`, 1F1B), optionally with FSDP2 and TP.

Each pipeline rank builds the whole model on the meta device, deletes the layers it does not
own (the first stage keeps the embedding, the last the final norm and output projection) and
materialises only its own part. The world is a (dp, pp, tp) DeviceMesh: each batch is cut into
micro-batches that flow through the stages with a one-forward-one-backward schedule; with
`--tp` each stage is also tensor/sequence parallel (the plan of examples/tp_fsdp2.py) and
with dp > 1 it is sharded with FSDP2 over dp. Three-dimensional parallelism in ~130 lines.

    torchrun --nproc-per-node 2 examples/pipeline.py --model tiny --steps 5
    torchrun --nproc-per-node 4 examples/pipeline.py --pp 2 --model tiny       # 2 stages x dp 2
    maya predict --gpu h100 --nproc-per-node 8 examples/pipeline.py --model llama3-8b --pp 4 --batch-size 8
    maya emulate --gpu h100 --nproc-per-node 8 --nnodes 8 examples/pipeline.py --pp 4 --tp 2 --layers 4
"""

import torch
import torch.distributed as dist
from common import StepLog, autocast, batches, finish, loss_fn, model_config, optimizer, parser, setup
from model import Transformer, count_params
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor import DTensor
from tp_fsdp2 import tensor_parallel


def build_stage(cfg, stage: int, stages: int) -> Transformer:
    """The part of the model stage `stage` of `stages` owns (layers split as evenly as possible)."""
    with torch.device("meta"):
        model = Transformer(cfg)
    per, extra = divmod(cfg.layers, stages)
    start = stage * per + min(stage, extra)
    stop = start + per + (1 if stage < extra else 0)
    for i in range(cfg.layers):
        if not start <= i < stop:
            del model.layers[str(i)]
    if stage > 0:
        model.tok_emb = None
        model.pos_emb = None
    if stage < stages - 1:
        model.norm = None
        model.lm_head = None
    return model


def clip_grad_norm(params, max_norm: float, pp_group) -> torch.Tensor:
    """Global-norm clipping when each stage holds only part of the gradients: sum the squares over stages."""
    params = [p for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    if isinstance(norm, DTensor):  # FSDP-sharded gradients: reduce over dp first
        norm = norm.full_tensor()
    squared = norm.square()
    dist.all_reduce(squared, group=pp_group)
    total = squared.sqrt()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


def main():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--pp", type=int, help="pipeline stages (default: the whole world)")
    p.add_argument("--microbatches", type=int, help="micro-batches per step (default: the number of stages)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree inside each stage")
    args = p.parse_args()
    device, rank, world = setup()
    tp = args.tp
    pp = args.pp or world // tp
    cfg = model_config(args)
    microbatches = args.microbatches or pp
    if world % (pp * tp) or pp > cfg.layers:
        raise SystemExit(f"--pp {pp} x --tp {tp} must divide the world size {world}, and pp not exceed the "
                         f"{cfg.layers} layers")
    if tp > 1 and (cfg.kv_heads % tp or cfg.seq_len % tp or cfg.vocab % tp):
        raise SystemExit(f"--tp {tp} must divide the kv heads, the sequence length and the vocabulary")
    if args.batch_size % microbatches or microbatches < pp:
        raise SystemExit(f"--batch-size {args.batch_size} must split into {microbatches} micro-batches (>= {pp})")
    if cfg.tie_embeddings and pp > 1:
        raise SystemExit("tied embeddings cannot span pipeline stages; use a preset with untied embeddings")
    torch.manual_seed(args.seed)
    dp = world // (pp * tp)
    mesh = init_device_mesh(device.type, (dp, pp, tp), mesh_dim_names=("dp", "pp", "tp"))
    stage_idx, dp_rank = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()

    model = build_stage(cfg, stage_idx, pp)
    if tp > 1:
        tensor_parallel(model, mesh["tp"])
    if rank == 0:
        with torch.device("meta"):
            total = count_params(Transformer(cfg))
        print(f"{total / 1e6:.1f}M parameters, dp={dp} x pp={pp} x tp={tp}, "
              f"{microbatches} micro-batches on {device.type}", flush=True)
    if dp > 1:
        for layer in model.layers.values():
            fully_shard(layer, mesh=mesh["dp"], reshard_after_forward=False)
        fully_shard(model, mesh=mesh["dp"], reshard_after_forward=False)
    model.to_empty(device=device)
    model.init_weights(args.seed + stage_idx)

    stage = PipelineStage(model, stage_idx, pp, device, group=mesh["pp"].get_group())
    schedule = Schedule1F1B(stage, n_microbatches=microbatches, loss_fn=loss_fn)
    first, last = stage_idx == 0, stage_idx == pp - 1
    opt = optimizer(model, args.lr)
    data = batches(cfg, args.batch_size, device, args.seed + dp_rank)  # every stage of a pipeline draws the same batch
    logger = last and dp_rank == 0 and mesh["tp"].get_local_rank() == 0
    log = StepLog(0 if logger else 1, args.log_every, dp * args.batch_size * cfg.seq_len)
    for step in range(args.steps):
        x, y = next(data)
        losses = []
        with autocast(device, args.dtype):
            if first and last:
                schedule.step(x, target=y, losses=losses)
            elif first:
                schedule.step(x)
            elif last:
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
        clip_grad_norm(model.parameters(), 1.0, mesh["pp"].get_group())
        opt.step()
        opt.zero_grad(set_to_none=True)
        log(step, torch.stack(losses).mean() if losses else None)
    finish()


if __name__ == "__main__":
    main()
