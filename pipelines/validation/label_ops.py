"""NeuSight's per-op measurements of its single-GPU GPT-2 runs: ground truth per op family (evaluation only).

NeuSight labels each single-GPU training row (`scripts/asplos/label/<GPU>/gpt2_large-train-<seq>-<batch>`)
with an end-to-end time (the `.json` the GPU table reads) and a `.csv` of the same program's FX graph:
one row per node of the embeddings, one transformer block (`transformer.h.0`) and the head, each node
timed alone on that GPU (CUDA events, the mean of the best 5 of 25 calls; `neusight/Tracing/trace.py`)
in the forward (`fw_latency`), the backward (`bw_latency`) and the gradient accumulation of its
parameters (`acc_latency`), in ms. A block's nodes times the model's layers, plus the rest, is the
measured time of each op family: what `make validate`'s error budget sets beside maya's predicted
families for those rows. Two limits, said in the report: the times are of isolated calls, not of the
step; the loss (cross entropy on the logits) is not a graph node, so `softmax_loss` misses it.

    python -m pipelines.validation.label_ops --curate NEUSIGHT_CLONE   # write the evaluation parquet
    python -m pipelines.validation.label_ops --runs DIR                # measured vs predicted per family

The parquet (`evaluation/neusight_label_ops.parquet` of the reference folder) is evaluation data: nothing
trains or tunes on it (maya_models never reads `evaluation/`).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections import defaultdict
from pathlib import Path

import pandas as pd

from emulator.core.ops import op_family
from maya_models.reference import reference_dir
from pipelines.validation.holdout import NEUSIGHT_GPUS, load_neusight
from pipelines.validation.metrics import rel_error
from pipelines.validation.runner import stored_result

LABEL_OPS_NAME = "evaluation/neusight_label_ops.parquet"  # under the reference folder
NEUSIGHT = "sitar-lab/NeuSight@6945927d9afcca2b9daf021f8395e53edc5b4eef"
LABELS = "scripts/asplos/label"
_SINGLE = re.compile(r"^gpt2_large-train-(?P<seq>\d+)-(?P<batch>\d+)\.csv$")
LAYER = "transformer.h.0"  # the one block NeuSight times; the model repeats it `num_layer` times

# The ATen op a graph node launches, by module class (call_module) or by the called name (call_function /
# call_method). Nodes that launch no kernel (views, sizes, getattr, same-dtype casts) are left out: their
# "time" is the timer's floor.
_MODULE_OPS = {"LayerNorm": "aten::native_layer_norm", "Dropout": "aten::native_dropout",
               "Embedding": "aten::embedding", "Linear": "aten::mm"}
_CALL_OPS = {"addmm": "aten::addmm", "matmul": "aten::bmm", "truediv": "aten::div", "where": "aten::where",
             "softmax": "aten::_softmax", "tanh": "aten::tanh", "pow": "aten::pow", "mul": "aten::mul",
             "add": "aten::add", "contiguous": "aten::clone"}
_CALLED = re.compile(r"(?:built-in (?:method|function) |function )?(\w+)")


def node_op(kind: str, target: str, meta: str, shapes: list) -> str | None:
    """The ATen op of one graph node, or None where it launches no kernel (or only touches Python scalars)."""
    if not shapes or all(len(s) <= 1 for s in shapes):  # sizes and index arithmetic
        return None
    if kind == "call_module":
        classes = re.findall(r"<class '[\w.]*\.(\w+)'>", meta)
        return _MODULE_OPS.get(classes[-1]) if classes else None
    if kind in ("call_function", "call_method"):
        m = _CALLED.search(target.strip("<>"))
        return _CALL_OPS.get(m.group(1)) if m else None
    return None


def label_ops_path() -> Path:
    """The curated labels in the reference folder (`maya_models.reference.reference_dir`, $MAYA_REFERENCE)."""
    return reference_dir() / LABEL_OPS_NAME


def curate(clone: Path, out: Path | None = None) -> pd.DataFrame:
    """The label rows of every single-GPU GPT-2 run of a known GPU in a NeuSight checkout, one per kernel node."""
    out = out or label_ops_path()
    frames = []
    for gpu_dir, gpu in sorted(NEUSIGHT_GPUS.items()):
        for path in sorted((clone / LABELS / gpu_dir).glob("gpt2_large-train-*.csv")):
            if not _SINGLE.match(path.name):
                continue
            layers = json.loads(path.with_suffix(".json").read_text())["num_layer"]
            raw = pd.read_csv(path)
            rows = []
            for r in raw.itertuples(index=False):
                shapes = ast.literal_eval(r.input_shapes) if isinstance(r.input_shapes, str) else []
                op = node_op(r.op, str(r.target), str(r.meta), shapes)
                if op is None:
                    continue
                in_layer = f"'{LAYER}'" in str(r.meta)
                rows.append({"gpu": gpu, "case": f"neusight-{gpu}-{path.stem}", "node": r.Name, "op": op,
                             "family": op_family(op), "repeat": layers if in_layer else 1,
                             "input_shapes": r.input_shapes, "fw_s": r.fw_latency / 1e3, "bw_s": r.bw_latency / 1e3,
                             "acc_s": r.acc_latency / 1e3, "provenance": f"{NEUSIGHT}:{LABELS}/{gpu_dir}/{path.name}",
                             "evaluation_only": True})
            frames.append(pd.DataFrame(rows))
    if not frames:
        raise FileNotFoundError(f"no single-GPU GPT-2 label CSVs under {clone / LABELS}")
    df = pd.concat(frames, ignore_index=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out, index=False, compression="zstd")
    return df


def families_by_case(path: Path | None = None) -> dict[str, dict[str, float]]:
    """Measured seconds per iteration of each op family, per NeuSight case with per-op labels ({} without the
    file). A parameter's gradient accumulation is an elementwise add."""
    path = path or label_ops_path()
    if not path.is_file():
        return {}
    df = pd.read_parquet(path)
    passes = pd.concat([df.assign(s=(df["fw_s"] + df["bw_s"]) * df["repeat"]),
                        df.assign(s=df["acc_s"] * df["repeat"], family=op_family("aten::add"))])
    sums = passes.groupby(["case", "family"])["s"].sum()
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (case, fam), sec in sums.items():
        if sec > 0:
            out[case][fam] = float(sec)
    return dict(out)


def compare(runs: Path, path: Path | None = None) -> list[dict]:
    """Per labelled NeuSight case with a stored result under `runs`: each family's measured and predicted
    seconds."""
    measured_by_case = families_by_case(path)
    lines = []
    for case in load_neusight():
        res = stored_result(case, runs) if case.name in measured_by_case else None
        if res is None:
            continue
        measured, predicted = measured_by_case[case.name], {f: v["device_s"] for f, v in
                                                             res.device_time_by_family.items()}
        for fam in sorted(set(measured) | set(predicted), key=lambda f: -measured.get(f, 0.0)):
            m, p = measured.get(fam), predicted.get(fam)
            lines.append({"case": case.name, "family": fam, "measured_s": m, "predicted_s": p,
                          "error": rel_error(p, m) if m and p is not None else None})
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--curate", type=Path, metavar="NEUSIGHT_CLONE", help=f"a checkout of {NEUSIGHT}")
    g.add_argument("--runs", type=Path, help="a validation run's `runs/` folder")
    a = p.parse_args(argv)
    if a.curate:
        df = curate(a.curate)
        print(f"{len(df)} kernel nodes of {df['case'].nunique()} runs -> {label_ops_path()}")
        return
    print(f"{'case':48s} {'family':13s} {'measured':>10s} {'predicted':>10s} {'error':>8s}")
    for ln in compare(a.runs):
        m = f"{ln['measured_s'] * 1e3:.2f}" if ln["measured_s"] else "-"
        pr = f"{ln['predicted_s'] * 1e3:.2f}" if ln["predicted_s"] is not None else "-"
        e = f"{ln['error'] * 100:+.1f}%" if ln["error"] is not None else "-"
        print(f"{ln['case']:48s} {ln['family']:13s} {m:>10s} {pr:>10s} {e:>8s}")


if __name__ == "__main__":
    main()
