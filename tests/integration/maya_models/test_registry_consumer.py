"""A tool that is not maya loads the champions from the registry and predicts the rows of a trace.

The consumer runs in a virtualenv of its own whose only packages are the main environment's third-party
ones (mlflow, xgboost, pandas...): maya's packages are not importable there, so the models must carry
their code (`code_paths`). It reads `OUT/trace` with pandas exactly as stored and passes the node
layout as a model parameter: the all-reduce times must match the public nccl-tests measurements the
predictor was trained on (the defect was a flat 6.7 us for every size when group columns were missing).
"""

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from emulator.bench.synthetic import TraceBuilder, write_job
from maya_models.reference import load_reference

CONSUMER = '''
import json, sys
import pandas as pd
try:
    import maya_models  # noqa: F401
    sys.exit("maya_models is importable here: the test would prove nothing")
except ImportError:
    pass
import mlflow
rows = pd.read_parquet(sys.argv[1])
out = {}
for kind in ("kernels", "collectives"):
    model = mlflow.pyfunc.load_model(f"models:/maya-{kind}-h100@champion")
    got = model.predict(rows, params={"gpus_per_node": 8})
    out[kind] = {"duration_s": got["duration_s"].tolist(), "source": got["source"].tolist()}
try:
    model.predict(rows.drop(columns=["coll_bytes"]))
    out["refused"] = None
except Exception as e:  # noqa: BLE001
    out["refused"] = str(e)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("consumer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAYA_WAREHOUSE", str(root / "warehouse"))
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        from maya_models.train import publish, train_collective_predictor, train_kernel_predictor

        gemm = load_reference(["aiconfigurator_gemm"], gpu="h100")
        nccl = load_reference(["aiconfigurator_nccl"], gpu="h100")
        data = pd.concat([gemm[gemm["op"] == "aten::mm"].sample(600, random_state=0), nccl], ignore_index=True)
        train_kernel_predictor("h100", data=data, num_rounds=10)
        publish("h100", kind="kernels", data=data)
        train_collective_predictor("h100", data=data)
        publish("h100", kind="collectives", data=data)
        yield root, nccl


def _bare_venv(where: Path) -> Path:
    """A virtualenv that sees the main environment's site-packages but none of its .pth files (maya's
    editable install is one), so maya's packages are absent."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = next((where / "lib").glob("python3*/site-packages"))
    (site / "main_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where / "bin" / "python"


def test_champions_predict_trace_rows_in_an_environment_without_maya(registry, tmp_path):
    root, nccl = registry
    ar = nccl[nccl["op"] == "c10d::allreduce_"]
    ar = ar[ar["group_size"] == 8].sort_values("coll_bytes")
    b = TraceBuilder(0)
    b.mm(4096, 4096, 4096)
    for nbytes in ar["coll_bytes"]:
        b.collective("c10d::allreduce_", "0", list(range(8)), int(nbytes))
    out = write_job(tmp_path / "out", {0: b.table()})
    python = _bare_venv(tmp_path / "venv")
    env = {"MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run([str(python), "-c", CONSUMER, str(out / "trace")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    kernels, colls = got["kernels"], got["collectives"]
    assert kernels["source"][0] == "learned" and 1e-4 < kernels["duration_s"][0] < 1e-2  # a 4096^3 bf16 GEMM
    predicted = np.array(colls["duration_s"][1:])
    measured = ar["duration_s"].to_numpy()
    assert colls["source"][1:] == ["learned"] * len(measured)
    ape = np.abs(predicted / measured - 1)
    assert np.median(ape) < 0.15 and predicted[-1] > 100 * predicted[0]  # sizes are seen, not one flat time
    assert "coll_bytes" in got["refused"]  # a model asked to predict rows it cannot interpret names the column
