"""HF Accelerate: one ordinary `accelerator.prepare` / `accelerator.backward` script with the FSDP plugin
(FSDP1 and FSDP2) and the DeepSpeed plugin (ZeRO-3), world 2, bf16 mixed precision."""

import pytest

from tests.integration.frameworks.run import emulate, ok, simulate

pytest.importorskip("accelerate")
LAYERS = 4


def _collectives(t):
    c = t[t.kind == "collective"]
    return {op: len(g) for op, g in c.groupby("op")}


@pytest.mark.parametrize("version", ["1", "2"])
def test_fsdp_plugin_shards_per_block(tmp_path, version):
    run = emulate("accelerate_train.py", tmp_path / "out", "--plugin", "fsdp", "--fsdp-version", version, nproc=2)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert "device=cuda:0" in run.log()
    c = _collectives(run.steady())
    assert c["c10d::_allgather_base_"] >= 2 * LAYERS and c["c10d::_reduce_scatter_base_"] >= LAYERS + 1
    assert simulate(run.out)["iteration_time_s"] > 0


def test_deepspeed_plugin_runs_zero3(tmp_path):
    pytest.importorskip("deepspeed")
    run = emulate("accelerate_train.py", tmp_path / "out", "--plugin", "deepspeed", nproc=2)
    assert run.rc == 0 and run.summary["ok"], ok(run)
    t = run.steady()
    c = _collectives(t)
    assert c["c10d::_allgather_base_"] > 0 and c["c10d::_reduce_scatter_base_"] > 0
    # the script's torch AdamW, wrapped by ZeRO-3, steps on the partitions with the foreach kernels
    assert t[t.phase == "optimizer"].op.str.startswith("aten::_foreach_").any()
