"""Collective predictors: a fitted alpha-beta prior per (collective, topology level) + an XGBoost residual.

Prior:  t = c0 + c1 * steps(n) + c2 * factor(n) * coll_bytes / link_bw
with the ring step count and nccl-tests bus factor of the collective on a group of n GPUs and the
link bandwidth of the level (NVLink/NVSwitch or PCIe inside a node, the NIC between nodes; from
emulator.core.hardware). c0..c2 >= 0 are fitted to the measurements by non-negative least squares on
relative error, one set per (collective, level), so each is a physically shaped curve that
extrapolates sanely in size and group size.

Residual: XGBoost on log(measured / prior) learns what alpha-beta misses (NCCL protocol switches,
LL/LL128/Simple, tree vs ring). It is applied only inside the measured envelope (same collective
and level, a measured group size and nodes count, sizes within 2x of the measured range); outside
it the prior alone answers, which is what "the prior dominates outside the data" means here.
Between a group size's largest (or smallest) measured size and that 2x, the residual is the one at
the measured edge: trees do not extrapolate, and one booster serves every collective, so past the
edge its leaves would come from other collectives' or group sizes' measurements.
A (collective, level) with no measurements at all uses emulator.core.roofline.collective_time,
labelled `fallback`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from emulator.core.hardware import get_gpu
from emulator.core.roofline import collective_time, group_link, roofline_durations
from maya_models.features import collective_columns, collective_features, ring_factor, ring_steps
from maya_models.kernels import XGB_THREADS, check_fingerprint, roofline_fingerprint

LEARNED, FALLBACK = "learned", "fallback"
COLLECTIVE_KINDS = ("collective", "p2p")
XGB_PARAMS = {"objective": "reg:squarederror", "eta": 0.1, "max_depth": 5, "subsample": 0.9,
              "min_child_weight": 2.0, "tree_method": "hist", "nthread": XGB_THREADS, "seed": 0}
NUM_ROUNDS = 150
MAX_LOG_RESIDUAL = 1.5


def _design(cols: pd.DataFrame, spec) -> np.ndarray:
    """Columns [1, steps, factor * bytes / link_bw] of the alpha-beta prior."""
    rows = []
    for r in cols.itertuples(index=False):
        bw, _ = group_link(spec, r.collective, r.group_size, r.nnodes)
        rows.append([1.0, ring_steps(r.collective, r.group_size),
                     ring_factor(r.collective, r.group_size) * r.coll_bytes / bw])
    return np.array(rows, dtype=float).reshape(-1, 3)


def fit_prior(A: np.ndarray, t: np.ndarray) -> list[float]:
    """Non-negative c minimising sum(((A c) - t) / t)^2."""
    from scipy.optimize import nnls

    c, _ = nnls(A / t[:, None], np.ones(len(t)))
    return [float(x) for x in c]


def topology_fingerprint() -> str:
    """The NVLink domain of every known part: which link `group_link` gives a group, so the priors' meaning.
    A predictor fitted under other domains is stale."""
    from emulator.core.hardware import GPUS

    return ",".join(f"{k}:{g.nvlink_domain}" for k, g in sorted(GPUS.items()) if g.base is None
                    and g.nvlink_domain is not None)


@dataclass
class CollectivePredictor:
    gpu: str
    priors: dict[str, list[float]] = field(default_factory=dict)  # "collective|level" -> [c0, c1, c2]
    envelope: dict[str, dict] = field(default_factory=dict)  # "collective|level" -> measured range
    booster: object = None
    features: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)

    @classmethod
    def fit(cls, gpu: str, parts: list[tuple[pd.DataFrame, object]], trained_on: str,
            num_rounds: int = NUM_ROUNDS) -> CollectivePredictor:
        """Fit on measurement frames, each with the GPUSpec it was measured on."""
        import xgboost as xgb

        cols = [collective_columns(df) for df, _ in parts]
        A = np.vstack([_design(c, spec) for c, (_, spec) in zip(cols, parts, strict=True)])
        t = np.concatenate([df["duration_s"].to_numpy(float) for df, _ in parts])
        allc = pd.concat(cols, ignore_index=True)
        keys = (allc["collective"] + "|" + allc["level"]).to_numpy()
        self = cls(gpu, info={"trained_on": trained_on, "rows": int(len(t))})
        for key in np.unique(keys):
            m = keys == key
            self.priors[key] = fit_prior(A[m], t[m])
            sub = allc[m]
            self.envelope[key] = {"group_sizes": sorted({int(x) for x in sub["group_size"]}),
                                  "nnodes": sorted({int(x) for x in sub["nnodes"]}),
                                  "bytes": [float(sub["coll_bytes"].min()), float(sub["coll_bytes"].max())],
                                  "bytes_by_group": {str(int(g)): [float(b.min()), float(b.max())]
                                                     for g, b in sub.groupby("group_size")["coll_bytes"]}}
        prior = np.array([A[i] @ self.priors[k] for i, k in enumerate(keys)])
        X = pd.concat([collective_features(df, spec) for df, spec in parts], ignore_index=True)
        X["log_prior"] = np.log10(np.maximum(prior, 1e-9))
        self.features = list(X.columns)
        y = np.log(t / np.maximum(prior, 1e-9))
        self.booster = xgb.train(XGB_PARAMS, xgb.DMatrix(X.values, label=y, feature_names=self.features),
                                 num_boost_round=num_rounds)
        return self

    def _inside(self, key: str, r) -> bool:
        env = self.envelope.get(key)
        if not env:
            return False
        lo, hi = env["bytes"]
        return (r.group_size in env["group_sizes"] and r.nnodes in env["nnodes"]
                and lo / 2 <= r.coll_bytes <= hi * 2)

    def _to_measured_sizes(self, key: str, r) -> float:
        """The row's size brought inside its group size's measured sizes (where the residual is read)."""
        lo, hi = (self.envelope[key].get("bytes_by_group") or {}).get(str(int(r.group_size)),
                                                                       self.envelope[key]["bytes"])
        return min(max(float(r.coll_bytes), lo), hi)

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        """duration_s and source for every row (non-collective rows get the roofline, labelled fallback)."""
        import xgboost as xgb

        spec = get_gpu(self.gpu)
        df = df.reset_index(drop=True)
        n = len(df)
        out = np.full(n, np.nan)
        source = np.array([FALLBACK] * n, dtype=object)
        if n == 0:
            return pd.DataFrame({"duration_s": pd.Series(dtype=float), "source": pd.Series(dtype=object)})
        kinds = df["kind"].astype(str).to_numpy() if "kind" in df.columns else np.array(["collective"] * n)
        is_coll = np.isin(kinds, COLLECTIVE_KINDS)
        if is_coll.any():
            sub = df[is_coll]
            cols = collective_columns(sub)
            A = _design(cols, spec)
            keys = (cols["collective"] + "|" + cols["level"]).to_numpy()
            pred = np.full(len(sub), np.nan)
            learned = np.zeros(len(sub), dtype=bool)
            inside = np.zeros(len(sub), dtype=bool)
            for i, (key, r) in enumerate(zip(keys, cols.itertuples(index=False), strict=True)):
                if key in self.priors:
                    pred[i] = A[i] @ self.priors[key]
                    learned[i] = True
                    inside[i] = self._inside(key, r)
                else:
                    pred[i] = collective_time(r.collective, r.coll_bytes, r.group_size, r.nnodes,
                                              r.gpus_per_node, spec)
            if inside.any() and self.booster is not None:
                edge = cols[inside].copy()
                edge["coll_bytes"] = [self._to_measured_sizes(k, r) for k, r in
                                      zip(keys[inside], edge.itertuples(index=False), strict=True)]
                X = collective_features(sub[inside].assign(coll_bytes=edge["coll_bytes"].to_numpy()), spec)
                A_edge = _design(edge, spec)
                edge_prior = np.array([A_edge[i] @ self.priors[k] for i, k in enumerate(keys[inside])])
                X["log_prior"] = np.log10(np.maximum(edge_prior, 1e-9))
                res = self.booster.predict(xgb.DMatrix(X[self.features].values, feature_names=self.features))
                pred[inside] = pred[inside] * np.exp(np.clip(res, -MAX_LOG_RESIDUAL, MAX_LOG_RESIDUAL))
            idx = np.flatnonzero(is_coll)
            ok = np.isfinite(pred) & (pred > 0)
            out[idx[ok]] = pred[ok]
            source[idx[ok & learned]] = LEARNED
        rest = ~np.isfinite(out) | (out <= 0)
        if rest.any():
            from maya_models.kernels import _with_flops

            out[rest] = roofline_durations(_with_flops(df[rest]), spec)
            source[rest] = FALLBACK
        return pd.DataFrame({"duration_s": out.astype(np.float64), "source": source.astype(str)})

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.booster is not None:
            self.booster.save_model(str(path / "residual.ubj"))
        meta = {"type": "collectives", "gpu": self.gpu, "priors": self.priors, "envelope": self.envelope,
                "features": self.features, "boosted": self.booster is not None,
                "info": {**self.info, "roofline_fingerprint": roofline_fingerprint(),
                         "topology": topology_fingerprint()}}
        (path / "predictor.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
        return path

    @classmethod
    def load(cls, path: Path) -> CollectivePredictor:
        import xgboost as xgb

        path = Path(path)
        meta = json.loads((path / "predictor.json").read_text())
        booster = None
        if meta.get("boosted"):
            booster = xgb.Booster()
            booster.load_model(str(path / "residual.ubj"))
        check_fingerprint(meta.get("info", {}), f"collective predictor for {meta['gpu']}")
        trained = meta.get("info", {}).get("topology")
        if trained != topology_fingerprint():
            import warnings

            warnings.warn(f"collective predictor for {meta['gpu']} was fitted when the parts' NVLink domains were "
                          f"{trained or 'not recorded'}: its alpha-beta priors read other links for some groups; "
                          f"retrain it (python -m maya_models.train)", stacklevel=2)
        return cls(meta["gpu"], meta["priors"], meta["envelope"], booster, meta["features"], meta.get("info", {}))
