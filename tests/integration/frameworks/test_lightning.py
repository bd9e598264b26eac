"""Lightning: `Trainer(strategy=FSDPStrategy(...), precision="bf16-mixed")` on a LightningModule, world 2."""

import pytest

from tests.integration.frameworks.run import emulate, ok, simulate

pytest.importorskip("lightning")
LAYERS = 4


def test_trainer_with_fsdp_strategy(tmp_path):
    run = emulate("lightning_fsdp.py", tmp_path / "out", nproc=2)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert "trained 3 steps on cuda:0" in run.log()
    assert run.summary["iterations_found"] == 3
    t = run.steady()
    c = t[t.kind == "collective"]
    assert (c.op == "c10d::_allgather_base_").sum() == 2 * LAYERS + 1
    assert (c.op == "c10d::_reduce_scatter_base_").sum() == LAYERS + 1
    k = t[t.kind == "kernel"]
    mm = k[k.op == "aten::mm"]
    assert len(mm) and all(list(d) == ["bfloat16", "bfloat16"] for d in mm["dtypes"])  # bf16-mixed
    assert simulate(run.out)["iteration_time_s"] > 0
