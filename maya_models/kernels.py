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
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from emulator.core.hardware import get_gpu
from emulator.core.ops import op_family
from emulator.core.roofline import roofline_durations
from maya_models.features import featurize

LEARNED, FALLBACK = "learned", "fallback"
# One thread by default: on a shared 2-core machine OpenMP's busy-waiting made nthread=2 up to 4x
# slower than 1 (measured); a calibration node with idle cores sets MAYA_XGB_THREADS.
XGB_THREADS = int(os.environ.get("MAYA_XGB_THREADS", "1"))
KERNEL_KINDS = ("kernel", "memset")
MAX_LOG_RATIO = 6.0  # a learned correction never moves the roofline by more than e^6 either way

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

    def log_ratio(self, X: pd.DataFrame) -> np.ndarray:
        import xgboost as xgb

        if self.booster is None:
            return np.full(len(X), self.bias)
        d = xgb.DMatrix(X[self.features].values, feature_names=self.features)
        return self.booster.predict(d) + self.bias


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
        return FamilyModel(family, booster, list(X.columns), trained_on, int(len(X)))

    # -- prediction ----------------------------------------------------------------------------
    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """duration_s and source for every row of a frame of trace rows (emulator contract)."""
        spec = get_gpu(self.gpu)
        df = df.reset_index(drop=True)
        n = len(df)
        out = np.full(n, np.nan)
        source = np.array([FALLBACK] * n, dtype=object)
        if n == 0:
            return pd.DataFrame({"duration_s": pd.Series(dtype=float), "source": pd.Series(dtype=object)})
        kinds = df["kind"].astype(str).to_numpy() if "kind" in df.columns else np.array(["kernel"] * n)
        fams = np.array([op_family(str(o)) for o in df["op"]], dtype=object)
        learned = np.array([k in KERNEL_KINDS and f in self.families for k, f in zip(kinds, fams, strict=True)])
        if learned.any():
            sub = df[learned]
            X = featurize(sub, spec)
            roof = X["roofline_s"].to_numpy()
            pred = np.full(len(sub), np.nan)
            sub_fams = fams[learned]
            for fam in np.unique(sub_fams):
                m = sub_fams == fam
                r = np.clip(self.families[fam].log_ratio(X[m]), -MAX_LOG_RATIO, MAX_LOG_RATIO)
                pred[m] = roof[m] * np.exp(r)
            idx = np.flatnonzero(learned)
            ok = np.isfinite(pred) & (pred > 0)
            out[idx[ok]] = pred[ok]
            source[idx[ok]] = LEARNED
        rest = ~np.isfinite(out) | (out <= 0)
        if rest.any():
            out[rest] = roofline_durations(_with_flops(df[rest]), spec)
            source[rest] = FALLBACK
        return pd.DataFrame({"duration_s": out.astype(np.float64), "source": source.astype(str)})

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {"type": "kernels", "gpu": self.gpu, "families": {},
                "info": {**self.info, "roofline_fingerprint": roofline_fingerprint()}}
        for fam, m in self.families.items():
            if m.booster is not None:
                m.booster.save_model(str(path / f"{fam}.ubj"))
            meta["families"][fam] = {"features": m.features, "trained_on": m.trained_on, "rows": m.rows,
                                     "bias": m.bias, "boosted": m.booster is not None}
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
            fams[fam] = FamilyModel(fam, b, m["features"], m["trained_on"], m["rows"], m.get("bias", 0.0))
        check_fingerprint(meta.get("info", {}), f"kernel predictor for {meta['gpu']}")
        return cls(meta["gpu"], fams, meta.get("info", {}))


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
    from emulator.core.ops import as_list, flops_and_bytes

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
