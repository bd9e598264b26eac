"""Real values for small device tensors whose data came from the host (masks, labels, token ids).

Why: a fake tensor has no data, so `.item()`, `bool(t)` and `t.all()` read placeholders (0 /
False). Library code branches on such reads: Hugging Face skips the attention mask when
`padding_mask.all()` is True, which is what lets SDPA pick the flash kernel on a GPU; with the
placeholder it builds a mask and SDPA takes the memory-efficient kernel. Yet the data of those
tensors was on the host before the program copied it over. `Shadows` keeps that copy, per fake
*storage* (so views and in-place updates stay consistent), and computes on the CPU every op whose
device inputs all have values, so a later read of a derived value is the real one. Constants made
on the device are host data too: factory ops (`torch.full`, `ones`, `zeros`, `arange`, their
`_like` forms) and whole-tensor fills (`fill_`, `zero_`) give values, so GradScaler's scale
(`torch.full((), 65536.0)`) reads back as 65536.0.

One documented assumption (counted under the rank's `placeholders` as `amp_finite_grads`):
GradScaler's check for inf/NaN gradients finds none, as on a GPU run that trains normally
(emulated gradients have no values to check), so `found_inf` stays 0 and the scale evolves as
it would there (constant, doubling every `growth_interval` steps).

Limits (each falls back to the placeholder): storages over MAX_ELEMENTS elements get no values;
random ops are not replayed (that would draw from the program's CPU generator); an op that writes
a storage from inputs without values drops that storage's values; ops that fail on the CPU are
skipped; values reinterpreted under another dtype are not derived.
"""

from __future__ import annotations

import weakref

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_flatten, tree_map

from emulator.capture.fastpath import storage_key

MAX_ELEMENTS = 1 << 16  # masks and token ids of a batch fit; activations do not (and cost CPU time)
_CPU = torch.device("cpu")
aten = torch.ops.aten
_FILL_LIKE = (aten.zeros_like.default, aten.ones_like.default, aten.full_like.default)
_FILLS = (aten.fill_.Scalar, aten.zero_.default)  # overwrite their target with a constant
# ops whose outputs' values need no input values: derived even before any host data reached the device
VALUE_SOURCES = frozenset(id(f) for f in (
    aten.full.default, aten.ones.default, aten.zeros.default, aten.scalar_tensor.default, aten.arange.default,
    aten.arange.start, aten.arange.start_step, *_FILL_LIKE, *_FILLS))
_AMP_CHECK = aten._amp_foreach_non_finite_check_and_unscale_.default


class Shadows:
    """Fake storage -> a flat CPU tensor with its values."""

    def __init__(self, note_placeholder=lambda kind: None):
        self.storages: dict[int, torch.Tensor] = {}
        # storage -> a function giving its values when first read (a broadcast's, from the root rank)
        self.pending: dict[int, object] = {}
        self.replayed = 0  # ops computed on values (summary figure)
        self.note_placeholder = note_placeholder  # counts the documented assumption (the module docstring)

    def value(self, t: FakeTensor, resolve: bool = True) -> torch.Tensor | None:
        """`t`'s values as a CPU tensor (a view of its storage's values), or None. `resolve`: fetch
        values that are pending (`expect`); replays pass False, only reads wait for another rank."""
        key = t.untyped_storage()._cdata
        if resolve and key in self.pending:
            self.storages[key].copy_(self.pending.pop(key)())
        elif key in self.pending:
            return None
        base = self.storages.get(key)
        if base is None or base.dtype != t.dtype:
            return None
        return base.as_strided(t.shape, t.stride(), t.storage_offset())

    def expect(self, t: FakeTensor, fetch) -> None:
        """`t`'s storage (whose values are kept) will hold `fetch()` (a flat tensor) from now on."""
        key = t.untyped_storage()._cdata
        if key in self.storages:
            self.pending[key] = fetch
            weakref.finalize(t.untyped_storage(), self.pending.pop, key, None)

    def forget(self, t: FakeTensor) -> None:
        """`t`'s storage was written by something that has no CPU replay (a Triton kernel): no values."""
        key = t.untyped_storage()._cdata
        self.storages.pop(key, None)
        self.pending.pop(key, None)

    def after(self, func, args: tuple, kwargs: dict, out, inputs: list | None = None, resolve: bool = False) -> None:
        """Derive the values of `out` from the call's inputs (or drop what the call overwrote).

        `inputs`: the call's fake tensors when the caller has them already (saves a flatten).
        `resolve`: fetch pending values (a copy to the host: the program is about to read them)."""
        if inputs is None:
            inputs = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, FakeTensor)]
        if func in _FILL_LIKE:  # the output's values do not depend on the input's: any of its shape will do
            if self._replayable(func, out):
                self._replay(func, args, kwargs, out, {id(x): torch.empty(x.shape, dtype=x.dtype) for x in inputs})
            return
        if func in _FILLS and isinstance(args[0], FakeTensor):
            self._whole_storage_target(args[0])  # a buffer for the replay to fill: the target has values after
        if inputs:
            storages = self.storages
            for x in inputs:
                if storage_key(x) in storages:
                    break
            else:
                return  # the usual case: nothing here came from the host, nothing to derive or drop
        elif not self._real_tensor_in(args, kwargs) and "empty" in func.__name__:
            return  # uninitialised memory has no values to know
        if func is _AMP_CHECK:
            self.note_placeholder("amp_finite_grads")  # found_inf keeps its 0: no inf/NaN gradients
            return
        if func is aten.copy_.default and isinstance(args[0], FakeTensor):
            self._whole_storage_target(args[0])  # copy_ overwrites its target: it gets values if its source has
        values = {id(x): self.value(x, resolve=resolve) for x in inputs}
        if all(v is not None for v in values.values()) and self._replayable(func, out):
            self._replay(func, args, kwargs, out, values)
        elif func._schema.is_mutable:
            for i, a in enumerate(func._schema.arguments):
                if a.alias_info is not None and a.alias_info.is_write:
                    x = args[i] if i < len(args) else kwargs.get(a.name)
                    for t in tree_flatten(x)[0]:
                        if isinstance(t, FakeTensor):
                            self.storages.pop(t.untyped_storage()._cdata, None)
                            self.pending.pop(t.untyped_storage()._cdata, None)

    @staticmethod
    def _real_tensor_in(args, kwargs) -> bool:
        return any(isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor)
                   for x in tree_flatten((args, kwargs))[0])

    @staticmethod
    def _replayable(func, out) -> bool:
        if torch.Tag.nondeterministic_seeded in func.tags:
            return False
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, FakeTensor)]
        return bool(outs) and all(o.numel() <= MAX_ELEMENTS for o in outs)

    def _replay(self, func, args, kwargs, out, values: dict) -> None:
        def on_cpu(x):
            if isinstance(x, FakeTensor):
                return values[id(x)]
            if isinstance(x, torch.device) and x.type != "cpu":
                return _CPU
            return x

        try:
            result = func(*tree_map(on_cpu, args), **tree_map(on_cpu, kwargs))
        except Exception:  # noqa: BLE001 - an op the CPU refuses: no values, the placeholder stays
            return
        self.replayed += 1
        fakes, _ = tree_flatten(out)
        reals, _ = tree_flatten(result)
        if len(fakes) != len(reals):
            return
        for fake, real in zip(fakes, reals, strict=True):
            if isinstance(fake, FakeTensor) and isinstance(real, torch.Tensor):
                self.keep(fake, real)

    def _whole_storage_target(self, dst: FakeTensor) -> None:
        """Give a copy_ target that spans its whole (small) storage a buffer for the replay to fill."""
        storage = dst.untyped_storage()
        if storage._cdata in self.storages or not dst.is_contiguous() or dst.storage_offset() != 0 \
                or dst.numel() * dst.element_size() != storage.nbytes() or dst.numel() > MAX_ELEMENTS:
            return
        self.storages[storage._cdata] = torch.empty(dst.numel(), dtype=dst.dtype)
        weakref.finalize(storage, self.storages.pop, storage._cdata, None)

    def keep(self, fake: FakeTensor, real: torch.Tensor) -> None:
        """Give `fake` the values `real` (a CPU tensor of its shape), if its storage has none yet."""
        storage = fake.untyped_storage()
        key = storage._cdata
        if key in self.storages:  # a view or an in-place result: the replay already wrote its values
            return
        n = storage.nbytes() // max(fake.element_size(), 1)
        if n > MAX_ELEMENTS or real.shape != fake.shape:
            return
        base = torch.empty(n, dtype=fake.dtype)
        base.as_strided(fake.shape, fake.stride(), fake.storage_offset()).copy_(real)
        self.storages[key] = base
        weakref.finalize(storage, self.storages.pop, key, None)  # the key may be reused once it dies
