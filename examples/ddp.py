"""Train a GPT with DistributedDataParallel: every rank holds the whole model, gradients are all-reduced.

    torchrun --nproc-per-node 2 examples/ddp.py --model tiny --steps 5
    maya predict --gpu h100 --nproc-per-node 8 examples/ddp.py --model gpt2-small --batch-size 8
"""

import torch
from common import StepLog, autocast, batches, finish, loss_fn, model_config, optimizer, parser, setup
from model import Transformer, count_params
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    device, rank, world = setup()
    cfg = model_config(args)
    torch.manual_seed(args.seed)

    with torch.device("meta"):
        model = Transformer(cfg)
    model.to_empty(device=device)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.tok_emb.weight
    model.init_weights(args.seed)  # same seed everywhere; DDP also broadcasts rank 0's weights
    if rank == 0:
        print(f"{count_params(model) / 1e6:.1f}M parameters, {world} ranks on {device.type}", flush=True)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    opt = optimizer(model, args.lr)
    data = batches(cfg, args.batch_size, device, args.seed + rank)  # each rank sees different data
    log = StepLog(rank, args.log_every, world * args.batch_size * cfg.seq_len)
    for step in range(args.steps):
        x, y = next(data)
        with autocast(device, args.dtype):
            loss = loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        log(step, loss)
    finish()


if __name__ == "__main__":
    main()
