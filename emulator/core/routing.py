"""The routing policy: how many tokens each expert gets where the emulated device cannot know.

A fake tensor has no data, so a mixture-of-experts router's choices (a `topk` over scores the
device computed) have no values, and neither do the token counts, masks and all-to-all split
sizes that follow from them. The emulator gives them values from this policy
(`emulator.capture.routing` applies it), the same on every rank, so what a rank sends is what
its peers expect to receive. `maya emulate --routing SPEC` chooses it; `emulation.json` and the
prediction name it.

    balanced       every expert gets its share (n // E each, the remainder to the first experts)
    zipf:S         expert loads follow a Zipf law with exponent S: the i-th most loaded expert gets a
                   share proportional to 1 / (i + 1)**S. The most loaded expert of the c-th router
                   call of an iteration is expert c mod E (hot experts move from layer to layer, as
                   measured routers' do, instead of piling onto one expert-parallel rank)
    trace:FILE     measured loads: a JSON list with one list of E numbers per router call of an
                   iteration (or {"layers": [...]}); call c uses entry c mod len(list), scaled to the
                   tokens routed. A real run's per-layer expert counts fit as they are.

Router call c is the c-th router the emulator sees (a router is its module, numbered in the order first
seen: a layer's router is the same call in every iteration, and again when activation checkpointing
recomputes its block in backward or another micro-batch passes it; `emulator.capture.routing`).

Counts are whole tokens (largest remainders). A router's k choices per token go to distinct
experts, so no expert gets more than one choice per token (`cap`); what a cap cuts goes to the
others by their shares.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

POLICIES = ("balanced", "zipf:S", "trace:FILE")
DEFAULT = "balanced"
# the rank summary's `placeholders` kinds that the policy decided (emulator.capture.routing): a run with
# any of them names its policy
POLICY_PLACEHOLDERS = frozenset({"topk", "bincount", "histc"})


class RoutingPolicyError(ValueError):
    """A routing policy that cannot be used (unknown name, bad exponent, unreadable trace file)."""


@dataclass(frozen=True)
class RoutingPolicy:
    spec: str  # canonical form: balanced | zipf:1.2 | trace:/absolute/path.json
    kind: str
    exponent: float = 0.0
    loads: tuple[tuple[float, ...], ...] = ()

    @classmethod
    def parse(cls, spec: str | None) -> RoutingPolicy:
        spec = (spec or DEFAULT).strip()
        kind, _, arg = spec.partition(":")
        if kind == "balanced" and not arg:
            return cls("balanced", "balanced")
        if kind == "zipf":
            try:
                s = float(arg)
            except ValueError:
                s = math.nan
            if not (s >= 0 and math.isfinite(s)):
                raise RoutingPolicyError(f"--routing {spec!r}: zipf needs a non-negative exponent, e.g. zipf:1.2")
            return cls(f"zipf:{s:g}", "zipf", exponent=s)
        if kind == "trace" and arg:
            path = Path(arg).expanduser().resolve()
            return cls(f"trace:{path}", "trace", loads=_read_loads(path))
        raise RoutingPolicyError(f"--routing {spec!r}: known policies are {', '.join(POLICIES)}")

    def weights(self, n_experts: int, call: int = 0) -> list[float]:
        """Each expert's share of the tokens at the `call`-th router call of an iteration."""
        if n_experts <= 0:
            return []
        if self.kind == "zipf":
            return [1.0 / (((e - call) % n_experts) + 1) ** self.exponent for e in range(n_experts)]
        if self.kind == "trace":
            row = self.loads[call % len(self.loads)]
            if len(row) != n_experts:
                raise RoutingPolicyError(
                    f"--routing {self.spec}: router call {call} has {n_experts} experts, the file's entry "
                    f"{call % len(self.loads)} lists {len(row)} loads")
            return list(row)
        return [1.0] * n_experts

    def counts(self, n: int, n_experts: int, call: int = 0, cap: int | None = None) -> list[int]:
        """`n` tokens over `n_experts` experts, each getting at most `cap` (whole tokens, largest remainders)."""
        weights = self.weights(n_experts, call)
        counts = [0] * n_experts
        left, open_ = n, [e for e in range(n_experts) if weights[e] > 0]
        while left > 0 and open_:
            total = sum(weights[e] for e in open_)
            share = {e: left * weights[e] / total for e in open_}
            add = {e: int(share[e]) for e in open_}
            # the remainder to the largest fractions, ties to the lower expert id (the same on every rank)
            for e in sorted(open_, key=lambda e: (add[e] - share[e], e))[:left - sum(add.values())]:
                add[e] += 1
            left = 0
            for e in open_:
                counts[e] += add[e]
                if cap is not None and counts[e] > cap:
                    left += counts[e] - cap
                    counts[e] = cap
            if cap is not None:
                open_ = [e for e in open_ if counts[e] < cap]
        return counts


def _read_loads(path: Path) -> tuple[tuple[float, ...], ...]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RoutingPolicyError(f"--routing trace:{path}: cannot read it ({e})") from None
    rows = data.get("layers") if isinstance(data, dict) else data
    ok = isinstance(rows, list) and rows and all(
        isinstance(r, list) and r and all(isinstance(x, (int, float)) and x >= 0 for x in r) and sum(r) > 0
        for r in rows)
    if not ok:
        raise RoutingPolicyError(f"--routing trace:{path}: expected a JSON list of per-router-call lists of "
                                 "non-negative expert loads (or {\"layers\": [...]})")
    return tuple(tuple(float(x) for x in r) for r in rows)
