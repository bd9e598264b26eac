"""The per-layer cost of vTrain's layouts: depth differences over layers added and micro-batches run."""

from __future__ import annotations

import pytest

from pipelines.validation.holdout import load_vtrain
from pipelines.validation.layer_cost import cheapest_pair, layer_costs, main
from tests.unit.pipelines.validation.test_holdout import _fake_shared

# GPUs, global batch, micro batch, hidden, heads, layers, seq, TP, DP, PP, ms
ROWS = ("8,8,1,1024,16,12,1024,8,1,1,496.0\n"    # TP8, 8 micro-batches: 12 -> 16 layers adds 4 x 8 x 5 ms
        "8,8,1,1024,16,16,1024,8,1,1,656.0\n"
        "8,8,1,1024,16,16,1024,8,1,1,999.0\n"    # a repeated layout: its first row counts
        "8,4,1,1024,16,12,1024,8,1,1,248.0\n"    # the same kind with a smaller global batch, at three depths
        "8,4,1,1024,16,16,1024,8,1,1,328.0\n"
        "8,4,1,1024,16,24,1024,8,1,1,488.0\n"
        "8,16,2,1024,16,12,1024,4,1,2,100.0\n"   # pipeline parallel: not a single rank's sequence
        "8,16,2,1024,16,16,1024,4,1,2,120.0\n")


@pytest.fixture
def cases(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_SHARED", str(_fake_shared(tmp_path, ROWS)))
    return load_vtrain("single")


def test_per_layer_cost_is_the_depth_difference_per_layer_and_micro_batch(cases):
    costs = layer_costs(cases)
    assert set(costs) == {(1024, 8, 1)}  # the pipeline-parallel layout is left out
    assert sorted(costs[(1024, 8, 1)]) == pytest.approx([5.0, 5.0, 5.0, 5.0])


def test_the_cheapest_pair_is_the_smallest_batch_at_its_shallowest_and_deepest(cases):
    lo, hi = cheapest_pair(cases, 1024, 8, 1)
    assert (lo.parallel["global_batch"], lo.model["layers"], hi.model["layers"]) == (4, 12, 24)
    assert cheapest_pair(cases, 2048, 8, 1) is None


def test_the_command_prints_the_table_and_refuses_a_malformed_layout_kind(cases, capsys):
    assert main([]) == 0
    assert "1024   8            1      4    5.00" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--predict", "1024:8"])


def test_predict_prints_maya_beside_the_measurement_or_says_why_not(cases, capsys, monkeypatch, tmp_path):
    import re

    import pipelines.validation.layer_cost as layer_cost
    import pipelines.validation.runner as runner

    monkeypatch.setattr(runner, "ensure_predictors", lambda gpu, runs: None)
    asked = []

    def maya(lo, hi, runs):  # stands in for two emulations; the second kind's fails
        asked.append((lo.model["layers"], hi.model["layers"], lo.parallel["global_batch"]))
        if len(asked) > 1:
            raise RuntimeError("maya emulate exited 1")
        return {"iteration": 4.0, "host": 3.0, "compute": 0.5, "communication": 0.5}

    monkeypatch.setattr(layer_cost, "predicted_layer_cost", maya)
    assert main(["--predict", "1024:8:1,1024:8:1,2048:1:8", "--runs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert asked == [(12, 24, 4), (12, 24, 4)]  # the smallest global batch, shallowest against deepest
    assert re.search(r"8 GPUs gb4 L12/L24\s+5\.00\s+4\.00\s+\(3\.00\s+0\.50\s+0\.50\)", out)
    assert "no prediction: maya emulate exited 1" in out
    assert "2048   1            8  no layout of this kind was measured at two depths" in out
