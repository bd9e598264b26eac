"""MLflow tracking and the model registry: log training runs, register versions, move the champion.

    python -m maya_models.registry list [--gpu G]
    python -m maya_models.registry promote --gpu G [--kind kernels|collectives] [--version V]
    python -m maya_models.registry rollback --gpu G [--kind kernels|collectives]

Registered models are `maya-kernels-<gpu>` and `maya-collectives-<gpu>` (emulator.core.settings). The
`champion` alias is what the emulator loads. `publish` moves it only when the new version beats the
current champion on the fixed evaluation set (the held-out shape groups, see maya_models.metrics);
each move is appended to the registered model's `maya.champion_history` tag so `rollback` can go back.
The store is `emulator.core.settings.mlflow_tracking_uri()` (SQLite in the warehouse unless
MLFLOW_TRACKING_URI says otherwise); one experiment per GPU (`maya-<gpu>`).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from emulator.core.settings import (
    CHAMPION_ALIAS,
    collective_model_name,
    configured_mlflow,
    kernel_model_name,
    mlflow_artifact_root,
    mlflow_tracking_uri,
)

HISTORY_TAG = "maya.champion_history"
KINDS = ("kernels", "collectives")
PIP_REQUIREMENTS = ["xgboost-cpu>=2.1", "pandas>=2.1", "numpy>=1.26", "scipy", "pyarrow>=15"]


def input_example(kind: str):
    """Two rows as a trace stores them (list columns as lists), for the model's page and its validation."""
    import pandas as pd

    if kind == "kernels":
        return pd.DataFrame([
            {"kind": "kernel", "op": "aten::mm", "shapes": [[4096, 4096], [4096, 4096]],
             "dtypes": ["bfloat16", "bfloat16"], "strides": [[4096, 1], [1, 4096]], "args": "{}"},
            {"kind": "kernel", "op": "aten::add", "shapes": [[4096, 4096], [4096, 4096]],
             "dtypes": ["bfloat16", "bfloat16"], "strides": [[4096, 1], [4096, 1]], "args": "{}"}])
    return pd.DataFrame([
        {"kind": "collective", "op": "c10d::allreduce_", "coll_bytes": 1 << 26, "group_ranks": list(range(8))},
        {"kind": "collective", "op": "c10d::_allgather_base_", "coll_bytes": 1 << 24, "group_ranks": [0, 1]}])


class RegistryError(RuntimeError):
    """A registry operation that cannot be done (no such model, nothing to roll back to...)."""


def model_name(kind: str, gpu: str) -> str:
    if kind not in KINDS:
        raise RegistryError(f"kind must be one of {KINDS}, got {kind!r}")
    return kernel_model_name(gpu) if kind == "kernels" else collective_model_name(gpu)


def client():
    """An MlflowClient on maya's store (`emulator.core.settings.configured_mlflow` sets the URIs)."""
    mlflow = configured_mlflow()
    uri = mlflow_tracking_uri()
    return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)


def experiment_id(gpu: str) -> str:
    """The GPU's experiment; its artifacts go where the tracking server keeps them, or, for a local store,
    under the warehouse (a model registered on a team server must load from anywhere)."""
    c = client()
    name = f"maya-{gpu}"
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    if _remote(mlflow_tracking_uri()):
        return c.create_experiment(name)
    art = Path(mlflow_artifact_root()) / name
    art.mkdir(parents=True, exist_ok=True)
    return c.create_experiment(name, artifact_location=art.resolve().as_uri())


MLFLOW_UI_DEFAULT = "http://127.0.0.1:5000"  # where `make mlflow` serves a local store


def run_url(run_id: str) -> str:
    """Where a person opens the run: the tracking server's page, or for a local store the page `make mlflow`
    serves (MAYA_MLFLOW_UI overrides the address)."""
    uri = mlflow_tracking_uri()
    base = uri if _remote(uri) and uri.startswith("http") else os.environ.get("MAYA_MLFLOW_UI", MLFLOW_UI_DEFAULT)
    try:
        exp = client().get_run(run_id).info.experiment_id
    except Exception:  # the store is not reachable: the run id still names the run
        exp = "0"
    return f"{base.rstrip('/')}/#/experiments/{exp}/runs/{run_id}"


def _remote(uri: str) -> bool:
    return uri.split(":", 1)[0] in ("http", "https", "databricks", "databricks-uc")


def code_paths() -> list[str]:
    """The packages a registered model imports: it carries them, so loading it needs no maya install."""
    import emulator
    import maya_models

    return [str(Path(emulator.__file__).parent), str(Path(maya_models.__file__).parent)]


def log_and_register(kind: str, gpu: str, predictor, *, params: dict, metrics: dict, snapshot: dict,
                     plots: dict | None = None, importances: dict | None = None, score: float | None = None) -> dict:
    """One MLflow run: params, data snapshot, per-family metrics, plots, importances, the pyfunc model,
    registered as a new version of `maya-<kind>-<gpu>`. Returns {run_id, model, version}."""
    import mlflow

    from maya_models.metrics import scatter_png
    from maya_models.pyfunc import UNITS, MayaPredictorModel, model_signature

    client()
    name = model_name(kind, gpu)
    with mlflow.start_run(experiment_id=experiment_id(gpu), run_name=f"{kind}-{gpu}") as run:
        mlflow.set_tags({"maya.kind": kind, "maya.gpu": gpu})
        mlflow.log_params({k: (json.dumps(v) if isinstance(v, dict | list) else v) for k, v in params.items()})
        flat = {f"{fam}.{k}": float(v) for fam, st in metrics.items() for k, v in st.items()
                if isinstance(v, int | float) and v == v}
        if score is not None:
            flat["eval_score"] = float(score)
        mlflow.log_metrics(flat)
        mlflow.log_dict(snapshot, "data_snapshot.json")
        mlflow.log_dict(metrics, "metrics_by_family.json")
        if importances:
            mlflow.log_dict(importances, "feature_importance.json")
        with tempfile.TemporaryDirectory() as tmp:
            for fam, (pred, true) in (plots or {}).items():
                if len(true):
                    p = Path(tmp) / f"pred_vs_measured_{fam}.png"
                    scatter_png(pred, true, f"{gpu} {fam}: held-out shapes", p)
                    mlflow.log_artifact(str(p), "plots")
            pdir = predictor.save(Path(tmp) / "predictor")
            info = mlflow.pyfunc.log_model(name="model", python_model=MayaPredictorModel(),
                                           artifacts={"predictor": str(pdir)}, signature=model_signature(),
                                           registered_model_name=name, pip_requirements=PIP_REQUIREMENTS,
                                           code_paths=code_paths(), input_example=input_example(kind),
                                           metadata={"units": UNITS, "contract": "maya_models.contract",
                                                     "gpu": gpu, "kind": kind})
        version = str(info.registered_model_version)
    c = client()
    if score is not None:
        c.set_model_version_tag(name, version, "maya.eval_score", f"{score:.6g}")
    c.set_model_version_tag(name, version, "maya.run_id", run.info.run_id)
    return {"run_id": run.info.run_id, "model": name, "version": version}


def load_predictor(kind: str, gpu: str, version: str | None = None, alias: str | None = None):
    """The KernelPredictor / CollectivePredictor of one registered version (or alias)."""
    import mlflow.pyfunc

    client()
    name = model_name(kind, gpu)
    uri = f"models:/{name}@{alias}" if alias else f"models:/{name}/{version}"
    return mlflow.pyfunc.load_model(uri).unwrap_python_model().predictor


def champion_version(kind: str, gpu: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(client().get_model_version_by_alias(model_name(kind, gpu), CHAMPION_ALIAS).version)
    except MlflowException:
        return None


def champion_family_errors(gpu: str) -> dict[str, float]:
    """The kernel champion's held-out median APE per op family (its training run's metrics), {} if none."""
    from mlflow.exceptions import MlflowException

    version = champion_version("kernels", gpu)
    if version is None:
        return {}
    c = client()
    try:
        run_id = c.get_model_version(model_name("kernels", gpu), version).run_id
        metrics = c.get_run(run_id).data.metrics
    except MlflowException:
        return {}
    return {k.removesuffix(".median_ape"): float(v) for k, v in metrics.items() if k.endswith(".median_ape")}


def latest_version(kind: str, gpu: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        versions = client().search_model_versions(f"name='{model_name(kind, gpu)}'")
    except MlflowException:
        return None
    return str(max(int(v.version) for v in versions)) if versions else None


def _history(kind: str, gpu: str) -> list[str]:
    rm = client().get_registered_model(model_name(kind, gpu))
    return json.loads(rm.tags.get(HISTORY_TAG, "[]"))


def set_champion(kind: str, gpu: str, version: str) -> None:
    c = client()
    name = model_name(kind, gpu)
    known = [str(v.version) for v in c.search_model_versions(f"name='{name}'")]
    if str(version) not in known:
        raise RegistryError(f"{name} has no version {version}; registered: "
                            + (", ".join(sorted(known, key=int)) or "none (`maya models bootstrap` registers some)"))
    c.set_registered_model_alias(name, CHAMPION_ALIAS, version)
    hist = _history(kind, gpu)
    if not hist or hist[-1] != str(version):
        hist.append(str(version))
    c.set_registered_model_tag(name, HISTORY_TAG, json.dumps(hist))


def rollback(kind: str, gpu: str) -> dict:
    """Move the champion back to the version that held it before the one the alias points at now.

    The alias, not the history tag, says who the champion is: someone may have moved it by hand."""
    name = model_name(kind, gpu)
    current = champion_version(kind, gpu)
    if current is None:
        raise RegistryError(f"{name}: no champion to roll back from")
    hist = _history(kind, gpu)
    if current not in hist:
        raise RegistryError(f"{name}: the champion is v{current}, which the promotion history {hist} does not "
                            "hold (the alias was moved outside maya); promote the version you want with "
                            "`maya models promote --version V`")
    at = len(hist) - 1 - hist[::-1].index(current)
    if at == 0:
        raise RegistryError(f"{name}: v{current} is the first champion; nothing earlier to roll back to")
    hist = hist[:at]
    c = client()
    c.set_registered_model_alias(name, CHAMPION_ALIAS, hist[-1])
    c.set_registered_model_tag(name, HISTORY_TAG, json.dumps(hist))
    return {"model": name, "from": current, "to": hist[-1]}


GATE_METRIC = "mean over op families of the median APE on the fixed evaluation set (lower is better)"


def gate(kind: str, gpu: str, version: str, score_fn) -> dict:
    """Promote `version` if it scores lower (better) than the champion; `score_fn(predictor) -> float`.

    The evidence goes onto the candidate's MLflow run: its score, the champion's, the metric and the
    threshold (a challenger must be strictly better), and the decision."""
    name = model_name(kind, gpu)
    champ = champion_version(kind, gpu)
    new_score = float(score_fn(load_predictor(kind, gpu, version=version)))
    out = {"model": name, "challenger": str(version), "challenger_score": new_score, "champion_before": champ}
    if champ is None:
        set_champion(kind, gpu, version)
        out.update(promoted=True, reason="no champion yet", champion=str(version))
    elif str(champ) == str(version):
        out.update(promoted=False, reason="already champion", champion=champ)
    else:
        old_score = float(score_fn(load_predictor(kind, gpu, version=champ)))
        out["champion_score"] = old_score
        if new_score < old_score:
            set_champion(kind, gpu, version)
            out.update(promoted=True, champion=str(version),
                       reason=f"score {new_score:.3f} < champion's {old_score:.3f}")
        else:
            out.update(promoted=False, champion=champ,
                       reason=f"score {new_score:.3f} does not beat champion's {old_score:.3f}")
    _log_gate(name, version, out)
    return out


def _log_gate(name: str, version: str, out: dict) -> None:
    c = client()
    run_id = c.get_model_version(name, version).run_id
    c.log_metric(run_id, "gate.challenger_score", out["challenger_score"])
    if out.get("champion_score") is not None:
        c.log_metric(run_id, "gate.champion_score", out["champion_score"])
    for key, value in (("gate.metric", GATE_METRIC), ("gate.threshold", "challenger score < champion score"),
                       ("gate.champion_before", str(out.get("champion_before"))),
                       ("gate.promoted", str(out["promoted"])), ("gate.reason", out["reason"])):
        c.set_tag(run_id, key, value)


def list_models(gpu: str | None = None) -> list[dict]:
    c = client()
    out = []
    for rm in _maya_models(c):
        if gpu and not rm.name.endswith(f"-{gpu}"):
            continue
        for found in c.search_model_versions(f"name='{rm.name}'"):
            v = c.get_model_version(rm.name, found.version)  # search results leave aliases out
            out.append({"model": rm.name, "version": str(v.version), "aliases": list(v.aliases or []),
                        "eval_score": v.tags.get("maya.eval_score"), "run_id": v.run_id,
                        "created": v.creation_timestamp})
    return sorted(out, key=lambda r: (r["model"], int(r["version"])))


def _maya_models(c) -> list:
    """Every registered model named maya-*, page by page (a shared server holds more than one page)."""
    found, token = [], None
    while True:
        page = c.search_registered_models(filter_string="name LIKE 'maya-%'", max_results=100, page_token=token)
        found += list(page)
        token = page.token
        if not token:
            return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m maya_models.registry", description="maya's MLflow registry")
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="registered versions, aliases and scores")
    ls.add_argument("--gpu")
    for cmd in ("promote", "rollback"):
        sp = sub.add_parser(cmd)
        sp.add_argument("--gpu", required=True)
        sp.add_argument("--kind", choices=KINDS, default=None, help="default: both")
        if cmd == "promote":
            sp.add_argument("--version", help="force this version (skips the gate); default: gate the latest")
    a = p.parse_args(argv)
    if a.cmd == "list":
        rows = list_models(a.gpu)
        if not rows:
            print("no maya models registered" + (f" for {a.gpu}" if a.gpu else ""))
        for r in rows:
            print(f"{r['model']:<32} v{r['version']:<4} score={r['eval_score'] or '-':<10} "
                  f"{','.join(r['aliases'])}")
        return 0
    kinds = [a.kind] if a.kind else list(KINDS)
    rc = 0
    for kind in kinds:
        try:
            if a.cmd == "rollback":
                r = rollback(kind, a.gpu)
                print(f"{r['model']}: champion v{r['from']} -> v{r['to']}")
            elif a.version:
                set_champion(kind, a.gpu, a.version)
                print(f"{model_name(kind, a.gpu)}: champion -> v{a.version} (forced)")
            else:
                from maya_models.train import publish

                r = publish(a.gpu, kind=kind)
                print(f"{r['model']}: {'promoted' if r['promoted'] else 'kept'} ({r['reason']}); "
                      f"champion v{r['champion']}")
        except RegistryError as e:
            print(e)
            rc = 1
        except Exception as e:  # noqa: BLE001 - the CLI reports every failure as a message
            print(f"{model_name(kind, a.gpu)}: {type(e).__name__}: {e}")
            rc = 1
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
