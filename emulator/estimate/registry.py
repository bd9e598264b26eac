"""Learned predictors from the MLflow registry: `models:/maya-kernels-<gpu>@champion` and
`models:/maya-collectives-<gpu>@champion` (names from `emulator.core.settings`).

A model loaded once is copied under `settings.model_cache_dir()` so later predictions work
offline; with the registry unreachable the newest cached copy answers and says so in its label.
A row the model cannot answer (no finite positive time) is timed by the roofline and labelled
`fallback`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from emulator.core import settings
from emulator.core.hardware import GPUSpec
from emulator.core.predictor_io import FALLBACK, LEARNED
from emulator.core.roofline import roofline_durations
from emulator.estimate.base import NoPredictorError, Predictor


def how_to_get_predictors(gpu: str) -> str:
    return (f"no predictors registered for GPU {gpu!r} in {settings.mlflow_tracking_uri()}.\n"
            f"  - on a node with that part: `make calibrate GPU={gpu}` (measures it, trains and publishes)\n"
            f"  - for a part you cannot measure: `python -m maya_models.train --gpu {gpu} --cross-gpu` "
            "(the cross-GPU model on hardware-spec features)\n"
            "  - or run with `--roofline-only` for the labelled analytical fallback (less accurate)")


class RegistryPredictor(Predictor):
    """One registered MLflow pyfunc model."""

    def __init__(self, model, label: str, spec: GPUSpec):
        self.model, self.label, self.spec = model, label, spec
        if self.mode() == "cross-gpu":  # say so wherever the label is shown (the table, prediction.json)
            self.label += f" (cross-GPU model: no measurements of {spec.model_key} of its own)"

    def mode(self) -> str | None:
        """How the model was trained: "own" (this part's measurements), "cross-gpu" (the other parts'), or
        None for a model that does not say."""
        try:
            return self.model.unwrap_python_model().predictor.info.get("mode")
        except AttributeError:
            return None

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        with QuietMlflow():
            out = self.model.predict(df)
        if not isinstance(out, pd.DataFrame):
            out = pd.DataFrame({"duration_s": np.asarray(out, dtype=float).reshape(-1), "source": LEARNED})
        if "duration_s" not in out.columns or len(out) != len(df):
            raise ValueError(f"{self.label}: predict() must return {len(df)} rows with duration_s, got "
                             f"{list(out.columns)} x {len(out)}")
        out = out.reset_index(drop=True)
        d = out["duration_s"].to_numpy(dtype=float)
        bad = ~np.isfinite(d) | (d <= 0)
        src = out["source"].astype(str) if "source" in out.columns else pd.Series([LEARNED] * len(out))
        if bad.any():  # a predictor that cannot answer a row: the labelled fallback answers it
            d = d.copy()
            d[bad] = roofline_durations(df.iloc[np.flatnonzero(bad)], self.spec)
            src = src.where(~pd.Series(bad), FALLBACK)
        adjusted = out["adjustment_s"].to_numpy(dtype=float) if "adjustment_s" in out.columns else np.zeros(len(d))
        return pd.DataFrame({"duration_s": d, "source": src.to_numpy(), "adjustment_s": np.where(bad, 0.0, adjusted)})


    def conditions(self) -> dict:
        """The model's sustained-clock table (maya_models.kernels), or the assumption it makes without one."""
        try:
            info = self.model.unwrap_python_model().predictor.info
        except AttributeError:  # a model of another kind (collectives, a third-party pyfunc)
            return {}
        sustained = info.get("sustained")
        if sustained is None:
            return {}
        if not sustained:
            return {"assumption": f"no sustained-throughput measurement of {self.spec.key}: kernel times are those "
                                  "of the measurements (short runs, mostly at the maximum clock)"}
        return {"sustained": {d: {"ratio": round(v["ratio"], 4), "provenance": v.get("provenance")}
                              for d, v in sustained.items()},
                "assumption": "compute-bound tensor-core kernels run at the sustained clock the measurement shows "
                              "(x ratio), memory-bound ones at DRAM speed"}


class QuietMlflow(warnings.catch_warnings):
    """Drop mlflow's UserWarnings (type-hint advice, input examples) meant for model authors, not users.
    mlflow resets the warning filters inside some calls, so this filters at `showwarning` too."""

    def __enter__(self):
        super().__enter__()
        warnings.simplefilter("ignore", UserWarning)
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if not (issubclass(category, UserWarning) and "mlflow" in str(filename)):
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        return self


def _cached_versions(name: str) -> list[Path]:
    base = settings.model_cache_dir() / name
    if not base.is_dir():
        return []
    vs = [p for p in base.iterdir() if p.name.startswith("v") and p.name[1:].isdigit() and (p / "MLmodel").exists()]
    return sorted(vs, key=lambda p: int(p.name[1:]))


def _load_pyfunc(mlflow, path: str):
    with QuietMlflow():
        # suppress_warnings also skips mlflow's scan of every installed package against the model's pip
        # requirements (the slowest part of a load, about 10 s on a small machine) whose only output is a warning
        return mlflow.pyfunc.load_model(path, suppress_warnings=True)


def load_model(name: str):
    """(pyfunc model, label) for `models:/<name>@champion`, via the local cache; None if there is none."""
    mlflow = settings.configured_mlflow()
    try:
        mv = mlflow.MlflowClient().get_model_version_by_alias(name, settings.CHAMPION_ALIAS)
    except Exception:  # registry unreachable or no such model/alias: use a cached copy if there is one
        cached = _cached_versions(name)
        if not cached:
            return None
        return _load_pyfunc(mlflow, str(cached[-1])), f"{name} {cached[-1].name} (cached copy)"
    local = settings.model_cache_dir() / name / f"v{mv.version}"
    if not (local / "MLmodel").exists():
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=local.parent, prefix=f".v{mv.version}."))
        try:
            path = Path(mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}/{mv.version}",
                                                            dst_path=str(tmp)))
            src = path if (path / "MLmodel").exists() else tmp
            os.replace(src, local)
        except OSError:
            if not (local / "MLmodel").exists():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _load_pyfunc(mlflow, str(local)), f"models:/{name}@{settings.CHAMPION_ALIAS} v{mv.version}"


def predictors_available(spec: GPUSpec) -> str | None:
    """None when `spec` has both predictors (a champion in the registry or a cached copy), else what to do
    about it. Cheap (no model is loaded): `maya predict` asks before it spends minutes emulating."""
    mlflow = settings.configured_mlflow()
    missing = []
    key = spec.model_key  # a variant is timed by its base part's predictors
    for name in (settings.kernel_model_name(key), settings.collective_model_name(key)):
        try:
            mlflow.MlflowClient().get_model_version_by_alias(name, settings.CHAMPION_ALIAS)
        except Exception:  # noqa: BLE001 - unreachable registry or no such model/alias: a cached copy will do
            if not _cached_versions(name):
                missing.append(name)
    return f"{', '.join(missing)}: " + how_to_get_predictors(key) if missing else None


def reference_parts() -> set[str]:
    """The parts with measurements of their own in the committed reference data (the sustained-clock rows,
    which are not trained on, do not count): `maya predict` bootstraps their predictors on first use."""
    import pyarrow.parquet as pq

    parts = set()
    for f in sorted(settings.reference_root().glob("*.parquet")):
        cols = pq.read_schema(f).names
        if "gpu" not in cols:
            continue
        t = pq.read_table(f, columns=["gpu", "timing"] if "timing" in cols else ["gpu"]).to_pandas()
        if "timing" in t.columns:
            t = t[t["timing"] != "sustained"]
        parts |= set(t["gpu"].dropna().unique())
    return parts


def registry_predictors(spec: GPUSpec) -> tuple[RegistryPredictor, RegistryPredictor]:
    """(kernel predictor, collective predictor) for `spec`; NoPredictorError if either is not registered."""
    names = settings.kernel_model_name(spec.key), settings.collective_model_name(spec.key)
    loaded = [load_model(n) for n in names]
    missing = [n for n, m in zip(names, loaded, strict=True) if m is None]
    if missing:
        raise NoPredictorError(f"{', '.join(missing)}: " + how_to_get_predictors(spec.key))
    (km, kl), (cm, cl) = loaded
    return RegistryPredictor(km, kl, spec), RegistryPredictor(cm, cl, spec)
