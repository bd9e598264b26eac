"""DeepSpeed ZeRO training of a small GPT, the way DeepSpeed's tutorials write it."""
import argparse

import deepspeed
import torch
from gpt import GPT

p = argparse.ArgumentParser()
p.add_argument("--stage", type=int, default=3)
p.add_argument("--overlap", action="store_true")
p.add_argument("--offload", action="store_true", help="optimizer states and step on the host (offload_optimizer)")
p.add_argument("--offload-param", action="store_true", help="ZeRO-3: parameters kept on the host (offload_param)")
p.add_argument("--clip", type=float, default=1.0)
p.add_argument("--no-prefetch", action="store_true", help="ZeRO-3: fetch each module's parameters when it runs")
p.add_argument("--steps", type=int, default=3)
p.add_argument("--local_rank", type=int, default=-1)
args = p.parse_args()

config = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": args.clip,
    "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
    "zero_optimization": {
        "stage": args.stage,
        "overlap_comm": args.overlap,
        "contiguous_gradients": True,
        "reduce_bucket_size": 5e5,
        "stage3_prefetch_bucket_size": 5e5,
        "stage3_param_persistence_threshold": 1e4,
    },
    "steps_per_print": 1000,
}
if args.no_prefetch:
    config["zero_optimization"].update(stage3_prefetch_bucket_size=0, stage3_max_live_parameters=0,
                                       stage3_max_reuse_distance=0)
if args.offload:
    config["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
if args.offload_param:
    config["zero_optimization"]["offload_param"] = {"device": "cpu", "pin_memory": True}

deepspeed.init_distributed()
model = GPT()
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
for step in range(args.steps):
    x = torch.randint(0, 1024, (8, 128), device=engine.device)
    y = torch.randint(0, 1024, (8, 128), device=engine.device)
    loss = engine(x, y)
    engine.backward(loss)
    engine.step()
    if engine.global_rank == 0:
        print(f"step {step} loss {loss.item():.3f}", flush=True)
