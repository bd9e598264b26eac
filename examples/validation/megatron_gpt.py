"""GPT training with Megatron-style tensor, pipeline and data parallelism, in plain PyTorch.

The validation workload of maya: it reproduces the configurations behind published GPU
measurements (vTrain's Megatron-DeepSpeed GPT runs on A100, NeuSight's 4-GPU Megatron-LM GPT-2-large
runs on H100 and A100; its single-GPU rows are `hf_gpt2.py`'s) as an ordinary training program, so
`maya predict` can be compared with them.

    torchrun --nproc-per-node 8 megatron_gpt.py --layers 24 --hidden 2048 --heads 16 \
        --tp 2 --pp 2 --micro-batch 4 --global-batch 32 --dtype fp16 --checkpoint

Layout follows Megatron: rank = (pp_stage * dp + dp_rank) * tp + tp_rank, TP innermost.
- TP: column/row-parallel linears, vocab-parallel embedding and loss (tensor_parallel.py);
- PP: torch.distributed.pipelining with the 1F1B schedule (GPipe when micro-batches < stages); the
  first and last stage share the word embedding, so its gradient is all-reduced between them
  (Megatron's embedding group). Its sends and receives behave as Megatron's (`--p2p megatron`, the
  default): each batch is waited for where it is issued and the device is then synchronized
  (`megatron_p2p`); `--p2p torch` keeps torch's own (some sends waited later, no device sync). With TP,
  each rank sends only its 1/TP of the activation (or gradient) and the receiving stage all-gathers the
  pieces inside its TP group, as Megatron-DeepSpeed's own pipeline (`scatter_gather_tensors_in_pipeline`)
  and DeepSpeed's pipeline engine (`pipe_partitioned`, `grad_partitioned`) do by default;
  `--no-scatter-gather` sends whole activations, as megatron-core's pipeline does;
- DP: DistributedDataParallel over the data-parallel group (bucketed gradient all-reduce);
- micro/global batch: global = micro * dp * microbatches (gradient accumulation);
- activation checkpointing per transformer block; fp32, or fp16/bf16 autocast, or with
  `--half-params` Megatron's own mixed precision (`--fp16`/`--bf16` there): parameters, activations
  and gradients in half precision (so DDP and TP move half the bytes), fp32 main weights in the
  optimizer, gradients unscaled and checked for inf/NaN across the model-parallel group before the step,
  the loss in fp32; with eager attention, Megatron's activation layout too ([s, b, h] from the embedding to
  the loss) and its attention (q, k and v as views into `baddbmm`/`bmm`, its fused causal softmax where
  the kernel takes the shape, its fp32 softmax elsewhere);
- gradients clipped by their global norm before every step (`--clip-grad`, Megatron's default 1.0);
- optimizer: AdamW as torch picks it (`--adam torch`: foreach on a GPU, several passes over the weights
  and their moments), or one multi-tensor kernel for the whole step (`--adam fused`), which is what
  Megatron-LM and Megatron-DeepSpeed step with on CUDA (Apex's `FusedAdam`).
It runs on whatever `torch.cuda.is_available()` says: GPUs with NCCL, else CPU with gloo.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from tensor_parallel import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    copy_to_tp,
    vocab_parallel_cross_entropy,
)
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# ----------------------------------------------------------------------------- model
class CausalSoftmax(torch.autograd.Function):
    """Megatron's fused causal softmax (`ScaledUpperTriangMaskedSoftmax`, used for fp16/bf16 scores):
    one kernel forward (mask and softmax together) and one backward, rather than a masked_fill that
    copies the whole score tensor, a softmax, and the masked_fill's own backward. torch's
    `_masked_softmax` is that one-kernel forward; a masked softmax's backward is a plain softmax
    backward (masked positions have probability 0, so their gradient is 0). Under maya it is one
    kernel row at any length, as Megatron's is up to 4,096 keys; on a GPU, torch's own kernel covers
    rows of up to 1,024 keys and runs masked_fill + softmax beyond."""

    @staticmethod
    def forward(ctx, scores, masked_out):
        probs = torch._masked_softmax(scores, masked_out, -1, 0)  # mask type 0: one (seq, seq) mask
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, grad):
        (probs,) = ctx.saved_tensors
        return torch._softmax_backward_data(grad, probs, -1, probs.dtype), None


def fused_softmax_fits(attn_batches: int, sq: int, sk: int) -> bool:
    """Megatron's `FusedScaleMaskSoftmax.is_kernel_available` for a causal mask (microsoft/Megatron-DeepSpeed
    `megatron/model/fused_softmax.py`; the copy in vTrain's `src/model/fused_softmax.py` has the same rule):
    16 < keys <= 4096, both lengths multiples of 4, batch x heads per partition a multiple of 4 and of the
    kernel's rows per thread block (`get_batch_per_block` in `scaled_masked_softmax.h`: 128 threads, one
    warp per row, up to 32 lanes wide, two rows a warp for rows of at most 128 keys). Megatron runs
    `forward_torch_softmax` otherwise: at TP8 with 16 heads and micro-batch 1 (2 rows of heads), for one."""
    if not (16 < sk <= 4096 and sq % 4 == 0 and sk % 4 == 0 and attn_batches % 4 == 0):
        return False
    width = 1 << (sk - 1).bit_length()
    rows_per_block = (128 // min(width, 32)) * (2 if width <= 128 else 1)
    return attn_batches % rows_per_block == 0


class Attention(nn.Module):
    def __init__(self, a, tp_group, tp: int, layer_number: int = 1):
        super().__init__()
        # Megatron's query-key layer scaling (on by default): scores divided by the layer number as well,
        # and multiplied back by it in the softmax (in fp32 when the fused kernel cannot take the shape)
        self.layer_number = layer_number
        self.heads = a.heads // tp
        self.head_dim = a.hidden // a.heads
        self.qkv = ColumnParallelLinear(a.hidden, 3 * a.hidden, tp_group)
        self.proj = RowParallelLinear(a.hidden, a.hidden, tp_group, std=0.02 / math.sqrt(2 * a.layers))
        self.dropout = a.dropout
        self.eager = a.attention == "eager"
        # fp16/bf16 scores go through Megatron's FusedScaleMaskSoftmax (megatron_softmax)
        self.half_softmax = a.dtype in ("fp16", "bf16")
        self.seq_first = a.seq_first
        if self.eager:
            self.register_buffer("causal", torch.ones(a.seq, a.seq, dtype=torch.bool).tril(), persistent=False)
            self.register_buffer("future", ~self.causal, persistent=False)  # the positions a token may not see

    def forward(self, x):
        drop = self.dropout if self.training else 0.0
        if self.seq_first:
            return self.proj(self.core_attention(x, drop))
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if self.eager and self.half_softmax:  # Megatron's softmax on [b, s, h] activations (fp16/bf16 autocast)
            fused = fused_softmax_fits(b * self.heads, s, s)
            att = (q * (1.0 / self.norm_factor(fused))) @ k.transpose(-2, -1)
            y = F.dropout(self.megatron_softmax(att, fused), drop, self.training) @ v
        elif self.eager:  # what GPT-2 implementations did before fused attention: matmul, mask, softmax, matmul
            att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            att = att.masked_fill(~self.causal[:s, :s], float("-inf")).softmax(dim=-1)
            y = F.dropout(att, drop, self.training) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, -1))

    def core_attention(self, x, drop: float):
        """Megatron's ParallelAttention and CoreAttention on [s, b, h] activations (Megatron-DeepSpeed as vTrain
        measured it; vTrain's copy of the model, `src/model/gpt_modeling.py`, has the same lines): q, k and v are
        views of the QKV output ([s, b, heads, 3 x head_dim], split), the scores one `baddbmm` into a fresh
        buffer with the scale as `alpha`, the context one `bmm`, and a single copy back to [s, b, h]."""
        s, b, _ = x.shape
        n = b * self.heads
        mixed = self.qkv(x).view(s, b, self.heads, 3 * self.head_dim)
        q, k, v = (t.view(s, n, self.head_dim) for t in mixed.split(self.head_dim, dim=-1))
        fused = fused_softmax_fits(n, s, s)
        scores = torch.baddbmm(torch.empty(n, s, s, dtype=q.dtype, device=q.device), q.transpose(0, 1),
                               k.transpose(0, 1).transpose(1, 2), beta=0.0, alpha=1.0 / self.norm_factor(fused))
        probs = F.dropout(self.megatron_softmax(scores.view(b, self.heads, s, s), fused), drop, self.training)
        context = torch.bmm(probs.view(n, s, s), v.transpose(0, 1))
        return context.view(b, self.heads, s, self.head_dim).permute(2, 0, 1, 3).contiguous().view(s, b, -1)

    def norm_factor(self, fused: bool) -> float:
        """What Megatron divides the scores by: sqrt(head_dim) x the layer number, which its softmax multiplies
        back (inside the fused kernel; here the fused path leaves both out, the same numbers)."""
        return math.sqrt(self.head_dim) * (1 if fused else self.layer_number)

    def megatron_softmax(self, scores, fused: bool):
        """Megatron's FusedScaleMaskSoftmax on [b, heads, s, s] half-precision scores: the fused causal kernel
        where it takes the shape (`fused_softmax_fits`), else `forward_torch_softmax`: to fp32, times the layer
        number, the mask filled in place (Megatron's `attention_mask_func`), softmax, back to half."""
        s = scores.shape[-1]
        with torch.autocast(scores.device.type, enabled=False):  # autocast would run softmax in fp32
            if fused:
                return CausalSoftmax.apply(scores, self.future[:s, :s])
            fp32 = scores.float() * self.layer_number
            fp32.masked_fill_(self.future[:s, :s], -10000.0)
            return torch.softmax(fp32, dim=-1).to(scores.dtype)


class MLP(nn.Module):
    def __init__(self, a, tp_group):
        super().__init__()
        self.fc = ColumnParallelLinear(a.hidden, a.ffn, tp_group)
        self.proj = RowParallelLinear(a.ffn, a.hidden, tp_group, std=0.02 / math.sqrt(2 * a.layers))

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, a, tp_group, tp: int, layer_number: int = 1):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(a.hidden), nn.LayerNorm(a.hidden)
        self.attn, self.mlp = Attention(a, tp_group, tp, layer_number), MLP(a, tp_group)
        self.dropout = nn.Dropout(a.dropout)

    def forward(self, x):
        x = x + self.dropout(self.attn(self.ln1(x)))
        return x + self.dropout(self.mlp(self.ln2(x)))


class ToPipelineChunk(torch.autograd.Function):
    """Before a pipeline send: this TP rank's 1/TP of the flattened activation (Megatron's
    `split_tensor_into_1d_equal_chunks`, a view). Backward: the gradient's pieces that come back, one per TP
    rank, all-gathered into the whole gradient (Megatron's `gather_split_1d_tensor` after a receive)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group, ctx.shape = group, x.shape
        return _own_chunk(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather_chunks(grad, ctx.group).view(ctx.shape), None


class FromPipelineChunk(torch.autograd.Function):
    """After a pipeline receive: the TP group's pieces all-gathered into the whole activation of `shape`.
    Backward: this rank's 1/TP of the gradient (the same on every TP rank) is what goes back down the pipe."""

    @staticmethod
    def forward(ctx, chunk, shape, group):
        ctx.group = group
        return _gather_chunks(chunk, group).view(shape)

    @staticmethod
    def backward(ctx, grad):
        return _own_chunk(grad, ctx.group), None, None


def _own_chunk(x, group):
    flat = x.reshape(-1)
    size = flat.numel() // dist.get_world_size(group)
    start = dist.get_rank(group) * size
    return flat[start:start + size]


def _gather_chunks(chunk, group):
    whole = torch.empty(chunk.numel() * dist.get_world_size(group), dtype=chunk.dtype, device=chunk.device)
    dist.all_gather_into_tensor(whole, chunk.contiguous(), group=group)
    return whole


def activation_shape(a) -> tuple:
    """What one micro-batch passes between stages: [s, b, h] in Megatron's layout, else [b, s, h]."""
    return ((a.seq, a.micro_batch) if a.seq_first else (a.micro_batch, a.seq)) + (a.hidden,)


class GPTStage(nn.Module):
    """The layers one pipeline stage owns: the first adds the embeddings, the last the LM head. With
    `scatter_gather`, what passes between stages is each TP rank's 1/TP of the activation (`ToPipelineChunk`)."""

    def __init__(self, a, layers: range, first: bool, last: bool, tp_group, tp: int):
        super().__init__()
        self.first, self.last, self.checkpoint, self.seq_first = first, last, a.checkpoint, a.seq_first
        self.scatter_gather, self.act_shape = a.scatter_gather, activation_shape(a)
        self.wte = VocabParallelEmbedding(a.vocab, a.hidden, tp_group) if first or last else None
        self.wpe = nn.Embedding(a.seq, a.hidden) if first else None
        if self.wpe is not None:
            nn.init.normal_(self.wpe.weight, std=0.01)
        self.drop = nn.Dropout(a.dropout)
        self.blocks = nn.ModuleList(Block(a, tp_group, tp, i + 1) for i in layers)
        self.ln_f = nn.LayerNorm(a.hidden) if last else None
        self.tp_group = tp_group

    def forward(self, x):
        if self.scatter_gather and not self.first:
            x = FromPipelineChunk.apply(x, self.act_shape, self.tp_group)
        if self.first:
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.wte(x) + self.wpe(pos)
            if self.seq_first:  # Megatron's embedding turns [b, s, h] into [s, b, h] once, then drops out
                x = x.transpose(0, 1).contiguous()
            x = self.drop(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpoint and self.training else block(x)
        if self.last:  # logits for this rank's vocabulary slice, weight tied to the embedding
            x = F.linear(copy_to_tp(self.ln_f(x), self.tp_group), self.wte.weight)
        elif self.scatter_gather:
            x = ToPipelineChunk.apply(x, self.tp_group)
        return x


# ----------------------------------------------------------------------------- parallel layout
def build_groups(world: int, tp: int, pp: int):
    """Create every TP, DP, PP and embedding group (all ranks must create all of them, in order)."""
    dp = world // (tp * pp)
    rank = dist.get_rank() if dist.is_initialized() else 0
    coord = {"pp": rank // (dp * tp), "dp": (rank // tp) % dp, "tp": rank % tp}
    groups = {"tp": None, "dp": None, "pp": None, "emb": None, "mp": None}
    if world == 1:
        return dp, coord, groups
    at = lambda p, d, t: (p * dp + d) * tp + t
    group = lambda ranks: dist.new_group(ranks) if len(ranks) > 1 else None  # size 1: no communication
    for p in range(pp):
        for d in range(dp):
            g = group([at(p, d, t) for t in range(tp)])
            groups["tp"] = g if (p, d) == (coord["pp"], coord["dp"]) else groups["tp"]
        for t in range(tp):
            g = group([at(p, d, t) for d in range(dp)])
            groups["dp"] = g if (p, t) == (coord["pp"], coord["tp"]) else groups["dp"]
    for d in range(dp):
        for t in range(tp):
            ranks = [at(p, d, t) for p in range(pp)]
            g = group(ranks)
            emb = group([ranks[0], ranks[-1]]) if pp > 1 else None
            if (d, t) == (coord["dp"], coord["tp"]):
                groups["pp"], groups["emb"] = g, emb
    for d in range(dp):  # Megatron's model-parallel group: every TP and PP rank of one data-parallel replica
        g = group([at(p, d, t) for p in range(pp) for t in range(tp)])
        groups["mp"] = g if d == coord["dp"] else groups["mp"]
    return dp, coord, groups


def stage_layers(layers: int, pp: int, stage: int) -> range:
    per = layers // pp
    extra = layers % pp  # earlier stages take the remainder, one layer each
    start = stage * per + min(stage, extra)
    return range(start, start + per + (1 if stage < extra else 0))


# ----------------------------------------------------------------------------- training
def parse_args(argv=None, attention=("sdpa", "eager"), description=None):
    """The validation programs' command line; `megatron_core_gpt.py` parses the same one, with its own
    attention choices (the first is the default)."""
    p = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=None, help="MLP width (default 4 x hidden)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--pad-vocab-to", type=int, default=1,
                   help="pad the vocabulary to a multiple of this x TP (Megatron uses 128)")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=None, help="default: micro-batch x DP (no accumulation)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--half-params", action="store_true",
                   help="with fp16/bf16: Megatron-style half-precision model with fp32 main weights (no autocast)")
    p.add_argument("--attention", choices=attention, default=attention[0])
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--checkpoint", action="store_true", help="activation checkpointing of every block")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--adam", choices=("torch", "fused"), default="torch",
                   help="torch: AdamW as torch picks it (foreach on a GPU); fused: one multi-tensor kernel a "
                        "step, as Apex's FusedAdam that Megatron steps with on CUDA")
    p.add_argument("--clip-grad", type=float, default=1.0,
                   help="clip the gradients by their global L2 norm before the step, as Megatron does by default "
                        "(1.0); 0 turns it off")
    p.add_argument("--p2p", choices=("megatron", "torch"), default="megatron",
                   help="pipeline sends/receives: Megatron's (waited at once, then a device sync) or torch's own")
    p.add_argument("--no-scatter-gather", dest="scatter_gather", action="store_false",
                   help="with TP and PP: send whole activations between stages instead of each TP rank's 1/TP, "
                        "all-gathered by the receiver (Megatron-DeepSpeed's and DeepSpeed's pipeline default)")
    a = p.parse_args(argv)
    a.ffn = a.ffn or 4 * a.hidden
    if a.half_params and a.dtype == "fp32":
        p.error("--half-params needs --dtype fp16 or bf16")
    multiple = a.pad_vocab_to * a.tp
    a.vocab = -(-a.vocab // multiple) * multiple
    # Megatron's own mixed precision with its attention: activations [s, b, h] from the embedding to the loss,
    # as Megatron keeps them, so the attention takes q, k and v as views (Attention.core_attention)
    a.seq_first = a.half_params and a.attention == "eager"
    a.scatter_gather = a.scatter_gather and a.tp > 1 and a.pp > 1  # only TP ranks between stages split a send
    return a


def megatron_p2p(device) -> None:
    """Give torch's pipeline schedules Megatron's point-to-point semantics.

    Megatron-LM's and Megatron-DeepSpeed's `_communicate` (megatron/core/pipeline_parallel/
    p2p_communication.py) waits for every request of a batched send/receive where it is issued and,
    with `batch_p2p_comm` and `batch_p2p_sync` (both on by default), then synchronizes the device "to
    protect against race condition when using batch_isend_irecv()". So the host never runs ahead of
    the device past a pipeline transfer: each micro-batch's host time after a transfer is exposed.
    torch's schedules fire some sends and wait for them later, without a device sync. Both schedules
    issue the same transfers in the same order; only when they block differs."""
    from torch.distributed.pipelining import schedules

    issue = schedules._batch_p2p

    def blocking(p2p_ops, desc=None):
        works = issue(p2p_ops, desc)
        for work in works:
            work.wait()
        if works and device.type == "cuda":
            torch.cuda.synchronize()
        return []  # nothing left to wait for

    schedules._batch_p2p = blocking


def main_step(params, main_params, optimizer, loss_scale: float, device, mp_group, clip_grad: float) -> None:
    """Megatron's mixed-precision step (`MixedPrecisionOptimizer.step`, megatron/optimizer/optimizer.py):
    half gradients -> fp32 main gradients; unscale them and check for inf/NaN, the flag taken as the maximum
    over the model-parallel group and read on the host; clip them by their global norm (`clip_main_grads`);
    step on the fp32 main weights and copy them back into the half-precision model."""
    grads = [p.grad for p in params if p.grad is not None]
    mains = [m for p, m in zip(params, main_params, strict=True) if p.grad is not None]
    for m, g in zip(mains, grads, strict=True):
        m.grad = g.float()
    found_inf = torch.zeros(1, device=device)
    torch._amp_foreach_non_finite_check_and_unscale_([m.grad for m in mains], found_inf,
                                                     torch.full((1,), 1.0 / loss_scale, device=device))
    if mp_group is not None:  # every stage and TP shard skips the step together
        dist.all_reduce(found_inf, op=dist.ReduceOp.MAX, group=mp_group)
    if found_inf.item() == 0:  # an overflow skips the step (and would lower the loss scale)
        if clip_grad > 0:
            clip_main_grads([m.grad for m in mains], clip_grad, mp_group)
        optimizer.step()
    with torch.no_grad():
        torch._foreach_copy_(params, main_params)
    for p in params:
        p.grad = None


def clip_main_grads(grads, max_norm: float, mp_group) -> None:
    """Megatron's `clip_grad_norm_fp32` (megatron/optimizer/clip_grads.py): the L2 norm of every fp32 main
    gradient in one multi-tensor pass, its square summed over the model-parallel group, read on the host,
    and the gradients scaled down only when the norm exceeds `max_norm`. (Megatron leaves tied and
    TP-replicated parameters out of the norm; those are the embedding on the last stage, biases and layer
    norms: a small share of the bytes, kept in here.) Under maya the norm reads as 0, so the scaling is not
    emulated; on a GPU it runs whenever the norm is above the limit."""
    total = torch.nn.utils.get_total_norm(grads, foreach=True) ** 2
    if mp_group is not None:
        dist.all_reduce(total, group=mp_group)
    coeff = max_norm / (total.item() ** 0.5 + 1e-6)
    if coeff < 1.0:
        torch._foreach_mul_(grads, coeff)


def main(argv=None):
    a = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if world > 1:
        dist.init_process_group(backend)
    assert world % (a.tp * a.pp) == 0, f"world size {world} is not a multiple of TP x PP = {a.tp * a.pp}"
    assert a.heads % a.tp == 0, f"{a.heads} heads do not split over TP={a.tp}"
    dp, coord, groups = build_groups(world, a.tp, a.pp)
    a.global_batch = a.global_batch or a.micro_batch * dp
    n_micro = a.global_batch // (a.micro_batch * dp)
    assert n_micro * a.micro_batch * dp == a.global_batch, "global batch must be micro-batch x DP x microbatches"

    # one seed per stage: parameters every TP rank holds whole (norms, position embedding) start equal and the
    # hidden dropout draws the same mask on every TP rank, as Megatron keeps them, so activations stay replicated
    torch.manual_seed(1234 + coord["pp"] * 7)
    stage = coord["pp"]
    first, last = stage == 0, stage == a.pp - 1
    with torch.device(device):  # parameters are created where they live, never on the host first
        model = GPTStage(a, stage_layers(a.layers, a.pp, stage), first, last, groups["tp"], a.tp)
    half = DTYPES[a.dtype] if a.half_params else None
    if half is not None:
        model = model.to(half)
    if dp > 1:
        model = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None,
                                        process_group=groups["dp"])
    params = list(model.parameters())
    main_params = [p.detach().float().requires_grad_() for p in params] if half is not None else params
    optimizer = torch.optim.AdamW(main_params, lr=a.lr, weight_decay=0.01,
                                  fused=True if a.adam == "fused" else None)
    amp = DTYPES[a.dtype] if a.dtype != "fp32" and half is None else None
    scaler = torch.amp.GradScaler(device.type, enabled=a.dtype == "fp16" and half is None)
    loss_scale = 2.0 ** 16 if half == torch.float16 else 1.0  # Megatron's initial dynamic loss scale
    autocast = (lambda: torch.autocast(device.type, dtype=amp)) if amp else nullcontext
    vocab_start = coord["tp"] * (a.vocab // a.tp)

    def loss_fn(logits, y):
        if a.seq_first:  # Megatron's labels follow the logits: [b, s] -> [s, b]
            y = y.transpose(0, 1).contiguous()
        if half is not None:  # Megatron computes the cross entropy of half-precision logits in fp32
            return vocab_parallel_cross_entropy(logits.float(), y, vocab_start, groups["tp"]) * loss_scale
        return scaler.scale(vocab_parallel_cross_entropy(logits, y, vocab_start, groups["tp"]))

    schedule = None
    if a.pp > 1:
        # Stage boundaries are known up front, so no shape-inference round trip is needed.
        shape = (a.micro_batch, a.seq)
        acts = activation_shape(a)
        act_dtype = half or torch.float32  # under autocast the residual stream stays fp32
        passed = (math.prod(acts) // a.tp,) if a.scatter_gather else acts  # each TP rank's piece, or all of it
        hidden = lambda: torch.zeros(*passed, dtype=act_dtype, device=device, requires_grad=True)
        x_in = torch.zeros(shape, dtype=torch.long, device=device) if first else hidden()
        logits_dtype = half or amp or torch.float32  # the LM head runs in half precision (or under autocast)
        out = torch.zeros(*acts[:2], a.vocab // a.tp, dtype=logits_dtype, device=device, requires_grad=True) if last \
            else hidden()
        pipe = PipelineStage(model, stage, a.pp, device, input_args=(x_in,), output_args=(out,), group=groups["pp"])
        # 1F1B needs at least one micro-batch per stage; with fewer, Megatron's 1F1B degenerates to
        # "all forwards, then all backwards", which is GPipe.
        if a.p2p == "megatron":
            megatron_p2p(device)
        schedule_cls = Schedule1F1B if n_micro >= a.pp else ScheduleGPipe
        schedule = schedule_cls(pipe, n_micro, loss_fn=loss_fn)

    g = torch.Generator(device="cpu").manual_seed(coord["dp"])
    model.train()
    for step in range(a.steps):
        t0 = time.perf_counter()
        batch = torch.randint(0, a.vocab, (n_micro * a.micro_batch, a.seq + 1), generator=g).to(device)
        x, y = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
        optimizer.zero_grad(set_to_none=True)
        for p in params:
            p.grad = None
        losses = []
        with autocast():
            if schedule is not None:
                if first:
                    schedule.step(x)
                elif last:  # Megatron keeps each micro-batch's loss, not its logits (torch's schedule would
                    # hold every micro-batch's logits to the end of the step and concatenate them)
                    schedule.step(target=y, losses=losses, return_outputs=False)
                else:
                    schedule.step()
            else:
                for i, (xm, ym) in enumerate(zip(x.chunk(n_micro), y.chunk(n_micro), strict=True)):
                    sync = i == n_micro - 1 or not isinstance(model, DistributedDataParallel)
                    with nullcontext() if sync else model.no_sync():
                        loss = loss_fn(model(xm), ym) / n_micro
                        loss.backward()
                        losses.append(loss.detach())
        if schedule is not None and not last and scaler.is_enabled():
            scaler.scale(torch.zeros((), device=device))  # gradients here arrive scaled by the last stage's loss
        if groups["emb"] is not None and (first or last):  # tied embedding: first and last stage agree
            wte = (model.module if isinstance(model, DistributedDataParallel) else model).wte.weight
            dist.all_reduce(wte.grad, group=groups["emb"])
        if half is not None:
            main_step(params, main_params, optimizer, loss_scale, device, groups["mp"], a.clip_grad)
        else:
            if a.clip_grad > 0:  # Megatron's FP32Optimizer clips the same way (no loss scale to undo there)
                scaler.unscale_(optimizer)
                clip_main_grads([p.grad for p in params if p.grad is not None], a.clip_grad, groups["mp"])
            scaler.step(optimizer)
            scaler.update()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if last and coord["tp"] == 0 and coord["dp"] == 0:
            scale = scaler.get_scale() if scaler.is_enabled() else loss_scale
            loss = sum(float(v) for v in losses) / max(scale, 1e-30)
            if schedule is not None:
                loss /= n_micro
            print(f"step {step} loss {loss:.4f} time {time.perf_counter() - t0:.3f}s", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
