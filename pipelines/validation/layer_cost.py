"""What one more transformer layer costs per micro-batch in vTrain's measured single-node runs (evaluation
data, read only to explain errors, never to fit).

`python -m pipelines.validation.layer_cost`: vTrain measured the same layouts (GPUs, hidden, TP, PP, DP,
micro-batch, global batch) at several depths, so the difference between two depths divided by the layers
added and the micro-batches an iteration runs is the measured time of one layer for one micro-batch on
one rank. Printed per hidden size, TP degree and micro-batch (layouts without pipeline parallelism, whose
iteration is one rank's sequence of micro-batches): the median over every pair of depths, and the range.

`--predict HIDDEN:TP:MICRO,...` also predicts, for each of those, the cheapest measured layout at its
shallowest and deepest measured depth (`maya emulate` + `maya simulate`, as `make validate` runs a row; a
finished run in `--runs` is reused) and prints maya's per-layer cost the same way, split into the
prediction's host time, device compute and communication: where a prediction's error lives per layer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import NamedTuple

from emulator.core.settings import warehouse_root
from pipelines.validation.holdout import Case, HoldoutMissingError, load_vtrain


class Layout(NamedTuple):
    gpus: int
    hidden: int
    tp: int
    dp: int
    micro_batch: int
    global_batch: int


def _by_layout(cases: list[Case]) -> dict[Layout, dict[int, Case]]:
    """Layout -> depth -> case, without pipeline parallelism."""
    out: dict[Layout, dict[int, Case]] = defaultdict(dict)
    for c in cases:
        p = c.parallel
        if p["pp"] == 1:
            layout = Layout(c.world_size, c.model["hidden"], p["tp"], p["dp"], p["micro_batch"], p["global_batch"])
            out[layout].setdefault(c.model["layers"], c)  # the first row of a repeated layout
    return out


def _per_layer_ms(lo: Case, hi: Case, lo_s: float, hi_s: float) -> float:
    return (hi_s - lo_s) * 1e3 / ((hi.model["layers"] - lo.model["layers"]) * lo.micro_batches)


def layer_costs(cases: list[Case]) -> dict[tuple[int, int, int], list[float]]:
    """(hidden, tp, micro_batch) -> per-layer, per-micro-batch time in ms for every pair of measured depths."""
    out: dict[tuple[int, int, int], list[float]] = defaultdict(list)
    for layout, depths in _by_layout(cases).items():
        for lo, hi in combinations((depths[d] for d in sorted(depths)), 2):
            kind = (layout.hidden, layout.tp, layout.micro_batch)
            out[kind].append(_per_layer_ms(lo, hi, lo.measured_s, hi.measured_s))
    return dict(out)


def cheapest_pair(cases: list[Case], hidden: int, tp: int, micro: int) -> tuple[Case, Case] | None:
    """The measured layout of that kind with the smallest global batch (then fewest GPUs) at two or more depths:
    its shallowest and deepest rows."""
    layouts = {k: d for k, d in _by_layout(cases).items()
               if (k.hidden, k.tp, k.micro_batch) == (hidden, tp, micro) and len(d) > 1}
    if not layouts:
        return None
    depths = layouts[min(layouts, key=lambda k: (k.global_batch, k.gpus))]
    return depths[min(depths)], depths[max(depths)]


def predicted_layer_cost(lo: Case, hi: Case, runs: Path) -> dict[str, float]:
    """maya's per-layer, per-micro-batch cost in ms between two depths of one layout: the iteration and its
    host, compute and communication parts."""
    from pipelines.validation.runner import run_gpu_case

    r_lo, r_hi = run_gpu_case(lo, runs), run_gpu_case(hi, runs)
    for r, c in ((r_lo, lo), (r_hi, hi)):
        if r.error or r.predicted_s is None:
            raise RuntimeError(f"{c.name} ({c.note}): {r.error or 'no prediction'}")
    out = {"iteration": _per_layer_ms(lo, hi, r_lo.predicted_s, r_hi.predicted_s)}
    for part in ("host", "compute", "communication"):
        out[part] = _per_layer_ms(lo, hi, r_lo.breakdown.get(part) or 0.0, r_hi.breakdown.get(part) or 0.0)
    return out


def _keys(text: str) -> list[tuple[int, int, int]]:
    try:
        keys = [tuple(int(v) for v in item.split(":")) for item in text.split(",") if item]
    except ValueError:
        keys = []
    if not keys or any(len(k) != 3 for k in keys):
        raise argparse.ArgumentTypeError(f"expected HIDDEN:TP:MICRO[,...], e.g. 2048:1:8,1024:8:1; got {text!r}")
    return keys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.validation.layer_cost", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--predict", type=_keys, default=[], metavar="HIDDEN:TP:MICRO,...",
                    help="also predict these kinds of layout at two depths (minutes each)")
    ap.add_argument("--runs", type=Path, default=None,
                    help="where the predictions run and are kept (default <warehouse>/validation/layer_cost)")
    a = ap.parse_args(argv)
    try:
        cases = load_vtrain("single")
    except HoldoutMissingError as e:
        print(f"vTrain's single-node table is not here: {e}", file=sys.stderr)
        return 1
    costs = layer_costs(cases)
    print("measured (vTrain, single node): ms per layer per micro-batch")
    print("hidden  TP  micro-batch  pairs  median  (range)")
    for (hidden, tp, micro), v in sorted(costs.items()):
        print(f"{hidden:6d} {tp:3d} {micro:12d} {len(v):6d}  {statistics.median(v):6.2f}  ({min(v):.2f}-{max(v):.2f})")
    if not a.predict:
        return 0
    from pipelines.validation.runner import ensure_predictors

    runs = a.runs or warehouse_root() / "validation" / "layer_cost"
    runs.mkdir(parents=True, exist_ok=True)
    problem = ensure_predictors("a100-80gb", runs)
    if problem:
        print(problem, file=sys.stderr)
    print("\npredicted by maya against measured: ms per layer per micro-batch, between the two depths named")
    print("hidden  TP  micro-batch  layout                 measured  predicted  (host  compute  communication)")
    for hidden, tp, micro in a.predict:
        pair = cheapest_pair(cases, hidden, tp, micro)
        if pair is None:
            print(f"{hidden:6d} {tp:3d} {micro:12d}  no layout of this kind was measured at two depths")
            continue
        lo, hi = pair
        try:
            p = predicted_layer_cost(lo, hi, runs)
        except RuntimeError as e:
            print(f"{hidden:6d} {tp:3d} {micro:12d}  no prediction: {e}", flush=True)
            continue
        measured = _per_layer_ms(lo, hi, lo.measured_s, hi.measured_s)
        layout = f"{lo.world_size} GPUs gb{lo.parallel['global_batch']} L{lo.model['layers']}/L{hi.model['layers']}"
        print(f"{hidden:6d} {tp:3d} {micro:12d}  {layout:22s} {measured:8.2f}  {p['iteration']:9.2f}  "
              f"({p['host']:.2f}  {p['compute']:.2f}  {p['communication']:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
