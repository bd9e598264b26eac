"""Estimation through the MLflow registry: learned durations, coverage, offline cache, no-model message.

The predictor here is a tiny pyfunc model registered in a temporary MLflow store by the test
(a fixture standing in for `maya_models`' XGBoost predictors, which honour the same contract).
"""

import warnings

import pandas as pd
import pytest

from emulator.bench.synthetic import ddp_rank
from emulator.collate.job import collate_tables
from emulator.core.hardware import get_gpu
from emulator.estimate import NoPredictorError, RooflinePredictor, estimate, load_predictors
from emulator.estimate.registry import RegistryPredictor
from emulator.trace.summaries import EmulationSummary

H100 = get_gpu("h100")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # mlflow's advice to model authors


def _job(world=2):
    return collate_tables({r: ddp_rank(r, world, iterations=2).table() for r in range(world)},
                          EmulationSummary(world_size=world, nnodes=1, nproc_per_node=world, gpu="h100"))


class _GemmOnly:
    """Learned for GEMMs (1 ms each), fallback for everything else; counts the rows it is asked about."""

    def __init__(self):
        self.rows = 0

    def predict(self, df):
        self.rows += len(df)
        gemm = df["op"].eq("aten::mm")
        return pd.DataFrame({"duration_s": [1e-3 if g else 1e-5 for g in gemm],
                             "source": ["learned" if g else "fallback" for g in gemm]})


def test_each_distinct_signature_is_predicted_once_and_coverage_is_by_time():
    job = _job()
    model = _GemmOnly()
    k = RegistryPredictor(model, "test kernels", H100)
    c = RooflinePredictor(H100)
    est = estimate(job, H100, k, c)
    rep = job.ranks[0].rep
    n_kernels = sum(1 for i, kind in enumerate(rep.kind) if kind == "kernel" and rep.launches[i])
    assert 0 < model.rows < n_kernels / 4  # 2 ranks x 2 iterations x repeated layers -> a few signatures
    mm_rows = [i for i, op in enumerate(rep.op) if op == "aten::mm"]
    assert all(est.durations[0][i] == 1e-3 for i in mm_rows)
    cov = est.coverage
    assert cov["learned"] > 0.5 and cov["learned"] + cov["fallback"] == pytest.approx(1.0)


class _FlatCollectives:
    """A learned collective predictor that answers 1 s for every row."""

    def predict(self, df):
        return pd.DataFrame({"duration_s": [1.0] * len(df), "source": ["learned"] * len(df)})


def test_collectives_across_nodes_follow_the_cluster_network_not_a_learned_fit_of_another_network(tmp_path):
    """A 16-rank DDP job on 2 nodes of 8: its all-reduces span both nodes, so the network model of the
    cluster description times them (and halving the NIC bandwidth nearly doubles them); the same job
    on one 16-GPU node is learned. `learned_internode` (predictors calibrated on this cluster) opts in."""
    from emulator.core.hardware import with_overrides

    tables = {r: ddp_rank(r, 16, iterations=1).table() for r in range(16)}
    two_nodes = collate_tables(tables, EmulationSummary(world_size=16, nnodes=2, nproc_per_node=8, gpu="h100"))
    one_node = collate_tables(tables, EmulationSummary(world_size=16, nnodes=1, nproc_per_node=16, gpu="h100"))
    k, c = RooflinePredictor(H100), RegistryPredictor(_FlatCollectives(), "flat learned", H100)
    rep = two_nodes.ranks[0].rep
    comm = rep.comm_rows
    big = max(comm, key=lambda i: rep.coll_bytes[i])

    est = estimate(two_nodes, H100, k, c, 8)
    assert 0 < est.durations[0][big] < 0.5
    assert "between nodes: network model from the cluster description" in est.collectives
    slow_net = with_overrides(H100, internode_bandwidth=H100.internode_bandwidth / 2)
    slower = estimate(two_nodes, slow_net, k, RegistryPredictor(_FlatCollectives(), "flat learned", slow_net), 8)
    assert slower.durations[0][big] == pytest.approx(2 * est.durations[0][big], rel=0.1)

    opted_in = estimate(two_nodes, H100, k, c, 8, learned_internode=True)
    assert all(opted_in.durations[0][i] == 1.0 for i in comm) and opted_in.collectives == "flat learned"
    inside = estimate(one_node, H100, k, c, 16)
    assert all(inside.durations[0][i] == 1.0 for i in comm) and inside.collectives == "flat learned"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    mlflow = pytest.importorskip("mlflow")
    root = tmp_path_factory.mktemp("warehouse")
    env = pytest.MonkeyPatch()
    env.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # file store: SQLite migrations would add ~10 s
    env.setenv("MAYA_WAREHOUSE", str(root))
    env.setenv("MLFLOW_TRACKING_URI", (root / "mlruns").as_uri())
    env.setenv("MAYA_MODEL_CACHE", str(root / "cache"))
    mlflow.set_tracking_uri((root / "mlruns").as_uri())
    mlflow.set_registry_uri((root / "mlruns").as_uri())

    with warnings.catch_warnings():  # mlflow nags about type hints at class creation
        warnings.simplefilter("ignore")

        class Flat(mlflow.pyfunc.PythonModel):
            def predict(self, context, model_input, params=None):
                import pandas as pd

                n = len(model_input)
                return pd.DataFrame({"duration_s": [2e-5] * n, "source": ["learned"] * n})

    client = mlflow.MlflowClient()
    for name in ("maya-kernels-h100", "maya-collectives-h100"):
        with mlflow.start_run():
            with warnings.catch_warnings():  # mlflow nags about type hints and input examples
                warnings.simplefilter("ignore")
                info = mlflow.pyfunc.log_model(name="model", python_model=Flat(), registered_model_name=name,
                                               pip_requirements=["mlflow", "pandas"])
        client.set_registered_model_alias(name, "champion", info.registered_model_version)
    yield root
    env.undo()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_registered_champions_are_loaded_cached_and_used(registry, monkeypatch):
    k, c = load_predictors(H100)
    assert k.label == "models:/maya-kernels-h100@champion v1"
    est = estimate(_job(), H100, k, c)
    assert est.coverage["learned"] == pytest.approx(1.0)
    assert (registry / "cache" / "maya-kernels-h100" / "v1" / "MLmodel").exists()
    # offline: the registry is gone, the cached copy answers
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9/unreachable")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    k2, _ = load_predictors(H100)
    assert "cached copy" in k2.label


def test_no_predictor_for_the_gpu_says_how_to_get_one(registry):
    with pytest.raises(NoPredictorError) as e:
        load_predictors(get_gpu("l40s"))
    msg = str(e.value)
    assert "maya-kernels-l40s" in msg and "make calibrate GPU=l40s" in msg
    assert "python -m maya_models.train --gpu l40s --cross-gpu" in msg and "--roofline-only" in msg


def test_a_best_guess_row_of_an_unsupported_op_is_timed_by_the_roofline_not_a_learned_model():
    from emulator.bench.synthetic import TraceBuilder
    from emulator.estimate.base import Predictor

    class Learned(Predictor):
        label, spec = "learned everywhere", H100

        def predict(self, df):
            return pd.DataFrame({"duration_s": [1.0] * len(df), "source": ["learned"] * len(df)})

    b = TraceBuilder(0)
    b.mm(64, 64, 64)
    b.kernel("maya_test::no_fake_kernel", [[64, 64]], ["float32"], args={"unsupported": True})
    job = collate_tables({0: b.table()}, EmulationSummary(world_size=1, nnodes=1, nproc_per_node=1, gpu="h100"))
    est = estimate(job, H100, Learned(), RooflinePredictor(H100))
    assert est.durations[0][0] == 1.0
    assert 0 < est.durations[0][1] < 1e-3


def test_the_device_time_splits_by_phase_of_the_step_as_it_does_by_family():
    """The GEMM-only predictor times the forward's, the backward's and the optimizer's rows alike: every phase
    is there, the backward (two gradient GEMMs per forward one) is the largest, and the phases add up to the
    compute families' total (each row counted once, fallback shares kept; DDP's all-reduces are not a pass's)."""
    job = _job()
    est = estimate(job, H100, RegistryPredictor(_GemmOnly(), "test kernels", H100), RooflinePredictor(H100))
    phases, families = est.phase_budget([1], 2), est.family_budget([1], 2)
    assert {"forward", "backward", "optimizer"} <= set(phases)
    assert phases["backward"]["device_s"] > phases["forward"]["device_s"] > phases["optimizer"]["device_s"]
    assert families["collective"]["device_s"] > 0
    compute = sum(f["device_s"] for fam, f in families.items() if fam not in ("collective", "p2p"))
    assert sum(p["device_s"] for p in phases.values()) == pytest.approx(compute)
    assert phases["optimizer"]["fallback_share"] > phases["backward"]["fallback_share"]  # no GEMM in the optimizer
