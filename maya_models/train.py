"""Train, evaluate, register and publish predictors for one GPU.

    python -m maya_models.train --gpu h100 [--cross-gpu] [--kind kernels|collectives] [--no-publish]

The functions the Dagster assets call (each returns a metadata dict):
    train_kernel_predictor(gpu, ...)      one XGBoost model per op family, logged + registered in MLflow
    train_collective_predictor(gpu, ...)  alpha-beta prior + residual, logged + registered
    publish(gpu, kind=...)                the champion gate on the fixed evaluation set

Which rows a model learns from:
- the GPU's own measurements, per family, when there are enough (`MIN_FAMILY_ROWS`);
- for a family this GPU has too few measurements of, those and the other GPUs' rows of that family
  with the hardware-spec features (cross-GPU), so e.g. H100 softmax is learned from A100/L4/T4 rows;
- a GPU with no measurements at all (a new part such as h200) gets a cross-GPU model for every
  family; `--cross-gpu` forces this even when the GPU has data (to measure generalisation);
- a GPU with a handful of rows (fewer than `MIN_ROWS`) is refused with the reason: a model fitted
  on five kernels would look trained and be wrong.
Held-out rows are whole shape groups (maya_models.metrics); every figure is measured on them.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from emulator.core.hardware import CPU_RANK_THREADS, UnknownGPUError, get_gpu
from maya_models.collectives import COLLECTIVE_KINDS, CollectivePredictor
from maya_models.features import collective_columns, featurize
from maya_models.kernels import (
    GENERIC_FAMILIES,
    KERNEL_KINDS,
    MAX_LOG_RATIO,
    MIN_BEST_FLOPS,
    MIN_OWN_TREE_ROWS,
    MIN_SEEN_ROWS,
    NUM_ROUNDS,
    RANGE_BOUND_FAMILIES,
    SIZE_FEATURES,
    FamilyModel,
    KernelPredictor,
    log_ratio,
    neighbour_table,
    read_neighbours,
)
from maya_models.metrics import error_stats, eval_mask, shape_group

MIN_ROWS = 20  # fewer measurements than this on a GPU: refuse (see module docstring)
MIN_FAMILY_ROWS = 30
MIN_OWN_FAMILY_ROWS = 500  # fewer own rows than this: the other parts' rows of the family join them
MAX_ROWS_PER_FAMILY = 40_000  # per GPU and family; keeps a default training run in about a minute
EVAL_ROWS_PER_FAMILY = 3_000  # per GPU and family in the fixed evaluation set


class InsufficientDataError(ValueError):
    """Too few measurements to train a trustworthy predictor; the message says what exists."""


# -- data ----------------------------------------------------------------------------------------

def training_rows(root=None, data: pd.DataFrame | None = None, include_sustained: bool = False) -> pd.DataFrame:
    """Usable measurements: status ok, positive finite time, no clock drop, a GPU maya knows, CPU rows
    measured on the threads one rank runs with, no evaluation-only rows, and sustained-throughput rows only
    when asked (`include_sustained`: the kernel trainer compares its model with them, nothing trains on them);
    repeated measurements of one signature on one GPU under one timing condition collapse to their median."""
    from maya_models.warehouse import read_measurements

    df = read_measurements(root=root) if data is None else data
    df = df[df["status"] == "ok"] if "status" in df.columns else df
    dur = pd.to_numeric(df["duration_s"], errors="coerce")
    keep = np.isfinite(dur) & (dur > 0)
    if "clock_drop" in df.columns:
        keep &= df["clock_drop"].fillna(False).astype(bool).eq(False)
    if "threads" in df.columns:  # CPU timings depend on threads: keep those of one rank (CPU_RANK_THREADS)
        threads = pd.to_numeric(df["threads"], errors="coerce")
        keep &= threads.isna() | threads.eq(CPU_RANK_THREADS)
    if "timing" in df.columns and not include_sustained:
        keep &= df["timing"].fillna("").ne("sustained")
    if "evaluation_only" in df.columns:
        keep &= df["evaluation_only"].fillna(False).astype(bool).eq(False)
    df = df[keep].copy()
    df["duration_s"] = dur[keep]
    known = {}
    for g in df["gpu"].unique():
        try:
            known[g] = get_gpu(g).key
        except UnknownGPUError:
            known[g] = None
    df["gpu"] = df["gpu"].map(known)
    df = df[df["gpu"].notna()]
    if len(df):  # timing conditions are part of what was measured: rows of different ones never merge
        key = ["gpu", "signature", "timing"] if "timing" in df.columns else ["gpu", "signature"]
        if "timing" in df.columns:
            df["timing"] = df["timing"].fillna("")
        df["duration_s"] = df.groupby(key)["duration_s"].transform("median")
        df = df.drop_duplicates(key)
    return df.reset_index(drop=True)


def _counts_by_size(X: pd.DataFrame) -> dict[str, int]:
    """Feature rows per element size ({"2": rows, ...}), what a family model keeps of what it saw."""
    sizes, counts = np.unique(X["dtype_bytes"].to_numpy().astype(int), return_counts=True)
    return {str(int(b)): int(n) for b, n in zip(sizes, counts, strict=True)}


def op_limits(X: pd.DataFrame, ops: np.ndarray) -> dict[str, dict[str, float]]:
    """Per op seen in at least MIN_SEEN_ROWS training rows, the largest value of each size feature: the sizes a
    family model reads that op at, at most (`FamilyModel.within_op_limits`)."""
    by_op = X[[c for c in SIZE_FEATURES if c in X.columns]].groupby(ops)
    largest = by_op.max()[by_op.size() >= MIN_SEEN_ROWS]
    return {str(op): row.to_dict() for op, row in largest.iterrows()}


def _cap(df: pd.DataFrame, n: int) -> pd.DataFrame:
    return df.sample(n, random_state=0) if len(df) > n else df


def _parts(rows: pd.DataFrame, gpus: list[str], family_col: str, family: str, cap: int) -> list[pd.DataFrame]:
    out = []
    for g in gpus:
        sub = rows[(rows["gpu"] == g) & (rows[family_col] == family)]
        if len(sub):
            out.append(_cap(sub, cap))
    return out


def _other_devices(rows: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """Rows of the other devices of the target's kind: a cross-GPU model never learns a GPU from CPU
    timings (nor a CPU from GPU ones). Found by an H200 check: a cross-GPU `optimizer` family trained on
    32 CPU rows alone predicted the H200's foreach AdamW at 144 ms a step where the H100 roofline gives 5 ms."""
    is_cpu = get_gpu(gpu).is_cpu
    kinds = {g: get_gpu(g).is_cpu for g in rows["gpu"].unique()}
    return rows[(rows["gpu"] != gpu) & (rows["gpu"].map(kinds) == is_cpu)]


def _mode(gpu: str, own: pd.DataFrame, cross_gpu: bool, what: str) -> tuple[str, str]:
    if cross_gpu:
        return "cross-gpu", "asked for a cross-GPU model"
    if len(own) == 0:
        return "cross-gpu", f"no {what} measurements for {gpu}: cross-GPU model from the other parts"
    if len(own) < MIN_ROWS:
        raise InsufficientDataError(
            f"{gpu} has only {len(own)} usable {what} measurements (need at least {MIN_ROWS}); "
            f"run `make calibrate GPU={gpu}` on that part, or train with --cross-gpu")
    return "own", f"{len(own)} {what} measurements of {gpu}"


def _with_eval_mask(df: pd.DataFrame) -> np.ndarray:
    return eval_mask(df.reset_index(drop=True))


# -- kernels -------------------------------------------------------------------------------------

def _fit_family(family, X, y, groups, ops, trained_on, num_rounds, params) -> FamilyModel:
    """Trees, unless a calibrated roofline (one constant ratio) does better on a validation split of the training
    groups (fold CONSTANT_FOLD of `_fold_readings`): small families with few distinct shapes overfit otherwise. Over
    all the folds, the trees then choose how they read an op with few rows (`_own_trees_beat_generic`) and whether
    the measured-neighbour reading (`neighbour_table`) answers the rows between a kernel's own measured sizes."""
    if len(X) >= 20_000 or len(set(groups)) < 3:
        return KernelPredictor.fit_family(family, X, y, trained_on, num_rounds, params)
    folds = _fold_readings(family, X, y, groups, ops, trained_on, num_rounds, params)
    first = next((f for f in folds if f["fold"] == CONSTANT_FOLD), None)
    if first is None:
        return KernelPredictor.fit_family(family, X, y, trained_on, num_rounds, params)
    if np.median(_ape(first["bias"], first["y"])) < np.median(_ape(first["aware"], first["y"])):
        return FamilyModel(family, None, list(X.columns), trained_on + " (calibrated roofline)", len(X),
                           float(np.median(y)), float(X["flops"].max()), float(X["bytes"].max()))
    model = KernelPredictor.fit_family(family, X, y, trained_on, num_rounds, params)
    if _own_trees_beat_generic(folds):
        model.min_op_rows = MIN_OWN_TREE_ROWS
    if _neighbours_beat_trees(folds, model.min_op_rows):
        model.neighbours = neighbour_table(X, y, ops)
        model.trained_on += " (measured neighbours)"
    return model


TABLE_FOLDS = 5
CONSTANT_FOLD = 1  # the fold whose rows choose between trees and a calibrated roofline


def _fold_readings(family, X, y, groups, ops, trained_on, num_rounds, params) -> list[dict]:
    """Each training row read by models that never saw its shape group (TABLE_FOLDS folds of the groups): the
    op-aware trees, the op-blind trees (GENERIC_FAMILIES), the measured-neighbour table (NaN where it has no
    reading), a constant ratio (the median of the fold's training rows), and how many rows of the row's op that
    fold trained on. The family's choices rest on these, not on one fold: one fold's dozen rows of a small family
    decided the table by one outlier (the same CPU sweep, calibrated twice, kept the table for its copies once and
    not the other time, when a contiguous copy_ of [128, 64] was read at 18x its time)."""
    import zlib

    fold = np.array([zlib.crc32(g.encode()) % TABLE_FOLDS for g in groups])
    out = []
    for k in range(TABLE_FOLDS):
        val = fold == k
        if val.all() or not val.any():
            continue
        fit = X[~val].reset_index(drop=True)
        trees = KernelPredictor.fit_family(family, fit, y[~val], trained_on, num_rounds, params)
        counts = op_counts(ops[~val])
        op_rows = np.array([counts.get(o, 0) for o in ops[val]])
        aware, blind = trees.log_ratio(X[val]), None
        # the op-blind reading is only ever taken for rows of an op with fewer than MIN_SEEN_ROWS rows
        if family in GENERIC_FAMILIES and (op_rows < MIN_SEEN_ROWS).any():
            trees.generic = KernelPredictor.fit_generic(fit, y[~val], num_rounds, params)
            blind = trees.log_ratio(X[val], np.zeros(int(val.sum()), dtype=bool))  # every row as an unseen op's
        out.append({"fold": k, "y": y[val], "aware": aware, "blind": blind, "bias": float(np.median(y[~val])),
                    "near": read_neighbours(neighbour_table(fit, y[~val], ops[~val]), X[val], ops[val]),
                    "op_rows": op_rows})
    return out


def op_counts(ops: np.ndarray) -> dict[str, int]:
    """Rows per op name."""
    return {str(o): int(n) for o, n in zip(*np.unique(ops, return_counts=True), strict=True)}


def _ape(r, y) -> np.ndarray:
    return np.abs(np.exp(r - y) - 1)


def _lower_mean(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Whether the errors `a` (per fold) average below `b`; False without any."""
    return bool(a) and np.mean(np.concatenate(a)) < np.mean(np.concatenate(b))


def _own_trees_beat_generic(folds: list[dict]) -> bool:
    """Whether an op with MIN_OWN_TREE_ROWS to MIN_SEEN_ROWS rows is better read by the family's op-aware trees than by
    its op-blind ones. Op-blind trees cannot tell apart ops with the same sizes: the CPU's `_softmax_backward_data`
    runs 2-4x faster than `_log_softmax_backward_data` of the same shape, and was read at its time."""
    aware, blind = [], []
    for f in folds:
        few = (f["op_rows"] >= MIN_OWN_TREE_ROWS) & (f["op_rows"] < MIN_SEEN_ROWS)
        if f["blind"] is not None and few.any():
            aware.append(_ape(f["aware"][few], f["y"][few]))
            blind.append(_ape(f["blind"][few], f["y"][few]))
    return _lower_mean(aware, blind)


def _neighbours_beat_trees(folds: list[dict], min_op_rows: int) -> bool:
    """Whether reading rows between their kernel's measured neighbours beats the trees' mean error over the folds,
    the trees read as predictions read them (an op with fewer than `min_op_rows` rows by the op-blind trees)."""
    e_tree, e_near = [], []
    for f in folds:
        r_tree = f["aware"] if f["blind"] is None else np.where(f["op_rows"] >= min_op_rows, f["aware"], f["blind"])
        e_tree.append(_ape(r_tree, f["y"]))
        e_near.append(_ape(np.where(np.isnan(f["near"]), r_tree, f["near"]), f["y"]))
    return _lower_mean(e_near, e_tree)


MIN_OP_ROWS = 20  # an op with fewer rows is not held out on its own


def leave_one_op_out(X: pd.DataFrame, y: np.ndarray, ops: np.ndarray, num_rounds: int, params) -> dict | None:
    """How well the generic model times an op it never saw: each op with MIN_OP_ROWS+ rows held out in turn,
    the generic trees trained on the others (half the rounds) and scored on it. None with fewer than two ops."""
    import xgboost as xgb

    counts = op_counts(ops)
    if len(counts) < 2:
        return None
    cols = [c for c in X.columns if c != "op_code"]  # what fit_generic trains on
    by_op, errors = {}, []
    for name, n in counts.items():
        if n < MIN_OP_ROWS:
            continue
        out = ops == name
        booster = KernelPredictor.fit_generic(X[~out], y[~out], max(num_rounds // 2, 10), params)
        r = np.clip(booster.predict(xgb.DMatrix(X.loc[out, cols].values, feature_names=cols)),
                    -MAX_LOG_RATIO, MAX_LOG_RATIO)
        e = np.abs(np.exp(r - y[out]) - 1) * 100
        by_op[str(name)] = round(float(np.median(e)), 2)
        errors.append(e)
    if not errors:
        return None
    return {"median_ape": float(np.median(np.concatenate(errors))), "by_op": by_op}


def predict_as_measured(predictor, df: pd.DataFrame) -> np.ndarray:
    """Predict rows measured on several GPUs, each with its own GPU's spec (cross-GPU evaluation)."""
    out = np.empty(len(df))
    df = df.reset_index(drop=True)
    original = predictor.gpu
    try:
        for g, idx in df.groupby("gpu").groups.items():
            predictor.gpu = g
            out[np.asarray(idx)] = predictor.predict(df.loc[idx]).duration_s.to_numpy()
    finally:
        predictor.gpu = original
    return out


def kernel_eval_set(gpu: str, root=None, data=None, cross_gpu: bool = False) -> pd.DataFrame:
    """The fixed evaluation set: held-out shape groups of this GPU's kernels (other GPUs' if it has none)."""
    rows = training_rows(root, data)
    rows = rows[rows["kind"].isin(KERNEL_KINDS)]
    own = rows[rows["gpu"] == gpu]
    pool = own if len(own) and not cross_gpu else _other_devices(rows, gpu)
    pool = pool[_with_eval_mask(pool)] if len(pool) else pool
    parts = [_cap(g, EVAL_ROWS_PER_FAMILY) for _, g in pool.groupby(["gpu", "family"])]
    return pd.concat(parts, ignore_index=True) if parts else pool


MIN_SCORED_ROWS = 20  # a family with fewer held-out rows is reported but does not move the score


def kernel_scores(predictor, eval_df: pd.DataFrame) -> tuple[float, dict]:
    """(score, per-family stats): the score is the mean over families of the median APE (lower is better),
    over the families with at least MIN_SCORED_ROWS held-out rows (two rows' median says nothing)."""
    if not len(eval_df):
        return float("nan"), {}
    pred = predict_as_measured(predictor, eval_df)
    stats = {}
    for fam, idx in eval_df.reset_index(drop=True).groupby("family").groups.items():
        stats[fam] = error_stats(pred[np.asarray(idx)], eval_df["duration_s"].to_numpy()[np.asarray(idx)])
    scored = [s["median_ape"] for s in stats.values() if s["n"] >= MIN_SCORED_ROWS]
    if not scored:
        scored = [s["median_ape"] for s in stats.values()]
    return float(np.mean(scored)), stats


def train_kernel_predictor(gpu: str, *, root=None, data: pd.DataFrame | None = None, cross_gpu: bool = False,
                           register: bool = True, num_rounds: int = NUM_ROUNDS, params: dict | None = None,
                           max_rows_per_family: int = MAX_ROWS_PER_FAMILY, return_predictor: bool = False,
                           progress: Callable[[str], None] | None = None) -> dict:
    """Train (and register) the kernel predictor of `gpu`; returns metadata (metrics per family, version),
    plus the predictor object under "predictor" when `return_predictor`. `progress` gets one line per
    family as it is fitted (the Dagster asset passes its log, the CLI stderr)."""
    from maya_models.warehouse import snapshot

    t0 = time.time()
    gpu = get_gpu(gpu).key
    rows = training_rows(root, data, include_sustained=True)
    sustained = rows[rows["timing"].fillna("").eq("sustained")] if "timing" in rows.columns else rows.iloc[:0]
    rows = rows[rows["kind"].isin(KERNEL_KINDS) & ~rows.index.isin(sustained.index)]
    own = rows[rows["gpu"] == gpu]
    mode, why = _mode(gpu, own, cross_gpu, "kernel")
    others = sorted(set(_other_devices(rows, gpu)["gpu"]))
    if mode == "cross-gpu" and not others:
        raise InsufficientDataError(f"no kernel measurements on any other GPU to build a cross-GPU model for {gpu}")
    predictor = KernelPredictor(gpu, info={"mode": mode, "why": why})
    metrics, plots, importances, used = {}, {}, {}, []
    families = sorted(set(rows["family"]))
    for i_fam, fam in enumerate(families):
        own_f = own[own["family"] == fam]
        if mode == "own" and len(own_f) >= MIN_OWN_FAMILY_ROWS:
            parts, trained_on = [_cap(own_f, max_rows_per_family)], "own"
        else:  # too few (or no) rows of this GPU: they join the other parts' rows, with the hardware features
            parts = _parts(rows, others, "family", fam, max_rows_per_family // 2)
            if mode == "own" and len(own_f):
                parts = [own_f, *parts]
            trained_on = "cross-gpu: " + ", ".join(sorted({p["gpu"].iloc[0] for p in parts}))
        data_f = pd.concat(parts, ignore_index=True) if parts else own_f.iloc[:0]
        if len(data_f) < MIN_FAMILY_ROWS:
            continue
        X = pd.concat([featurize(p, get_gpu(p["gpu"].iloc[0])) for p in parts], ignore_index=True)
        groups = [shape_group(fam, o, s, d) for o, s, d in zip(data_f["op"], data_f["shapes"], data_f["dtypes"],
                                                                strict=True)]
        ev = eval_mask(data_f)
        if ev.all() or not ev.any():  # too few groups to hold one out: evaluate on a row split instead
            ev = np.arange(len(data_f)) % 5 == 0
        y = log_ratio(data_f["duration_s"], X["roofline_s"])
        ops = data_f["op"].astype(str).to_numpy()
        model = _fit_family(fam, X[~ev].reset_index(drop=True), y[~ev],
                            [g for g, e in zip(groups, ev, strict=True) if not e], ops[~ev], trained_on, num_rounds,
                            params)
        train_ops = ops[~ev]
        model.ops = op_counts(train_ops)
        seen = X[~ev]
        model.elem_bytes = _counts_by_size(seen)
        in_situ = seen["in_situ"].to_numpy() > 0 if "in_situ" in seen.columns else np.zeros(len(seen), bool)
        model.in_situ_elem_bytes = _counts_by_size(seen[in_situ])
        model.in_situ_compute_elem_bytes = _counts_by_size(seen[in_situ & (seen["flops"].to_numpy() >= MIN_BEST_FLOPS)])
        if fam in RANGE_BOUND_FAMILIES and trained_on == "own":
            model.op_limits = op_limits(seen, train_ops)
        unseen_op = None
        if fam in GENERIC_FAMILIES and model.booster is not None:
            Xt = X[~ev].reset_index(drop=True)
            model.generic = KernelPredictor.fit_generic(Xt, y[~ev], num_rounds, params)
            unseen_op = leave_one_op_out(Xt, y[~ev], train_ops, num_rounds, params)
        predictor.families[fam] = model
        pred = X["roofline_s"].to_numpy()[ev] * np.exp(model.log_ratio(X[ev], ops=ops[ev]))
        true = data_f["duration_s"].to_numpy()[ev]
        st = error_stats(pred, true)
        base = error_stats(X["roofline_s"].to_numpy()[ev], true)
        metrics[fam] = {**st, "roofline_median_ape": base["median_ape"], "roofline_p90_ape": base["p90_ape"],
                        "roofline_mape": base["mape"], "train_rows": int((~ev).sum()), "trained_on": model.trained_on}
        if unseen_op:
            metrics[fam]["unseen_op_median_ape"] = unseen_op["median_ape"]
            metrics[fam]["unseen_op_by_op"] = unseen_op["by_op"]
        plots[fam] = (pred, true)
        if progress is not None:
            progress(f"kernels {gpu}: {fam} ({i_fam + 1}/{len(families)}) {len(data_f)} rows ({trained_on}), "
                     f"held-out median error {st['median_ape']:.1f}%")
        if model.booster is not None:
            gain = model.booster.get_score(importance_type="gain")
            importances[fam] = dict(sorted(gain.items(), key=lambda kv: -kv[1])[:20])
        used.append(data_f)
    if not predictor.families:
        raise InsufficientDataError(f"no op family has {MIN_FAMILY_ROWS}+ kernel measurements for {gpu}")
    predictor.calibrate_sustained(sustained, reference=own)
    learned_rows = [m for m in metrics.values() if m["n"]]
    score = float(np.mean([m["median_ape"] for m in learned_rows])) if learned_rows else float("nan")
    snap = snapshot(pd.concat(used, ignore_index=True))
    meta = {"gpu": gpu, "kind": "kernels", "mode": mode, "why": why, "families": sorted(predictor.families),
            "metrics": metrics, "score": score, "snapshot": snap, "sustained": predictor.info["sustained"],
            "train_s": round(time.time() - t0, 1)}
    if register:
        from maya_models.registry import log_and_register

        params_log = {"gpu": gpu, "mode": mode, "num_rounds": num_rounds, "xgb_params": params or {},
                      "max_rows_per_family": max_rows_per_family, "families": sorted(predictor.families)}
        meta.update(log_and_register("kernels", gpu, predictor, params=params_log, metrics=metrics, snapshot=snap,
                                     plots=plots, importances=importances, score=score))
    if return_predictor:
        meta["predictor"] = predictor
    return meta


# -- collectives ---------------------------------------------------------------------------------

# Which source wins when several measured the same collective on the same GPU and group shape.
# Timing methods differ (nccl-tests wall time vs summed NCCL kernel durations of 3 runs), and the
# two disagree by several x at small sizes, so rows of one method are kept per (gpu, collective,
# group_size, nnodes); maya's own benchmarks always win.
SOURCE_PRIORITY = ("maya-bench", "aiconfigurator", "vtrain", "vidur")


def prefer_sources(rows: pd.DataFrame) -> pd.DataFrame:
    if not len(rows):
        return rows
    rows = rows.reset_index(drop=True)
    cols = collective_columns(rows)
    rank = rows["source"].map(lambda s: SOURCE_PRIORITY.index(s) if s in SOURCE_PRIORITY else -1)
    key = rows["gpu"] + "|" + cols["collective"] + "|" + cols["group_size"].astype(str) + "|" + \
        cols["nnodes"].astype(str)
    best = rank.groupby(key).transform("min")
    return rows[rank == best].reset_index(drop=True)


def collective_eval_set(gpu: str, root=None, data=None, cross_gpu: bool = False) -> pd.DataFrame:
    rows = training_rows(root, data)
    rows = prefer_sources(rows[rows["kind"].isin(COLLECTIVE_KINDS)])
    own = rows[rows["gpu"] == gpu]
    pool = own if len(own) and not cross_gpu else _other_devices(rows, gpu)
    return pool[_with_eval_mask(pool)].reset_index(drop=True) if len(pool) else pool


def collective_scores(predictor, eval_df: pd.DataFrame) -> tuple[float, dict]:
    if not len(eval_df):
        return float("nan"), {}
    pred = predict_as_measured(predictor, eval_df)
    names = collective_columns(eval_df.reset_index(drop=True))["collective"].to_numpy()
    true = eval_df["duration_s"].to_numpy()
    stats = {c: error_stats(pred[names == c], true[names == c]) for c in np.unique(names)}
    return float(np.mean([s["median_ape"] for s in stats.values()])), stats


def train_collective_predictor(gpu: str, *, root=None, data: pd.DataFrame | None = None, cross_gpu: bool = False,
                               register: bool = True, return_predictor: bool = False) -> dict:
    """Train (and register) the collective predictor of `gpu`; returns metadata (+ "predictor" if asked)."""
    from emulator.core.roofline import roofline_durations
    from maya_models.warehouse import snapshot

    t0 = time.time()
    gpu = get_gpu(gpu).key
    rows = training_rows(root, data)
    rows = prefer_sources(rows[rows["kind"].isin(COLLECTIVE_KINDS)])
    own = rows[rows["gpu"] == gpu]
    mode, why = _mode(gpu, own, cross_gpu, "collective")
    pool = own if mode == "own" else _other_devices(rows, gpu)
    if not len(pool):
        raise InsufficientDataError(f"no collective measurements on any GPU to build a model for {gpu}")
    pool = pool.reset_index(drop=True)
    ev = _with_eval_mask(pool)
    train, test = pool[~ev], pool[ev]
    parts = [(g.reset_index(drop=True), get_gpu(k)) for k, g in train.groupby("gpu")]
    trained_on = "own" if mode == "own" else "cross-gpu: " + ", ".join(sorted(train["gpu"].unique()))
    predictor = CollectivePredictor.fit(gpu, parts, trained_on)
    predictor.info.update(mode=mode, why=why)
    score, metrics = collective_scores(predictor, test)
    for m in metrics.values():
        m["trained_on"] = trained_on
    plots = {}
    if len(test):
        pred = predict_as_measured(predictor, test)
        names = collective_columns(test.reset_index(drop=True))["collective"].to_numpy()
        base = np.concatenate([roofline_durations(pd.concat([g, collective_columns(g)[["collective"]]], axis=1),
                                                  get_gpu(k)) for k, g in test.reset_index(drop=True).groupby("gpu")])
        order = np.concatenate([np.asarray(i) for _, i in test.reset_index(drop=True).groupby("gpu").groups.items()])
        baseline = np.empty(len(test))
        baseline[order] = base
        true = test["duration_s"].to_numpy()
        for c in metrics:
            b = error_stats(baseline[names == c], true[names == c])
            metrics[c].update(roofline_median_ape=b["median_ape"], roofline_p90_ape=b["p90_ape"],
                              roofline_mape=b["mape"])
            plots[c] = (pred[names == c], true[names == c])
    snap = snapshot(pool)
    meta = {"gpu": gpu, "kind": "collectives", "mode": mode, "why": why, "metrics": metrics, "score": score,
            "snapshot": snap, "priors": predictor.priors, "train_s": round(time.time() - t0, 1)}
    if register:
        from maya_models.registry import log_and_register

        meta.update(log_and_register("collectives", gpu, predictor, params={"gpu": gpu, "mode": mode},
                                     metrics=metrics, snapshot=snap, plots=plots, score=score))
    if return_predictor:
        meta["predictor"] = predictor
    return meta


# -- publishing ----------------------------------------------------------------------------------

def publish(gpu: str, *, kind: str = "kernels", version: str | None = None, root=None,
            data: pd.DataFrame | None = None) -> dict:
    """Move `champion` to `version` (default: the latest) only if it beats the champion on the fixed eval set."""
    from maya_models.registry import RegistryError, gate, latest_version, model_name

    gpu = get_gpu(gpu).key
    version = version or latest_version(kind, gpu)
    if version is None:
        raise RegistryError(f"{model_name(kind, gpu)}: no registered version to publish; train first")
    if kind == "kernels":
        eval_df = kernel_eval_set(gpu, root, data)
        score_fn = lambda p: kernel_scores(p, eval_df)[0]  # noqa: E731
    else:
        eval_df = collective_eval_set(gpu, root, data)
        score_fn = lambda p: collective_scores(p, eval_df)[0]  # noqa: E731
    out = gate(kind, gpu, version, score_fn)
    out["eval_rows"] = int(len(eval_df))
    return out


def _print_metrics(meta: dict) -> None:
    print(f"{meta['kind']} {meta['gpu']} ({meta['why']}); score {meta['score']:.2f}; {meta.get('train_s')} s")
    print(f"  {'family':<16}{'n':>7}{'median':>9}{'p90':>9}{'MAPE':>9}   roofline median  trained on")
    for fam, m in sorted(meta["metrics"].items()):
        print(f"  {fam:<16}{m['n']:>7}{m['median_ape']:>8.1f}%{m['p90_ape']:>8.1f}%{m['mape']:>8.1f}%"
              f"   {m.get('roofline_median_ape', float('nan')):>8.1f}%       {m.get('trained_on', '')}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m maya_models.train", description=__doc__.splitlines()[0])
    p.add_argument("--gpu", required=True)
    p.add_argument("--cross-gpu", action="store_true", help="train only on the other GPUs' measurements")
    p.add_argument("--kind", choices=("kernels", "collectives"), default=None, help="default: both")
    p.add_argument("--no-publish", action="store_true", help="register without running the champion gate")
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")
    a = p.parse_args(argv)
    rc = 0
    for kind in ([a.kind] if a.kind else ["kernels", "collectives"]):
        fn = train_kernel_predictor if kind == "kernels" else train_collective_predictor
        try:
            meta = fn(a.gpu, cross_gpu=a.cross_gpu)
        except (InsufficientDataError, UnknownGPUError) as e:
            print(f"{kind} {a.gpu}: not trained: {e}")
            rc = 1
            continue
        if not a.no_publish:
            meta["publish"] = publish(a.gpu, kind=kind)
        if a.json:
            print(json.dumps(meta, indent=2, default=str))
        else:
            _print_metrics(meta)
            if "version" in meta:
                pub = meta.get("publish", {})
                print(f"  registered {meta['model']} v{meta['version']}"
                      + (f"; {'promoted' if pub.get('promoted') else 'not promoted'} ({pub.get('reason')})"
                         if pub else ""))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
