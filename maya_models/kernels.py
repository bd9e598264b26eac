"""Kernel predictors: one XGBoost model per op family, around the roofline.

The target is `log(measured / roofline)`: the roofline (emulator.core.roofline, from the GPU's datasheet)
carries the first-order scaling with flops and bytes, and the trees learn how far real kernels sit
from it (wave quantisation, transposes, launch floors, L2). A prediction is `roofline * exp(model)`,
clipped so it can never be 0, negative or NaN. Families with no model (no measurements anywhere)
are timed by the roofline itself and labelled `source="fallback"`.

A predictor is saved as a folder: `predictor.json` (GPU, families, feature names, provenance per
family) plus one `<family>.ubj` XGBoost booster per learned family.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from emulator.core.hardware import get_gpu
from emulator.core.ops import as_list, op_family, timing_family
from emulator.core.roofline import TENSOR_CORE_FAMILIES, compute_share, roofline_durations, row_dtype
from maya_models.features import featurize

LEARNED, FALLBACK = "learned", "fallback"
# One thread by default: on a shared 2-core machine OpenMP's busy-waiting made nthread=2 up to 4x
# slower than 1 (measured); a calibration node with idle cores sets MAYA_XGB_THREADS.
XGB_THREADS = int(os.environ.get("MAYA_XGB_THREADS", "1"))
KERNEL_KINDS = ("kernel", "memset")
MAX_LOG_RATIO = 6.0  # a learned correction never moves the roofline by more than e^6 either way
EXTRAPOLATION = 4.0  # how far past its largest training row a family model is trusted (flops and bytes)
MIN_SEEN_ROWS = 20  # an element size or op seen in fewer training rows than this is not one the model learned
MIN_OWN_TREE_ROWS = 5  # the fewest rows of an op its op-aware trees may read it from, where the folds say so
# Families whose ops share one kind of kernel, so that an op the trees never saw is timed by a second
# model trained without the op's identity (`FamilyModel.generic`), from its sizes and bytes: PyTorch's
# vectorised elementwise and reduction templates for the memory-bound ones, cuBLAS GEMMs for `gemm`
# (addmm is mm with a bias epilogue, bmm/baddbmm strided-batched mm; batch, m, n, k are features).
# Attention has no such model: its ops are different kernels (flash, memory-efficient, math), and an
# unseen one is the roofline's (labelled fallback).
GENERIC_FAMILIES = frozenset({"gemm", "elementwise", "norm", "softmax_loss", "copy", "embedding", "optimizer"})
# Memory-bound families, whose ops run at a bandwidth that is flat or rising with size once past the launch
# floor. An op of theirs is read at most at the sizes it was measured at (`FamilyModel.within_op_limits`):
# past them the trees answer from another op's rows (on the A100, a LayerNorm with a hidden size vidur did not
# measure was timed at the rate of vLLM's RMSNorm kernel, 0.71 against LayerNorm's own 1.0 TB/s).
RANGE_BOUND_FAMILIES = frozenset({"elementwise", "norm", "softmax_loss", "copy", "embedding", "optimizer"})
# the features a row's sizes decide (maya_models.features): what `within_op_limits` caps
SIZE_FEATURES = ("flops", "bytes", "log_flops", "log_bytes", "intensity", "roofline_s", "log_roofline", "t_compute",
                 "t_memory", "bytes_over_l2", "numel0", "inner", "outer", "out_numel", "log_numel0", "waves_elem",
                 "log_gather_ratio")
# the sustained measurement a dtype's kernels follow: fp16 runs on the same tensor cores at the same rate as bf16
SUSTAINED_DTYPE = {"float16": "bfloat16", "float8_e5m2": "float8_e4m3fn"}

XGB_PARAMS = {"objective": "reg:squarederror", "eta": 0.15, "max_depth": 8, "subsample": 0.85,
              "colsample_bytree": 0.85, "min_child_weight": 2.0, "tree_method": "hist", "max_bin": 128,
              "nthread": XGB_THREADS, "seed": 0}
NUM_ROUNDS = 200  # measured on H100 GEMMs: more rounds or depth buy <0.2 points of median APE


@dataclass
class FamilyModel:
    family: str
    booster: object  # xgboost.Booster, or None for a calibrated roofline (constant log ratio `bias`)
    features: list[str]
    trained_on: str  # "own" (this GPU's measurements) or "cross-gpu: a100-80gb, l40s, ..."
    rows: int
    bias: float = 0.0
    # the largest work it was trained on: a row several times past both is outside what it learned, and the
    # roofline (labelled fallback) answers it instead of an extrapolated ratio
    max_flops: float = math.inf
    max_bytes: float = math.inf
    # what it was trained on, beyond size: rows per op name and per element size (None: a model saved before
    # these were kept, trusted as it was)
    ops: dict[str, int] | None = None
    elem_bytes: dict[str, int] | None = None
    generic: object = None  # xgboost.Booster without op_code, for ops of a GENERIC_FAMILIES family it never saw
    # training rows timed in situ (a profiler trace of a real program), per element size (None: a model saved
    # before these were kept, trusted as it was)
    in_situ_elem_bytes: dict[str, int] | None = None
    # of those, the compute-bound ones (at least MIN_BEST_FLOPS): a program's clock is in their times
    in_situ_compute_elem_bytes: dict[str, int] | None = None
    # per op, the largest value of each SIZE_FEATURES column over its training rows (None: a model saved before
    # these were kept, or a family outside RANGE_BOUND_FAMILIES)
    op_limits: dict[str, dict[str, float]] | None = None
    # the measured-neighbour reading (`neighbour_table`), when a validation split of the training groups chose it
    # over the trees: per NEIGHBOUR_KEY of a trained row, its (log_bytes, log ratio) points sorted by size
    neighbours: dict[str, list[list[float]]] | None = None
    # the rows an op needs for the op-aware trees to read it; an op with fewer is read by `generic` (or, without
    # one, is not covered). MIN_OWN_TREE_ROWS where the family's training folds found its own trees better on such ops
    min_op_rows: int = MIN_SEEN_ROWS

    def within_op_limits(self, X: pd.DataFrame, ops) -> pd.DataFrame:
        """`X` with each row's size features capped at the largest its own op was trained on: a row past the
        sizes its op was measured at is read at its op's largest measured size, so its time is the roofline's
        scaling at that size's ratio, not a ratio the trees learned from another op's larger rows. Smaller rows,
        rows of an op without limits (unseen ops, older models) are unchanged."""
        if not self.op_limits:
            return X
        limits = pd.DataFrame.from_dict(self.op_limits, orient="index")
        cols = list(limits.columns)
        held = X[cols].to_numpy(dtype=float)
        cap = limits.reindex(np.asarray(ops, dtype=str)).to_numpy(dtype=float)  # NaN: an op without limits
        capped = np.where(np.isnan(cap), held, np.minimum(held, cap))
        if np.array_equal(capped, held, equal_nan=True):
            return X
        X = X.copy()
        X[cols] = capped
        return X

    def seen_op(self, ops) -> np.ndarray:
        if self.ops is None or self.booster is None:  # a constant ratio is the same for every op
            return np.ones(len(ops), dtype=bool)
        return np.array([self.ops.get(o, 0) >= self.min_op_rows for o in ops], dtype=bool)

    def covers(self, X: pd.DataFrame, seen: np.ndarray | None = None) -> np.ndarray:
        """Rows inside what the model learned: not far past its largest work, an element size it saw, and an
        op it saw (`seen`, from `seen_op`) unless the family has a generic model."""
        ok = (X["flops"].to_numpy() <= EXTRAPOLATION * self.max_flops) & \
            (X["bytes"].to_numpy() <= EXTRAPOLATION * self.max_bytes)
        if self.elem_bytes is not None:
            ok &= np.array([self.elem_bytes.get(str(int(b)), 0) >= MIN_SEEN_ROWS for b in X["dtype_bytes"]])
        if seen is not None and self.generic is None:
            ok &= seen
        return ok

    def reads_neighbours(self, X: pd.DataFrame, ops) -> np.ndarray:
        """Rows the measured-neighbour table answers (`read_neighbours`): at or between their own kernel's
        measured sizes. They are covered though their op has fewer than MIN_SEEN_ROWS rows: that rule keeps trees
        from timing an op they barely saw, and an interpolation between the op's own measurements is not that."""
        if not self.neighbours:
            return np.zeros(len(X), dtype=bool)
        return ~np.isnan(read_neighbours(self.neighbours, X, ops))

    def as_measured_where_unseen(self, X: pd.DataFrame) -> pd.DataFrame:
        """`X` with `in_situ` cleared on rows of an element size the model saw fewer than MIN_SEEN_ROWS in-situ
        rows of. The in-situ effect is learned from the profiled kernels a part has (on the H100, bf16
        inference traces); carried to a dtype with no in-situ evidence it is an extrapolation (bf16
        tensor-core kernels' in-step slowdown applied to fp32 SIMT GEMMs), so those rows are predicted as
        measured in isolation, the condition their own rows were timed in."""
        if self.in_situ_elem_bytes is None or "in_situ" not in X.columns:
            return X
        unseen = np.array([self.in_situ_elem_bytes.get(str(int(b)), 0) < MIN_SEEN_ROWS for b in X["dtype_bytes"]])
        clear = unseen & (X["in_situ"].to_numpy() > 0)
        if not clear.any():
            return X
        X = X.copy()
        X.loc[clear, "in_situ"] = 0.0
        return X

    def clock_in_situ(self, elem_bytes: float) -> bool:
        """Whether this model's in-situ reading of an element size already carries the clock a training step
        runs at: it learned from enough compute-bound kernels of that size profiled inside programs. Then the
        sustained-clock factor, which brings isolated burst timings to that clock, would count it twice."""
        counts = self.in_situ_compute_elem_bytes or {}
        return counts.get(str(int(elem_bytes)), 0) >= MIN_SEEN_ROWS

    def log_ratio(self, X: pd.DataFrame, seen: np.ndarray | None = None, ops=None) -> np.ndarray:
        """Learned log(time / roofline), within +-MAX_LOG_RATIO; rows whose op the trees never saw (`seen` False)
        take the generic trees. Rows of a dtype without in-situ training rows are read under the isolated condition
        (`as_measured_where_unseen`); given the rows' `ops`, past their op's largest measured sizes at those
        sizes (`within_op_limits`)."""
        return np.clip(self._log_ratio(X, seen, ops), -MAX_LOG_RATIO, MAX_LOG_RATIO)

    def _log_ratio(self, X: pd.DataFrame, seen: np.ndarray | None, ops) -> np.ndarray:
        import xgboost as xgb

        if self.booster is None:
            return np.full(len(X), self.bias)
        X = self.as_measured_where_unseen(X)
        if ops is not None:
            X = self.within_op_limits(X, ops)
        out = self.booster.predict(xgb.DMatrix(X[self.features].values, feature_names=self.features))
        if seen is not None and self.generic is not None:
            unseen = ~seen
            if unseen.any():
                cols = self.generic_features
                out[unseen] = self.generic.predict(xgb.DMatrix(X.loc[unseen, cols].values, feature_names=cols))
        out = out + self.bias
        if self.neighbours and ops is not None:
            near = read_neighbours(self.neighbours, X, ops)
            out = np.where(np.isnan(near), out, near)
        return out

    @property
    def generic_features(self) -> list[str]:
        return [f for f in self.features if f != "op_code"]


@dataclass
class KernelPredictor:
    gpu: str
    families: dict[str, FamilyModel] = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    # -- training ------------------------------------------------------------------------------
    @staticmethod
    def fit_family(family: str, X: pd.DataFrame, y_log_ratio: np.ndarray, trained_on: str,
                   num_rounds: int = NUM_ROUNDS, params: dict | None = None) -> FamilyModel:
        import xgboost as xgb

        dtrain = xgb.DMatrix(X.values, label=y_log_ratio, feature_names=list(X.columns))
        booster = xgb.train({**XGB_PARAMS, **(params or {})}, dtrain, num_boost_round=num_rounds)
        return FamilyModel(family, booster, list(X.columns), trained_on, int(len(X)), 0.0,
                           float(X["flops"].max()), float(X["bytes"].max()))

    @staticmethod
    def fit_generic(X: pd.DataFrame, y_log_ratio: np.ndarray, num_rounds: int = NUM_ROUNDS,
                    params: dict | None = None):
        """The family's trees without the op's identity: what an op the family never measured is timed by."""
        import xgboost as xgb

        X = X.drop(columns=["op_code"])
        d = xgb.DMatrix(X.values, label=y_log_ratio, feature_names=list(X.columns))
        return xgb.train({**XGB_PARAMS, **(params or {})}, d, num_boost_round=num_rounds)

    # -- prediction ----------------------------------------------------------------------------
    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """duration_s, source and adjustment_s for every row of a frame of trace rows (emulator contract).

        Rows without a `timing` column (trace rows) are what a training step runs: learned tensor-core
        times are brought to the part's sustained clock (`sustained_factors`), and `adjustment_s` says
        how much that added. Rows with a `timing` (measurements, `make evaluate`) are predicted as timed."""
        out, source, X, learned = self._predict_reference(df)
        adjustment = np.zeros(len(out))
        if len(out) and learned.any():
            factor = self.sustained_factors(df, X, learned)
            adjustment = out * (factor - 1.0)
            out = out + adjustment
        return pd.DataFrame({"duration_s": out.astype(np.float64), "source": source.astype(str),
                             "adjustment_s": adjustment.astype(np.float64)})

    def _predict_reference(self, df: pd.DataFrame):
        """(durations, sources, features of the learned rows, learned mask) under the conditions the
        measurements were taken in."""
        spec = get_gpu(self.gpu)
        df = df.reset_index(drop=True)
        n = len(df)
        out = np.full(n, np.nan)
        source = np.array([FALLBACK] * n, dtype=object)
        if n == 0:
            return out, source, None, np.zeros(0, dtype=bool)
        kinds = df["kind"].astype(str).to_numpy() if "kind" in df.columns else np.array(["kernel"] * n)
        args = df["args"].tolist() if "args" in df.columns else [None] * n
        shapes = df["shapes"].tolist() if "shapes" in df.columns else [None] * n
        fams = np.array([timing_family(str(o), a, as_list(s) if s is not None else None)  # generated: ATen's family
                         for o, a, s in zip(df["op"], args, shapes, strict=True)], dtype=object)
        learned = np.array([k in KERNEL_KINDS and f in self.families for k, f in zip(kinds, fams, strict=True)])
        X = None
        if learned.any():
            sub = df[learned]
            X = featurize(sub, spec)
            roof = X["roofline_s"].to_numpy()
            pred = np.full(len(sub), np.nan)
            sub_fams = fams[learned]
            sub_ops = sub["op"].astype(str).to_numpy()
            for fam in np.unique(sub_fams):
                m = sub_fams == fam
                model = self.families[fam]
                seen = model.seen_op(sub_ops[m])
                r = model.log_ratio(X[m], seen, sub_ops[m])
                covered = model.covers(X[m], seen) | model.reads_neighbours(X[m], sub_ops[m])
                pred[m] = np.where(covered, roof[m] * np.exp(r), np.nan)
            idx = np.flatnonzero(learned)
            ok = np.isfinite(pred) & (pred > 0)
            out[idx[ok]] = pred[ok]
            source[idx[ok]] = LEARNED
            learned = learned.copy()
            learned[idx[~ok]] = False
            X = X[ok]
        rest = ~np.isfinite(out) | (out <= 0)
        if rest.any():
            out[rest] = roofline_durations(_with_flops(df[rest]), spec)
            source[rest] = FALLBACK
        return out, source, X, learned

    # -- training conditions ---------------------------------------------------------------------
    def calibrate_sustained(self, sustained: pd.DataFrame, reference: pd.DataFrame | None = None) -> dict:
        """How much slower compute-bound kernels run in a training step than in the measurements, per dtype,
        from the part's sustained-throughput measurement (`timing == "sustained"`, MAMF: the best TFLOP/s of
        a sweep of shapes, each timed back to back with the clock the power limit allows).

        The ratio is best against best: the best throughput this part's GEMM measurements reach (the median
        of the top BEST_OF rows of the dtype, short bursts at the maximum clock) over the sustained best.
        Both are maxima over sweeps of shapes, so shape efficiency cancels and what is left is the clock
        (and power) of the two conditions. Without reference rows of the dtype, the ratio is the sustained
        row's time over this predictor's time for its shape (`same_shape_ratio`, also kept for comparison:
        it reads one point of the sustained sweep, whose shape need not be where the bursts peak).
        Stored per dtype in `info["sustained"]`."""
        mine = sustained[sustained["gpu"] == self.gpu] if len(sustained) else sustained
        table = {}
        for r in mine.to_dict("records"):
            probe = pd.DataFrame([{k: r[k] for k in ("kind", "op", "shapes", "dtypes", "strides", "args",
                                                     "out_shapes", "out_dtypes")}])
            predicted, source, _, _ = self._predict_reference(probe)
            dtype = row_dtype(r["op"], as_list(r["dtypes"]))
            flops = float(probe_flops(probe))
            sustained_tf = flops / float(r["duration_s"]) / 1e12
            best = best_burst_tflops(reference, self.gpu, dtype) if reference is not None else None
            same_shape = float(r["duration_s"]) / float(predicted[0]) if source[0] == LEARNED else None
            if best is not None:
                ratio, how = best / sustained_tf, "best against best"
            elif same_shape is not None:
                ratio, how = same_shape, "same shape"
            else:
                continue
            table[dtype] = {"ratio": max(ratio, 1.0), "method": how, "sustained_tflops": round(sustained_tf, 1),
                            "best_burst_tflops": None if best is None else round(best, 1),
                            "same_shape_ratio": None if same_shape is None else round(same_shape, 4),
                            "measured_s": float(r["duration_s"]), "predicted_s": float(predicted[0]),
                            "provenance": r.get("provenance")}
        self.info["sustained"] = table
        return table

    def sustained_factors(self, df: pd.DataFrame, X: pd.DataFrame, learned: np.ndarray) -> np.ndarray:
        """1 + compute share x (ratio - 1) for the learned tensor-core rows of a dtype with a sustained
        measurement, in rows that are trace rows (no `timing` column), unless their family read them in situ
        with the clock included (`FamilyModel.clock_in_situ`); 1 elsewhere."""
        factor = np.ones(len(df))
        table = self.info.get("sustained") or {}
        if not table or "timing" in df.columns:
            return factor
        spec = get_gpu(self.gpu)
        idx = np.flatnonzero(learned)
        ops, dtypes = df["op"].tolist(), df["dtypes"].tolist() if "dtypes" in df.columns else [None] * len(df)
        for j, i in enumerate(idx):
            fam = op_family(str(ops[i]))
            if fam not in TENSOR_CORE_FAMILIES or self.families[fam].clock_in_situ(X["dtype_bytes"].iloc[j]):
                continue
            dtype = row_dtype(str(ops[i]), as_list(dtypes[i]))
            hit = table.get(SUSTAINED_DTYPE.get(dtype, dtype))
            if hit is None:
                continue
            share = compute_share(X["flops"].iloc[j], X["bytes"].iloc[j], dtype, fam, spec)
            factor[i] = 1.0 + share * (hit["ratio"] - 1.0)
        return factor

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {"type": "kernels", "gpu": self.gpu, "families": {},
                "info": {**self.info, "roofline_fingerprint": roofline_fingerprint()}}
        for fam, m in self.families.items():
            if m.booster is not None:
                m.booster.save_model(str(path / f"{fam}.ubj"))
            if m.generic is not None:
                m.generic.save_model(str(path / f"{fam}.generic.ubj"))
            meta["families"][fam] = {"features": m.features, "trained_on": m.trained_on, "rows": m.rows,
                                     "bias": m.bias, "boosted": m.booster is not None, "max_flops": m.max_flops,
                                     "max_bytes": m.max_bytes, "ops": m.ops, "elem_bytes": m.elem_bytes,
                                     "in_situ_elem_bytes": m.in_situ_elem_bytes,
                                     "in_situ_compute_elem_bytes": m.in_situ_compute_elem_bytes,
                                     "op_limits": m.op_limits, "generic": m.generic is not None,
                                     "neighbours": m.neighbours, "min_op_rows": m.min_op_rows}
        (path / "predictor.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
        return path

    @classmethod
    def load(cls, path: Path) -> KernelPredictor:
        import xgboost as xgb

        path = Path(path)
        meta = json.loads((path / "predictor.json").read_text())
        fams = {}
        for fam, m in meta["families"].items():
            b = None
            if m.get("boosted", True):
                b = xgb.Booster()
                b.load_model(str(path / f"{fam}.ubj"))
            g = None
            if m.get("generic"):
                g = xgb.Booster()
                g.load_model(str(path / f"{fam}.generic.ubj"))
            fams[fam] = FamilyModel(fam, b, m["features"], m["trained_on"], m["rows"], m.get("bias", 0.0),
                                    m.get("max_flops", math.inf), m.get("max_bytes", math.inf),
                                    m.get("ops"), m.get("elem_bytes"), g, m.get("in_situ_elem_bytes"),
                                    m.get("in_situ_compute_elem_bytes"), m.get("op_limits"), m.get("neighbours"),
                                    m.get("min_op_rows", MIN_SEEN_ROWS))
        check_fingerprint(meta.get("info", {}), f"kernel predictor for {meta['gpu']}")
        return cls(meta["gpu"], fams, meta.get("info", {}))


BEST_OF = 5  # rows whose median is a part's best burst throughput (one fast outlier must not set it)
MIN_BEST_FLOPS = 1e11  # GEMMs big enough to reach the part's peak


def probe_flops(df: pd.DataFrame) -> float:
    return float(_with_flops(df)["flops"].iloc[0])


def best_burst_tflops(rows: pd.DataFrame, gpu: str, dtype: str) -> float | None:
    """The median TFLOP/s of the BEST_OF fastest GEMM measurements of `gpu` in `dtype` (timed as measured,
    not sustained), or None when there are fewer than BEST_OF big enough."""
    if rows is None or not len(rows):
        return None
    g = rows[(rows["gpu"] == gpu) & (rows["kind"] == "kernel") & (rows["family"] == "gemm")]
    if "timing" in g.columns:
        g = g[g["timing"].fillna("") != "sustained"]
    g = g[[row_dtype(o, as_list(d)) == dtype for o, d in zip(g["op"], g["dtypes"], strict=True)]]
    if len(g) < BEST_OF:
        return None
    f = _with_flops(g.reset_index(drop=True))
    big = f["flops"].to_numpy() >= MIN_BEST_FLOPS
    if big.sum() < BEST_OF:
        return None
    tf = np.sort(f["flops"].to_numpy()[big] / f["duration_s"].to_numpy()[big])[-BEST_OF:] / 1e12
    return float(np.median(tf))


def roofline_fingerprint() -> str:
    """A hash of emulator.core.roofline's constants. Learned corrections are ratios to that roofline, so a
    predictor trained under other constants is stale: `load` warns when the fingerprint changed."""
    import hashlib

    from emulator.core import roofline as r

    blob = json.dumps([r.FAMILY_EFFICIENCY, sorted(r.TENSOR_CORE_FAMILIES), r.LAUNCH_FLOOR_S, r.CPU_LAUNCH_FLOOR_S,
                       r.PCIE_EFFICIENCY, r.COLLECTIVE_BASE_S, r.LINK_EFFICIENCY], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def check_fingerprint(info: dict, where: str) -> None:
    import warnings

    trained = info.get("roofline_fingerprint")
    if trained and trained != roofline_fingerprint():
        warnings.warn(f"{where} was trained against other emulator.core.roofline constants ({trained} != "
                      f"{roofline_fingerprint()}); retrain it (python -m maya_models.train)", stacklevel=3)


def _with_flops(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with flops/bytes filled from the signature where the caller left them empty."""
    from emulator.core.ops import flops_and_bytes

    df = df.copy()
    if "flops" not in df.columns:
        df["flops"] = np.nan
    if "bytes" not in df.columns:
        df["bytes"] = np.nan
    need = df["flops"].isna() | df["bytes"].isna()
    for i in np.flatnonzero(need.to_numpy()):
        r = df.iloc[i]
        f, b = flops_and_bytes(str(r["op"]), as_list(r.get("shapes")), as_list(r.get("dtypes")),
                               as_list(r.get("out_shapes")), as_list(r.get("out_dtypes")), r.get("args"))
        df.iloc[i, df.columns.get_loc("flops")] = f
        df.iloc[i, df.columns.get_loc("bytes")] = b
    return df


def log_ratio(duration_s: np.ndarray, roofline_s: np.ndarray) -> np.ndarray:
    return np.log(np.asarray(duration_s, float) / np.asarray(roofline_s, float))


# What makes two rows of a family the same kernel at another size: the part (its bandwidth, units and clock), the op,
# its element size, whether an input is a strided view (a transposing copy walks memory unlike a contiguous one)
# and whether it was timed inside a program.
NEIGHBOUR_KEY = ("hw_hbm_bw", "hw_sms", "hw_clock_mhz", "dtype_bytes", "strided", "in_situ")


def _kernels(X: pd.DataFrame, ops) -> dict[str, np.ndarray]:
    """Row positions of each kernel (NEIGHBOUR_KEY) among the rows of `X`, by the kernel's table key; the key is
    formatted once per kernel, not per row (a trace holds hundreds of thousands of rows of a few hundred)."""
    cols = pd.DataFrame({"op": np.asarray(ops, dtype=str), **{c: X[c].to_numpy() for c in NEIGHBOUR_KEY}})
    return {"|".join([op, *(f"{float(v):g}" for v in vals)]): idx
            for (op, *vals), idx in cols.groupby(list(cols.columns), sort=False).indices.items()}


def neighbour_table(X: pd.DataFrame, y_log_ratio: np.ndarray, ops) -> dict[str, list[list[float]]]:
    """The measured-neighbour reading of a family: for each kernel (NEIGHBOUR_KEY) its training rows'
    (log_bytes, log ratio), sorted by size, repeated sizes at their median. A row of a kernel the table holds,
    at or between its measured sizes, is read by interpolating its ratio between the two measured sizes around
    it (`read_neighbours`). Why: in a family of a few dozen rows of unrelated ops (CPU copies: contiguous
    copy_, transposing copy_, clone and stack of scalars), trees split on size across ops and read a contiguous
    copy between two measured sizes at the ratio of another op's tiny rows (28x its measured time); the
    kernel's own neighbours cannot do that."""
    xy = pd.DataFrame({"x": X["log_bytes"].to_numpy(), "y": np.asarray(y_log_ratio)})
    table = {}
    for key, idx in _kernels(X, ops).items():
        pts = xy.iloc[idx].groupby("x")["y"].median()  # sorted by size
        table[key] = [[float(a), float(b)] for a, b in pts.items()]
    return table


def read_neighbours(table: dict[str, list[list[float]]], X: pd.DataFrame, ops) -> np.ndarray:
    """Interpolated log ratio of each row whose kernel the table holds at a size at or between its measured
    sizes (`neighbour_table`); NaN elsewhere. Past the measured sizes the trees answer: an op measured only on
    tiny tensors, whose time is all launch floor, would otherwise carry that floor's ratio to megabytes."""
    out = np.full(len(X), np.nan)
    x = X["log_bytes"].to_numpy()
    for key, idx in _kernels(X, ops).items():
        if key in table:
            a = np.asarray(table[key])
            inside = idx[(x[idx] >= a[0, 0]) & (x[idx] <= a[-1, 0])]
            out[inside] = np.interp(x[inside], a[:, 0], a[:, 1])
    return out
