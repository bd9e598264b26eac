"""Train a GPT on one device: the plainest loop maya has to understand.

    python examples/gpt_single.py --model tiny --steps 5
    maya predict --gpu h100 examples/gpt_single.py --model gpt2-small --batch-size 8
"""

import torch
from common import StepLog, autocast, batches, loss_fn, model_config, optimizer, parser, setup
from model import Transformer, count_params


def main():
    args = parser(__doc__.splitlines()[0]).parse_args()
    device, _, _ = setup(distributed=False)
    cfg = model_config(args)
    torch.manual_seed(args.seed)

    with torch.device("meta"):
        model = Transformer(cfg)
    model.to_empty(device=device)
    if cfg.tie_embeddings:  # to_empty may give each module its own copy of a shared weight
        model.lm_head.weight = model.tok_emb.weight
    model.init_weights(args.seed)
    print(f"{count_params(model) / 1e6:.1f}M parameters on {device}", flush=True)

    if args.compile:
        model = torch.compile(model)
    opt = optimizer(model, args.lr)
    data = batches(cfg, args.batch_size, device, args.seed)
    log = StepLog(0, args.log_every, args.batch_size * cfg.seq_len)
    for step in range(args.steps):
        x, y = next(data)
        with autocast(device, args.dtype):
            loss = loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        log(step, loss)


if __name__ == "__main__":
    main()
