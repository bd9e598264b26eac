"""Host cost of one call, natively and as maya records it: does emulation add host time to a kind of call?

A program whose gaps grow under emulation is predicted host-bound when it is not. This program makes
`--calls` calls per step of one kind on tiny tensors, so a call costs its host work and next to no
compute:
- `eager`: a bias + dropout + add, three ops;
- `compiled`: the same function under `torch.compile` (megatron-core's jit fuser does this);
- `plain`: one matmul;
- `function`: the matmul inside a custom `torch.autograd.Function` (megatron-core's linear layers);
- `modules`: the matmul inside four nested `nn.Module` calls (megatron-core wraps each op in several:
  a layer, its attention or MLP, a parallel linear, identity ops for absent parts).

Natively it prints the wall time per call (`python -m emulator.bench.host_call_cost --mode compiled`);
under maya (`maya emulate --gpu a100-80gb --iterations 5 --out OUT -m emulator.bench.host_call_cost
--mode compiled`), each step is an iteration and its recorded host gaps summed over the calls are the
emulated cost per call. The two are compared in the README's search section.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.matmul(x, w.t())

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g.matmul(w), g.t().matmul(x)


class _Nest(torch.nn.Module):
    """`depth` nested module calls around one matmul."""

    def __init__(self, w: torch.Tensor, depth: int):
        super().__init__()
        self.w, self.inner = w, _Nest(w, depth - 1) if depth > 1 else None

    def forward(self, y):
        return self.inner(y) if self.inner is not None else torch.matmul(y, self.w.t())


def _bias_dropout_add(x, bias, residual, prob: float, training: bool):
    return residual + F.dropout(x + bias, p=prob, training=training)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("eager", "compiled", "plain", "function", "modules"), default="eager")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--steps", type=int, default=6)
    a = p.parse_args(argv)
    x, r = torch.randn(4, 8, device=a.device), torch.randn(4, 8, device=a.device)
    b, w = torch.randn(8, device=a.device), torch.randn(8, 8, device=a.device, requires_grad=True)
    call = {"eager": lambda y: _bias_dropout_add(y, b, r, 0.1, True),
            "compiled": lambda y, f=torch.compile(_bias_dropout_add): f(y, b, r, 0.1, True),
            "plain": lambda y: torch.matmul(y, w.t()),
            "function": lambda y: _Linear.apply(y, w),
            "modules": _Nest(w, 4)}[a.mode]
    try:
        from emulator import mark_iteration  # under maya: each step is an iteration
    except ImportError:
        mark_iteration = None
    for step in range(a.steps):
        t0 = time.perf_counter()
        y = x
        for _ in range(a.calls):
            y = call(y)
        dt = time.perf_counter() - t0
        if mark_iteration is not None:
            mark_iteration()
        print(f"step {step} {a.mode}: {dt / a.calls * 1e6:.1f} us per call", flush=True)


if __name__ == "__main__":
    main()
