"""Megatron-style tensor parallelism written with plain torch.distributed.

The four building blocks of Megatron-LM's TP (Shoeybi et al., 2019), each a few lines:
- `copy_to_tp` / `reduce_from_tp`: the f and g operators (identity one way, all-reduce the other);
- `ColumnParallelLinear`: the weight's output dimension is split; no communication in forward;
- `RowParallelLinear`: the input dimension is split; the partial outputs are all-reduced;
- `VocabParallelEmbedding` and `vocab_parallel_cross_entropy`: the vocabulary is split so the
  embedding table and the logits never exist whole on one GPU.
With a TP group of size 1 everything degrades to the ordinary single-device layer.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def _size(group) -> int:
    return dist.get_world_size(group) if group is not None else 1


def _rank(group) -> int:
    return dist.get_rank(group) if group is not None else 0


class _CopyToTP(torch.autograd.Function):
    """f: identity forward, all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _CopyToTP.apply(x, group) if _size(group) > 1 else x


def reduce_from_tp(x: torch.Tensor, group) -> torch.Tensor:
    return _ReduceFromTP.apply(x, group) if _size(group) > 1 else x


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b with W split along its output rows; each rank produces out/tp features."""

    def __init__(self, d_in: int, d_out: int, group, bias: bool = True):
        super().__init__()
        tp = _size(group)
        assert d_out % tp == 0, f"{d_out} output features do not split over TP={tp}"
        self.group = group
        self.weight = nn.Parameter(torch.empty(d_out // tp, d_in))
        self.bias = nn.Parameter(torch.zeros(d_out // tp)) if bias else None
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return F.linear(copy_to_tp(x, self.group), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = x W^T + b with W split along its input columns; partial sums are all-reduced."""

    def __init__(self, d_in: int, d_out: int, group, bias: bool = True, std: float = 0.02):
        super().__init__()
        tp = _size(group)
        assert d_in % tp == 0, f"{d_in} input features do not split over TP={tp}"
        self.group = group
        self.weight = nn.Parameter(torch.empty(d_out, d_in // tp))
        self.bias = nn.Parameter(torch.zeros(d_out)) if bias else None
        nn.init.normal_(self.weight, std=std)

    def forward(self, x):
        y = reduce_from_tp(F.linear(x, self.weight), self.group)
        return y + self.bias if self.bias is not None else y


class VocabParallelEmbedding(nn.Module):
    """Token embedding whose table is split by vocabulary range across the TP group."""

    def __init__(self, vocab: int, dim: int, group):
        super().__init__()
        tp = _size(group)
        self.group = group
        self.per_rank = math.ceil(vocab / tp)
        self.start = _rank(group) * self.per_rank
        self.weight = nn.Parameter(torch.empty(self.per_rank, dim))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, ids):
        if _size(self.group) == 1:
            return F.embedding(ids, self.weight)
        local = ids - self.start
        outside = (local < 0) | (local >= self.per_rank)
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
        out = out.masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(out, self.group)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Cross-entropy over logits split by vocabulary: three small all-reduces instead of a gather."""

    @staticmethod
    def forward(ctx, logits, target, start, group):
        logits = logits.float()
        vmax = logits.max(dim=-1).values
        dist.all_reduce(vmax, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - vmax.unsqueeze(-1)
        local = target - start
        outside = (local < 0) | (local >= logits.shape[-1])
        local = local.masked_fill(outside, 0)
        picked = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(picked, group=group)
        exp = shifted.exp()
        total = exp.sum(dim=-1)
        dist.all_reduce(total, group=group)
        loss = total.log() - picked
        ctx.save_for_backward(exp.div_(total.unsqueeze(-1)), local, outside)
        return loss.mean()

    @staticmethod
    def backward(ctx, grad):
        softmax, local, outside = ctx.saved_tensors
        one_hot = F.one_hot(local, softmax.shape[-1]).to(softmax.dtype)
        one_hot = one_hot.masked_fill(outside.unsqueeze(-1), 0.0)
        n = local.numel()
        return (softmax - one_hot) * (grad / n), None, None, None


def vocab_parallel_cross_entropy(logits, target, start: int, group) -> torch.Tensor:
    """Mean token loss; `logits` hold this rank's vocabulary slice starting at `start`."""
    if _size(group) == 1:
        return F.cross_entropy(logits.flatten(0, -2).float(), target.flatten())
    return _VocabParallelCrossEntropy.apply(logits, target, start, group)
