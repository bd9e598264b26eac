"""Estimate: a duration for every trace row, from the published predictors (DESIGN section 3).

Predictors are MLflow pyfunc models in the registry, `models:/maya-kernels-<gpu>@champion` and
`models:/maya-collectives-<gpu>@champion` (names from `emulator.core.settings`). `mlflow` is imported
lazily so the emulator never needs it to emulate. A model loaded once is copied under
`settings.model_cache_dir()` so later predictions work offline.

The model contract (agreed with `maya_models`): `model.predict(df)` where `df` holds trace rows
with columns `kind, op, shapes, dtypes, strides, args, out_shapes, out_dtypes, flops, bytes`
(list columns as JSON strings: MLflow signatures cannot express ragged nested lists) plus, for
collective/p2p rows, `collective, coll_bytes, group_size, nnodes, gpus_per_node`; it returns a
DataFrame with `duration_s` (> 0) and `source` (`learned` | `fallback`). Traces repeat the same
shapes thousands of times, so each distinct signature is predicted once.

`roofline_only=True` skips the registry and times everything with the labelled analytical
fallback (`emulator.core.roofline`): every row's source is then `fallback`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from emulator.collate.job import COMM_KINDS, Job
from emulator.core import settings
from emulator.core.hardware import GPUSpec
from emulator.core.roofline import roofline_durations

SIGNATURE_COLUMNS = ["kind", "op", "shapes", "dtypes", "strides", "args", "out_shapes", "out_dtypes", "flops", "bytes"]
COMM_COLUMNS = ["collective", "coll_bytes", "group_size", "nnodes", "gpus_per_node"]
_JSON_COLUMNS = ("shapes", "dtypes", "strides", "out_shapes", "out_dtypes")
NETWORK_MODEL = "network model from the cluster description (analytical)"


class NoPredictorError(RuntimeError):
    """No registered predictor for the target GPU; the message says how to get one."""


def how_to_get_predictors(gpu: str) -> str:
    return (f"no predictors registered for GPU {gpu!r} in {settings.mlflow_tracking_uri()}.\n"
            f"  - on a node with that part: `make calibrate GPU={gpu}` (measures it, trains and publishes)\n"
            f"  - for a part you cannot measure: `python -m maya_models.train --gpu {gpu} --cross-gpu` "
            "(the cross-GPU model on hardware-spec features)\n"
            "  - or run with `--roofline-only` for the labelled analytical fallback (less accurate)")


@dataclass
class Predictor:
    """One loaded predictor (or the roofline), and how to name it in reports."""

    label: str
    model: object | None  # an mlflow pyfunc model; None = roofline
    spec: GPUSpec

    def predict(self, df: pd.DataFrame) -> pd.DataFrame:
        if self.model is None:
            return pd.DataFrame({"duration_s": roofline_durations(df, self.spec), "source": "fallback"})
        with _QuietMlflow():
            out = self.model.predict(df)
        if not isinstance(out, pd.DataFrame):
            out = pd.DataFrame({"duration_s": np.asarray(out, dtype=float).reshape(-1), "source": "learned"})
        if "duration_s" not in out.columns or len(out) != len(df):
            raise ValueError(f"{self.label}: predict() must return {len(df)} rows with duration_s, got "
                             f"{list(out.columns)} x {len(out)}")
        out = out.reset_index(drop=True)
        d = out["duration_s"].to_numpy(dtype=float)
        bad = ~np.isfinite(d) | (d <= 0)
        src = out["source"].astype(str) if "source" in out.columns else pd.Series(["learned"] * len(out))
        if bad.any():  # a predictor that cannot answer a row: the labelled fallback answers it
            d = d.copy()
            d[bad] = roofline_durations(df.iloc[np.flatnonzero(bad)], self.spec)
            src = src.where(~pd.Series(bad), "fallback")
        return pd.DataFrame({"duration_s": d, "source": src.to_numpy()})


def _mlflow():
    # a progress bar per model download would bury the prediction table
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    uri = settings.mlflow_tracking_uri()
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    return mlflow


def _cached_versions(name: str) -> list[Path]:
    base = settings.model_cache_dir() / name
    if not base.is_dir():
        return []
    vs = [p for p in base.iterdir() if p.name.startswith("v") and p.name[1:].isdigit() and (p / "MLmodel").exists()]
    return sorted(vs, key=lambda p: int(p.name[1:]))


class _QuietMlflow(warnings.catch_warnings):
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


def _load_pyfunc(mlflow, path: str):
    with _QuietMlflow():
        return mlflow.pyfunc.load_model(path)


def load_model(name: str):
    """(pyfunc model, label) for `models:/<name>@champion`, via the local cache; None if there is none."""
    mlflow = _mlflow()
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


def load_predictors(spec: GPUSpec, roofline_only: bool = False) -> tuple[Predictor, Predictor]:
    """(kernel predictor, collective predictor) for `spec`; NoPredictorError if none is registered."""
    if roofline_only:
        label = "roofline (analytical fallback)"
        return Predictor(label, None, spec), Predictor(label, None, spec)
    names = settings.kernel_model_name(spec.key), settings.collective_model_name(spec.key)
    loaded = [load_model(n) for n in names]
    missing = [n for n, m in zip(names, loaded, strict=True) if m is None]
    if missing:
        raise NoPredictorError(f"{', '.join(missing)}: " + how_to_get_predictors(spec.key))
    return tuple(Predictor(label, model, spec) for model, label in loaded)  # type: ignore[return-value]


@dataclass
class Estimates:
    durations: list[np.ndarray]  # per rank, per row (seconds; 0 for rows that launch nothing)
    time_by_source: dict[str, float] = field(default_factory=dict)  # predicted device seconds, all ranks
    kernels: str = ""
    collectives: str = ""

    @property
    def coverage(self) -> dict[str, float]:
        total = sum(self.time_by_source.values()) or 1.0
        return {s: self.time_by_source.get(s, 0.0) / total for s in ("learned", "fallback")}


def _json(v) -> str:
    return json.dumps(v, separators=(",", ":")) if v is not None else "[]"


def signature_frame(table, rows: list[int]) -> pd.DataFrame:
    """Trace rows `rows` of a pyarrow table as the predictor's input frame (list columns as JSON)."""
    import pyarrow as pa

    sub = table.take(pa.array(rows, type=pa.int64()))
    data = {}
    for c in SIGNATURE_COLUMNS:
        vals = sub.column(c).to_pylist() if c in sub.column_names else [None] * len(rows)
        if c in _JSON_COLUMNS:
            vals = [_json(v) for v in vals]
        elif c == "args":
            vals = [v if v else "{}" for v in vals]
        elif c in ("flops", "bytes"):
            vals = [float(v) if v is not None else 0.0 for v in vals]
        data[c] = vals
    return pd.DataFrame(data)


def _predict_unique(pred: Predictor, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Predict each distinct row once; durations and sources aligned with `df`."""
    if df.empty:
        return np.zeros(0), np.array([], dtype=object)
    index: dict[tuple, int] = {}
    codes = np.empty(len(df), dtype=np.int64)
    first = []
    for i, key in enumerate(zip(*(df[c].tolist() for c in df.columns), strict=True)):
        code = index.get(key)
        if code is None:
            code = index[key] = len(first)
            first.append(i)
        codes[i] = code
    out = pred.predict(df.iloc[first].reset_index(drop=True))
    return out["duration_s"].to_numpy(dtype=float)[codes], out["source"].to_numpy(dtype=object)[codes]


def estimate(job: Job, spec: GPUSpec, kernels: Predictor, collectives: Predictor,
             gpus_per_node: int | None = None, learned_internode: bool = False) -> Estimates:
    """Durations for every row of every rank of `job` on `spec`.

    Collectives and p2p whose group spans nodes are timed by the network model of the cluster
    description (`spec`'s NIC bandwidth and latency, labelled fallback) unless `learned_internode`:
    a cross-node measurement describes the network it was taken on, and the public ones come from
    other clusters' networks (the reference A100 rows reach 6-8 GB/s per GPU pair, a quarter of one
    HDR NIC). Use the learned inter-node fit when the predictors were calibrated on this cluster.
    """
    gpn = gpus_per_node or job.nproc_per_node
    by_source: dict[str, float] = {}
    rep_count: dict[int, int] = {}
    for v in job.ranks:
        rep_count[v.rep.rank] = rep_count.get(v.rep.rank, 0) + 1
    # kernels: shared by every rank of a representative
    base: dict[int, np.ndarray] = {}
    frames, owners = [], []
    for r, rep in job.reps.items():
        rows = [i for i, (k, launch) in enumerate(zip(rep.kind, rep.launches, strict=True))
                if launch and k not in COMM_KINDS]
        base[r] = np.zeros(len(rep))
        if rows:
            frames.append(signature_frame(rep.table, rows))
            owners.append((r, rows))
    if frames:
        allk = pd.concat(frames, ignore_index=True)
        d, s = _predict_unique(kernels, allk)
        i = 0
        for r, rows in owners:
            n = len(rows)
            base[r][rows] = d[i:i + n]
            for src in ("learned", "fallback"):
                by_source[src] = by_source.get(src, 0.0) + float(d[i:i + n][s[i:i + n] == src].sum()) * rep_count[r]
            i += n
    # collectives and p2p: depend on where each rank's group sits in the cluster
    comm_sig: dict[int, pd.DataFrame] = {}
    for r, rep in job.reps.items():
        if rep.comm_rows:
            comm_sig[r] = signature_frame(rep.table, rep.comm_rows)
    keys: dict[tuple, int] = {}
    key_rows: list[dict] = []
    per_rank: list[list[int]] = []
    for v in job.ranks:
        rep = v.rep
        ids = []
        for j, row in enumerate(rep.comm_rows):
            if rep.kind[row] == "p2p":
                peer = v.peer.get(row, v.rank)
                size, nn = 2, job.nodes_spanned((v.rank, peer))
            else:
                members = v.group_ranks.get(row) or range(job.world_size)
                size, nn = len(members), job.nodes_spanned(members)
            k = (rep.rank, j, size, nn)
            if k not in keys:
                keys[k] = len(key_rows)
                d = comm_sig[rep.rank].iloc[j].to_dict()
                d.update(collective=rep.collective[row], coll_bytes=int(rep.coll_bytes[row] or 0), group_size=size,
                         nnodes=nn, gpus_per_node=gpn)
                key_rows.append(d)
            ids.append(keys[k])
        per_rank.append(ids)
    # the roofline already is the network model: only a learned predictor is split at the node boundary
    network_apart = not learned_internode and collectives.model is not None
    cd, cs = _predict_comm(key_rows, collectives, Predictor(NETWORK_MODEL, None, spec), network_apart)
    durations = []
    for v, ids in zip(job.ranks, per_rank, strict=True):
        arr = base[v.rep.rank]
        if ids:
            arr = arr.copy()
            arr[v.rep.comm_rows] = cd[ids]
            src = cs[ids]
            for s in ("learned", "fallback"):
                by_source[s] = by_source.get(s, 0.0) + float(cd[ids][src == s].sum())
        durations.append(arr)
    label = collectives.label
    if network_apart and any(d["nnodes"] > 1 for d in key_rows):
        label += f"; between nodes: {NETWORK_MODEL}"
    return Estimates(durations=durations, time_by_source=by_source, kernels=kernels.label, collectives=label)


def _predict_comm(rows: list[dict], collectives: Predictor, network: Predictor,
                  network_apart: bool) -> tuple[np.ndarray, np.ndarray]:
    """Durations and sources of the distinct collective rows: from `collectives`, except those across
    nodes when `network_apart`, which `network` times."""
    d, s = np.zeros(len(rows)), np.empty(len(rows), dtype=object)
    inter = np.array([network_apart and r["nnodes"] > 1 for r in rows], dtype=bool)
    for pred, mask in ((collectives, ~inter), (network, inter)):
        idx = np.flatnonzero(mask)
        if len(idx):
            d[idx], s[idx] = _predict_unique(pred, pd.DataFrame([rows[i] for i in idx]))
    return d, s
