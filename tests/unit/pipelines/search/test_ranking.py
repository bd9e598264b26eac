"""The search evaluation's scores: the regret of maya's pick, whether the measured best is in its top 3,
Spearman rho, and how far the predicted times are from the measured ones."""

import pytest

from pipelines.search.ranking import scores

MEASURED = {"a": 1.0, "b": 1.1, "c": 1.3, "d": 2.0}


def test_a_pick_that_is_not_the_measured_best_costs_its_measured_excess():
    s = scores({"a": 1.2, "b": 1.0, "c": 1.5, "d": 2.5}, MEASURED)
    assert s["regret"] == pytest.approx(0.1)  # picked b, measured 10% slower than a
    assert s["top3"] == 1.0
    assert s["rho"] == pytest.approx(0.8)  # a and b swapped


def test_prediction_error_is_mean_absolute_and_median_signed_over_predicted_layouts():
    s = scores({"a": 1.1, "b": 0.99, "c": 1.3, "d": None}, MEASURED)  # d: no prediction (OOM)
    assert s["predicted"] == 3
    assert s["mape"] == pytest.approx((0.1 + 0.1 + 0.0) / 3)
    assert s["signed"] == pytest.approx(0.0)  # errors +10%, -10%, 0%
    assert s["regret"] == pytest.approx(0.1)  # b predicted fastest; d never picked


def test_a_constant_baseline_is_scored_by_expectation_over_its_ties():
    s = scores({k: 5.0 for k in MEASURED}, MEASURED)
    assert s["regret"] == pytest.approx((0 + 0.1 + 0.3 + 1.0) / 4)
    assert s["top3"] == pytest.approx(3 / 4)
    assert s["rho"] is None  # no order at all


def test_the_measured_best_outside_the_top_three_scores_zero():
    s = scores({"a": 4.0, "b": 1.0, "c": 2.0, "d": 3.0}, MEASURED)
    assert s["top3"] == 0.0
    assert s["rho"] < 0.5


def test_no_prediction_at_all_leaves_every_score_empty():
    s = scores({}, MEASURED)
    assert s["regret"] is s["top3"] is s["mape"] is s["signed"] is None
