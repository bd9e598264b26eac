"""The figures `make bench` prints about repeatability: where a spread between runs comes from."""

import pytest

from emulator.bench import __main__ as bench_main
from emulator.bench.machine_speed import window_spread
from emulator.bench.repeatability import band_cover, host_by_site, moved_most


def _trace(gaps_by_iteration: list[list[float]]) -> dict:
    ops = ["aten::mm", "aten::add", "aten::_foreach_norm"]
    phases = ["forward", "backward", "optimizer"]
    # the warm-up step creates the optimizer's state: an op sequence of its own
    cols: dict[str, list] = {"iteration": [0], "op": ["aten::zeros_like"], "phase": ["optimizer"],
                             "host_gap_s": [5e-3]}
    for it, gaps in enumerate(gaps_by_iteration):
        for op, phase, gap in zip(ops, phases, gaps, strict=True):
            cols["iteration"].append(it)
            cols["op"].append(op)
            cols["phase"].append(phase)
            cols["host_gap_s"].append(gap)
    return cols


def test_a_sites_steady_host_time_is_the_median_of_its_position_over_the_repeated_iterations():
    # iteration 0 is the warm-up; one slow sample at iteration 2 must not move the median of 1..3
    trace = _trace([[9e-3, 9e-3, 9e-3], [10e-6, 20e-6, 300e-6], [10e-6, 90e-6, 300e-6], [10e-6, 20e-6, 300e-6]])
    sites = host_by_site(trace)
    assert sites[("aten::mm", "forward")] == pytest.approx(10e-6)
    assert sites[("aten::add", "backward")] == pytest.approx(20e-6)
    assert sites[("aten::_foreach_norm", "optimizer")] == pytest.approx(300e-6)


def test_the_sites_that_moved_most_are_named_with_their_share_of_the_change():
    fast = {("aten::mm", "forward"): 100e-6, ("aten::_foreach_norm", "optimizer"): 800e-6,
            ("aten::add", "backward"): 50e-6}
    slow = {("aten::mm", "forward"): 110e-6, ("aten::_foreach_norm", "optimizer"): 1190e-6,
            ("aten::add", "backward"): 50e-6}
    named, share = moved_most(fast, slow, top=1)
    assert named == ["aten::_foreach_norm (optimizer) +390 us"]
    assert share == pytest.approx(390 / 400)


def test_nothing_moved_has_no_share():
    same = {("aten::mm", "forward"): 1e-4}
    assert moved_most(same, dict(same))[1] is None


def test_window_spread_is_the_spread_of_the_window_medians_not_of_single_samples():
    samples = [1.0] * 10 + [1.0] * 9 + [50.0] + [1.5] * 10  # one spike in the second window
    medians, spread = window_spread(samples, windows=3)
    assert medians == [1.0, 1.0, 1.5]
    assert spread == pytest.approx(0.5)


def test_a_benchmark_without_a_target_does_not_fail_the_run_but_an_error_does(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_main, "BENCHMARKS", {"context": lambda out: {"figure": 1.0},
                                                   "broken": lambda out: 1 / 0})
    assert bench_main.main(["--only", "context", "--out", str(tmp_path)]) == 0
    assert bench_main.main(["--only", "broken", "--out", str(tmp_path)]) == 1


def test_the_bench_counts_the_runs_whose_host_speed_range_holds_the_runs_median():
    times = [10e-3, 12e-3, 11e-3, 15e-3, 11.5e-3]  # median 11.5 ms
    bands = [[9e-3, 11e-3], [10e-3, 13e-3], [9e-3, 12e-3], [12e-3, 16e-3], [10e-3, 13e-3]]
    got = band_cover(times, bands)
    assert got["bands_hold_median"] == "3 of 5" and got["bands_ms"][0] == [9.0, 11.0]
    assert band_cover(times, [None] * 5) == {}  # no run host-bound: nothing to say
