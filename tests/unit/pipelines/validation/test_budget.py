"""The error budget: which family carries a case's error, from predicted and measured per-family time."""

import pyarrow as pa

from pipelines.validation.budget import case_budget, flag, markdown, measured_by_family, measured_by_phase, phase_budget


def _row(error, measured=None):
    return {"name": "c", "gpu": "cpu", "world_size": 2, "predicted_s": 0.10, "maya_error": error,
            "breakdown_s": {"host": 0.02, "idle": 0.01},
            "device_time_by_family": {"gemm": {"device_s": 0.06, "fallback_share": 0.0, "adjusted_share": 0.0},
                                      "norm": {"device_s": 0.01, "fallback_share": 1.0, "adjusted_share": 0.0}},
            "measured_by_family": measured or {}}


def test_measured_time_per_family_is_per_steady_iteration_and_rank():
    t = pa.table({"op": ["aten::mm", "aten::mm", "aten::native_layer_norm", "aten::mm"],
                  "kind": ["kernel"] * 4, "iteration": [0, 1, 1, 2], "duration_s": [1.0, 0.2, 0.1, 0.4]})
    got = measured_by_family({0: t, 1: t}, [1, 2])
    assert got == {"gemm": (0.2 + 0.4) * 2 / 4, "norm": 0.1 * 2 / 4}


def test_a_case_far_off_is_flagged_with_the_family_that_carries_the_error():
    row = _row(-0.40, measured={"gemm": 0.12, "norm": 0.011})
    lines = case_budget(row, {"gemm": 3.0, "norm": 9.0})
    gemm = next(ln for ln in lines if ln["family"] == "gemm")
    assert gemm["error"] == (0.06 - 0.12) / 0.12 and gemm["heldout_median_ape"] == 3.0
    why = flag(row, lines)
    assert why.startswith("-40%") and why.index("gemm") < why.index("norm")
    assert flag(_row(0.05), case_budget(_row(0.05), {})) is None  # within bounds: no flag
    assert "**flagged**" in markdown([row], {"cpu": {"gemm": 3.0}})


def test_without_ground_truth_the_flag_names_large_uncertain_families():
    row = _row(0.30)
    why = flag(row, case_budget(row, {"gemm": 20.0, "norm": 1.0}))
    assert "gemm 60% of the step, held-out error 20.0%" in why
    # an unrounded error reads as one decimal; a family without one says so instead of "-%"
    why = flag(row, case_budget(row, {"gemm": 23.38745457613541}))
    assert "held-out error 23.4%," in why and "norm 10% of the step, no held-out error, fallback 100%" in why


def test_measured_time_per_phase_is_per_steady_iteration_and_rank():
    # a gloo collective's row is its call, not its transfer: no pass's compute
    t = pa.table({"op": ["aten::mm", "aten::mm", "aten::mm", "aten::add_", "c10d::allreduce_"],
                  "kind": ["kernel"] * 4 + ["collective"], "phase": ["forward", "forward", "backward", "optimizer",
                                                                    "backward"],
                  "iteration": [0, 1, 1, 1, 1], "duration_s": [1.0, 0.2, 0.4, 0.1, 0.3]})
    assert measured_by_phase({0: t}, [1]) == {"forward": 0.2, "backward": 0.4, "optimizer": 0.1}
    assert measured_by_family({0: t}, [1])["collective"] == 0.3


def test_the_budget_says_which_pass_carries_the_error_where_the_step_is_measured_by_pass():
    row = _row(-0.30)
    row["device_time_by_phase"] = {"backward": {"device_s": 0.05}, "forward": {"device_s": 0.03}}
    row["measured_by_phase"] = {"forward": 0.03, "backward": 0.10}
    lines = phase_budget(row)
    assert [ln["phase"] for ln in lines] == ["backward", "forward"]
    assert lines[0]["error"] == -0.5 and lines[1]["error"] == 0.0 and lines[0]["share"] == 0.5
    md = markdown([row], {})
    assert "| backward | 50.00 ms | 50% | 100.00 ms | -50% |" in md
    # a prediction without a measured split still shows where its device time goes
    row["measured_by_phase"] = {}
    assert "| forward | 30.00 ms | 30% | - | - |" in markdown([row], {})
