"""Hugging Face `Trainer` on a Llama built from a config: a stock third-party training loop for maya.

Nothing is downloaded: the model is `LlamaForCausalLM(LlamaConfig(...))` with random weights and
the data are random token ids (labels = input ids), so the script runs offline
(`HF_HUB_OFFLINE=1`). Everything else is the user-facing `Trainer`/`TrainingArguments` API, used
the way a user would: on a GPU (real or emulated by `maya emulate`) Trainer picks `cuda` and, when
WORLD_SIZE > 1, DDP over nccl; on a CPU-only machine it runs on the CPU with gloo.

    python examples/third_party/hf_trainer.py --steps 5                          # CPU, world 1
    torchrun --nproc_per_node 2 examples/third_party/hf_trainer.py --steps 5     # CPU, DDP/gloo
    maya emulate --gpu h100 --nproc-per-node 2 examples/third_party/hf_trainer.py --size llama3-8b --bf16

Needs `transformers` and `accelerate` (not maya dependencies).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

# Model shapes; "tiny" trains for real on a laptop CPU, "llama3-8b" is for emulation.
SIZES = {
    "tiny": dict(vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=2048),
    "llama3-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0, tie_word_embeddings=True),
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0),
}


class RandomTokens(Dataset):
    """`n` sequences of random token ids; a causal LM learns nothing from them, which is fine for timing."""

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class StepTimer(TrainerCallback):
    """Prints one `step=N s=...` line per optimizer step (rank 0 only)."""

    def __init__(self):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        if state.is_world_process_zero:
            print(f"step={state.global_step} s={now - self.t0:.3f}", flush=True)
        self.t0 = now


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="tiny", choices=sorted(SIZES))
    p.add_argument("--layers", type=int, help="override the preset's number of decoder layers")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=4, help="sequences per rank and step")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (GPU targets)")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attention implementation")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--optim", default="adamw_torch", help="TrainingArguments.optim (adamw_torch, adamw_torch_fused)")
    p.add_argument("--output-dir", default=os.environ.get("HF_TRAINER_OUT", "/tmp/maya-hf-trainer"))
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    shape = dict(SIZES[args.size])
    if args.layers is not None:
        shape["num_hidden_layers"] = args.layers
    config = LlamaConfig(**shape)
    config._attn_implementation = args.attn
    model = LlamaForCausalLM(config)
    on_gpu = torch.cuda.is_available()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    targs = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum, learning_rate=3e-4, logging_steps=1, report_to="none",
        save_strategy="no", bf16=args.bf16, use_cpu=not on_gpu, optim=args.optim,
        ddp_backend=None if on_gpu or world == 1 else "gloo", dataloader_num_workers=0,
        gradient_checkpointing=args.gradient_checkpointing, disable_tqdm=True,
    )
    data = RandomTokens(args.batch_size * world * args.grad_accum * args.steps, args.seq_len, config.vocab_size)
    trainer = Trainer(model=model, args=targs, train_dataset=data, callbacks=[StepTimer()])
    if trainer.is_world_process_zero():
        n = sum(p.numel() for p in model.parameters())
        print(f"params={n} device={trainer.args.device} world={world}", flush=True)
    trainer.train()


if __name__ == "__main__":
    main()
