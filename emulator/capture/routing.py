"""Data-dependent sizes and values on the emulated device: known values first, then the routing policy.

Why: a mixture-of-experts router counts its tokens per expert (`torch.bincount`), reads the counts
back (`.tolist()`) and uses them as all-to-all split sizes and expert batch sizes. A fake tensor
has no data: bincount had no fake rule (listed unsupported, and its best-guess shape broke the
next view), and a count read back was the placeholder 0, so splits summed to nothing. What a rank
sends must also be what its peers expect to receive, so sizes *and* values have to come from one
rule that is the same on every rank.

The rule, in order:
1. Inputs whose values are known (data that came from the host, `emulator.capture.shadows`):
   the exact output size (bincount, nonzero, unique, repeat_interleave); the shadow replay then
   computes the output's values. (masked_select and boolean-mask indexing, which decomposes to
   nonzero, keep the upper bound unless the mask's values are known.)
2. Otherwise the routing policy (`emulator.core.routing`, `maya emulate --routing`, default
   `balanced`: every expert gets its share). At the source: the indices of a `topk` over
   device-computed scores (a router's choice) get values: router call c (the c-th router module
   first seen, so a block recomputed by activation checkpointing routes as its forward did; see
   `_router_call`) over T tokens with k choices among E experts hands expert e the policy's count of the T*k
   choices (at most one per token), laid out so that each token's k choices are distinct
   experts. Counts, masks, sorts and splits computed from them are then exact consequences of
   the policy (shadows keep at most MAX_ELEMENTS values per storage; a larger router output has
   none, and the rules below apply). `bincount(ids, minlength=E)` of unknown ids has E bins
   (without `minlength`, one bin per id) holding the policy's counts of the ids (of the latest
   router call); those counts are the output's values (host-known from then on, so
   `.tolist()` reads them and ops on them replay). `histc(ids, bins=E, min=0, max=E)` (one bin
   per id, torchtitan's count) likewise. All count under `placeholders` ("topk", "bincount",
   "histc"). A router call with more choices than a shadow holds keeps no index values but still
   counts as a call, so the counts made from it follow the policy for that call. `nonzero`,
   `masked_select` and `unique` keep their upper bound (every element selected,
   `emulator.device.fake_mode`), and `repeat_interleave` with tensor repeats of unknown values has
   no rule (unsupported).
3. All-to-alls (`c10d::alltoall_base_`, `_c10d_functional::all_to_all_single`) of known values
   assume that every rank holds what this rank holds (the policy is identical on every rank):
   block j of an all-to-all's output is this rank's input block for itself, so the counts each
   rank receives are the counts its peers route to it, and the split
   sizes agree across ranks. (A broadcast takes the root's real values, `Recorder._share_broadcast`.)

"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._subclasses.fake_tensor import DynamicOutputShapeException, FakeTensor, unset_fake_temporarily

from emulator.capture.shadows import MAX_ELEMENTS as MAX_CHOICES  # more choices than a shadow holds: no values
from emulator.core.routing import RoutingPolicy

aten = torch.ops.aten

# set by `install`: the policy, the recorder's shadow lookup and its bookkeeping of policy / known-value decisions
_policy = RoutingPolicy.parse(None)
_value_of: Callable[[FakeTensor], torch.Tensor | None] | None = None
_on_policy: Callable[[str], None] | None = None
_on_known: Callable[[], None] | None = None
_iteration: Callable[[], int] = lambda: 0
_module: Callable[[], str | None] = lambda: None
_calls = [-1, 0]  # [iteration, router calls in it so far] (routers outside any module)
_routers: dict[str, int] = {}  # router module -> its index (first seen first)
_latest = [0]  # the index of the latest router call


def install(policy: RoutingPolicy, value_of, on_policy, on_known, iteration, module=lambda: None) -> None:
    """Register the fake rules and route their questions to the recorder (`value_of`: a fake tensor's
    known values or None; `on_policy(kind)`: an output came from the policy; `on_known()`: from known
    values; both make the call uncacheable; `iteration()`: the recorder's iteration, which numbers
    router calls outside modules from 0 again; `module()`: the module running now, which names a router)."""
    global _policy, _value_of, _on_policy, _on_known, _iteration, _module
    from torch._subclasses import fake_impls

    _policy, _value_of, _on_policy, _on_known, _iteration, _module = (policy, value_of, on_policy, on_known,
                                                                      iteration, module)
    _routers.clear()
    table = fake_impls.op_implementations_dict
    table[aten.bincount.default] = bincount_rule
    table[aten.repeat_interleave.Tensor] = repeat_interleave_rule
    for op, exact in ((aten.nonzero.default, _nonzero_exact), (aten._unique2.default, _unique_exact)):
        current = table[op]
        if not getattr(current, "_maya_known_first", False):  # fake_mode's upper bound stays the fallback
            table[op] = _known_first(current, exact)
            table[op]._maya_known_first = True


def _router_call(advance: bool) -> int:
    """The index of a router call: of the router calling now (`advance`, its top-k) or of the latest.

    A router is its module: the c-th router module first seen is call c, in every iteration, and a router
    that runs again (its block recomputed in backward by activation checkpointing, another micro-batch)
    gets the same loads again, as a GPU's router reproduces its choices. Outside any module: the c-th
    router call of the iteration."""
    if not advance:
        return _latest[0]
    name = _module()
    if name:
        index = _routers.setdefault(name, len(_routers))
    else:
        it = _iteration()
        if _calls[0] != it:
            _calls[:] = [it, 0]
        _calls[1] += 1
        index = _calls[1] - 1
    _latest[0] = index
    return index


def known(t) -> torch.Tensor | None:
    if _value_of is None or not isinstance(t, FakeTensor):
        return None
    values = _value_of(t)
    if values is not None and _on_known is not None:
        _on_known()
    return values


# ---- fake rules (FakeTensorMode's op table; see emulator.device.fake_mode._install_placeholders)

def bincount_rule(fake_mode, func, x, weights=None, minlength=0):
    values = known(x)
    if values is not None:
        with unset_fake_temporarily():  # the rule runs with the fake mode on; values are real
            bins = max(int(minlength), int(values.max()) + 1 if values.numel() else 0)
    else:
        if _on_policy is not None:
            _on_policy("bincount")
        bins = int(minlength) if minlength else x.numel()
    dtype = torch.int64 if weights is None else \
        (weights.dtype if weights.dtype in (torch.float32, torch.float64) else torch.float64)
    with fake_mode:
        return torch.empty((bins,), dtype=dtype, device=x.device)


def _known_first(upper_bound, exact):
    """A dynamic-size rule that is exact when the input's values are known, else `upper_bound`'s."""
    def rule(fake_mode, func, arg, *rest, **kwargs):
        values = known(arg)
        if values is None:
            return upper_bound(fake_mode, func, arg, *rest, **kwargs)
        with unset_fake_temporarily():  # the rule runs with the fake mode on; values are real
            return exact(fake_mode, values, arg, *rest, **kwargs)
    return rule


def _nonzero_exact(fake_mode, values, arg, *rest, **kwargs):
    n = int(values.count_nonzero())  # outside the fake mode: values are real
    with fake_mode:
        return torch.empty((n, arg.dim()), dtype=torch.int64, device=arg.device)


def _unique_exact(fake_mode, values, arg, sorted=True, return_inverse=False, return_counts=False, *rest):
    n = int(torch.unique(values).numel())
    with fake_mode:
        return (torch.empty((n,), dtype=arg.dtype, device=arg.device),
                torch.empty(arg.shape if return_inverse else (0,), dtype=torch.int64, device=arg.device),
                torch.empty((n if return_counts else 0,), dtype=torch.int64, device=arg.device))


def repeat_interleave_rule(fake_mode, func, repeats, output_size=None):
    if output_size is None:
        values = known(repeats)
        if values is None:
            raise DynamicOutputShapeException(func)
        with unset_fake_temporarily():
            output_size = int(values.sum())
    with fake_mode:
        return torch.empty((int(output_size),), dtype=repeats.dtype, device=repeats.device)


# ---- values the policy decides, after the call (emulator.capture.recorder)

def bincount_values(shadows, args, kwargs, out) -> None:
    """A bincount the policy sized (no known ids, no weights) holds the policy's counts."""
    weights = args[1] if len(args) > 1 else kwargs.get("weights")
    if isinstance(out, FakeTensor) and weights is None and shadows.value(out) is None:
        counts = _policy.counts(args[0].numel(), out.numel(), _router_call(advance=False))
        shadows.keep(out, torch.tensor(counts, dtype=torch.int64))


def histc_values(shadows, args, kwargs, out) -> None:
    """A histogram of unknown expert ids with one bin per id (`torch.histc(ids, bins=E, min=0, max=E)`,
    torchtitan's router count) holds the policy's counts, as `bincount(ids, minlength=E)` does. Other
    ranges (bins that are not whole ids, or min == max: the data's own range) stay unknown."""
    bound = dict(zip(("input", "bins", "min", "max"), args, strict=False)) | kwargs
    ids, bins = bound["input"], int(bound.get("bins", 100))
    lo, hi = float(bound.get("min", 0)), float(bound.get("max", 0))
    if not isinstance(out, FakeTensor) or shadows.value(out) is not None:
        return
    values = shadows.value(ids)
    if values is not None:
        # known ids (a policy-routed top-k) that the replay could not count: the CPU has no histc for
        # integers (the GPU has); the same histogram over them as floating point
        if lo != hi and not values.is_floating_point():
            shadows.keep(out, torch.histc(values.double(), bins=bins, min=lo, max=hi).to(out.dtype))
        return
    if lo != 0 or hi != bins:
        return
    counts = _policy.counts(ids.numel(), bins, _router_call(advance=False))
    shadows.keep(out, torch.tensor(counts, dtype=out.dtype))
    if _on_policy is not None:
        _on_policy("histc")


def topk_values(shadows, args, kwargs, out) -> None:
    """The indices of a top-k over device-computed scores (a router's choice of experts) follow the
    policy: expert e gets the policy's count of the T*k choices, at most one per token; the choices
    are laid out expert by expert down the columns (slot i is token i mod T's choice i // T), so
    each token's k choices are distinct experts and everything computed from the indices (counts,
    masks, sorts) replays exactly."""
    if not isinstance(out, tuple) or len(out) != 2 or not isinstance(out[1], FakeTensor):
        return
    scores, indices = args[0], out[1]
    dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
    if shadows.value(scores) is not None or shadows.value(indices) is not None or indices.dim() == 0:
        return  # known scores replay exactly
    n_experts, k = scores.shape[dim], indices.shape[dim]
    moved = indices.movedim(dim, -1)
    rows = moved.numel() // max(k, 1)
    call = _router_call(advance=True)  # a router call even when its choices are too many to hold
    if rows * k > MAX_CHOICES:
        return  # the counts made from them (bincount, histc) still follow the policy, for this call
    counts = _policy.counts(rows * k, n_experts, call, cap=rows)
    experts = torch.repeat_interleave(torch.arange(n_experts), torch.tensor(counts, dtype=torch.int64))
    choice = experts.view(k, rows).t()
    shadows.keep(indices, choice.reshape(moved.shape).movedim(-1, dim).contiguous())
    if _on_policy is not None:
        _on_policy("topk")


def all_to_all_values(shadows, bound: dict, ranks: list[int], rank: int) -> None:
    """`c10d::alltoall_base_` of known values (see the module docstring, rule 3)."""
    _symmetric_all_to_all(shadows, bound.get("input"), bound.get("output"), bound.get("input_split_sizes") or [],
                          bound.get("output_split_sizes") or [], ranks, rank)


def functional_all_to_all_values(shadows, bound: dict, out, ranks: list[int], rank: int) -> None:
    """`_c10d_functional::all_to_all_single` of known values (torchtitan exchanges its token counts so):
    rule 3, as for `c10d::alltoall_base_`. The shadow replay has already run the op on the CPU against
    the fake group, which moves no data (each rank got its own first block back): those values go."""
    if isinstance(out, FakeTensor):
        shadows.forget(out)
    _symmetric_all_to_all(shadows, bound.get("input"), out, bound.get("input_split_sizes") or [],
                          bound.get("output_split_sizes") or [], ranks, rank)


def _symmetric_all_to_all(shadows, inp, out, in_splits, out_splits, ranks: list[int], rank: int) -> None:
    """Output block j = this rank's input block for itself (every rank routes as this one does)."""
    values = shadows.value(inp) if isinstance(inp, FakeTensor) else None
    if values is None or not isinstance(out, FakeTensor) or rank not in ranks or shadows.value(out) is not None:
        return
    world, me = len(ranks), ranks.index(rank)
    in_splits = list(in_splits) or [inp.shape[0] // world] * world
    out_splits = list(out_splits) or [out.shape[0] // world] * world
    if any(s != in_splits[me] for s in out_splits) or sum(in_splits) != inp.shape[0]:
        return  # the splits this rank expects do not fit the symmetric assumption: leave it unknown
    start = sum(in_splits[:me])
    mine = values[start:start + in_splits[me]]
    shadows.keep(out, torch.cat([mine] * world) if world else mine)
