"""What every example shares: flags, process-group setup, synthetic batches, the optimizer step.

Kept deliberately plain: this is the code a user would write, and maya must run it unchanged.
The device comes from `torch.cuda.is_available()` (nccl on GPUs, gloo on CPU) and the rank
layout from torchrun's environment, so the same script runs under `torchrun`, under
`maya emulate` (which pretends to be N GPUs) and under `maya profile` (CPU, for real).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from model import PRESETS, ModelConfig

DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
          "float16": torch.float16, "fp16": torch.float16}


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default="tiny", choices=sorted(PRESETS), help="size preset; flags below override it")
    p.add_argument("--layers", type=int)
    p.add_argument("--d-model", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--ffn-dim", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--batch-size", type=int, default=4, help="sequences per data-parallel rank and step")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES),
                   help="compute dtype on GPUs (autocast / FSDP mixed precision); CPU runs stay float32")
    p.add_argument("--activation-checkpointing", "--ac", action="store_true", dest="ac")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (Inductor)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=1)
    return p


def model_config(args) -> ModelConfig:
    fields = dict(PRESETS[args.model])
    for flag, key in (("layers", "layers"), ("d_model", "d_model"), ("heads", "heads"), ("kv_heads", "kv_heads"),
                      ("ffn_dim", "ffn_dim"), ("seq_len", "seq_len"), ("vocab", "vocab")):
        if getattr(args, flag) is not None:
            fields[key] = getattr(args, flag)
    if args.heads is not None and args.kv_heads is None and "kv_heads" in fields:
        fields["kv_heads"] = min(fields["kv_heads"], args.heads)
    if args.d_model is not None and args.ffn_dim is None:
        fields.pop("ffn_dim", None)
    fields["checkpoint"] = args.ac
    return ModelConfig(**fields)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(distributed: bool = True) -> tuple[torch.device, int, int]:
    """Pick the device and start the process group; returns (device, rank, world_size).

    Without torchrun's environment the script still runs as a world of one.
    """
    if distributed and "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if distributed and not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return device, rank, world


def autocast(device: torch.device, dtype: str):
    """bf16/fp16 autocast on GPUs; a no-op on CPU (CPU runs are the float32 reference)."""
    if device.type == "cuda" and DTYPES[dtype] != torch.float32:
        return torch.autocast("cuda", dtype=DTYPES[dtype])
    return contextlib.nullcontext()


def compute_dtype(device: torch.device, dtype: str) -> torch.dtype:
    return DTYPES[dtype] if device.type == "cuda" else torch.float32


def batches(cfg: ModelConfig, batch_size: int, device: torch.device, seed: int):
    """Endless random token batches (inputs, targets), made on the host and copied over like a data loader's."""
    gen = torch.Generator().manual_seed(seed)
    pin = device.type == "cuda"
    while True:
        tokens = torch.randint(0, cfg.vocab, (batch_size, cfg.seq_len + 1), generator=gen)
        if pin:
            tokens = tokens.pin_memory()
        tokens = tokens.to(device, non_blocking=True)
        yield tokens[:, :-1], tokens[:, 1:]


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)


class StepLog:
    """Rank 0 prints loss and step time every `every` steps."""

    def __init__(self, rank: int, every: int, tokens_per_step: int):
        self.rank, self.every, self.tokens = rank, max(every, 1), tokens_per_step
        self.t0 = time.perf_counter()

    def __call__(self, step: int, loss: torch.Tensor | None) -> None:
        if self.rank != 0 or (step + 1) % self.every:
            return
        dt = time.perf_counter() - self.t0
        self.t0 = time.perf_counter()
        shown = f"{loss.item():.4f}" if loss is not None else "-"
        print(f"step {step + 1}: loss {shown}  {dt * 1000:.0f} ms  {self.tokens / dt:,.0f} tok/s", flush=True)


def finish() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
