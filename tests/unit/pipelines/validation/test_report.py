"""Errors, MAPE, the baselines' arithmetic and the written report, on small hand-checked cases."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from emulator.core.hardware import get_gpu
from emulator.core.roofline import collective_time, kernel_time
from emulator.trace.io import write_rank_trace, write_summary
from emulator.trace.schema import TRACE_SCHEMA
from emulator.trace.summaries import EmulationSummary
from pipelines.validation import baselines, report
from pipelines.validation.metrics import meets, rel_error, summarize
from pipelines.validation.runner import RunResult, _add_timing_run, measured_iteration_s


def test_relative_error_and_summary_by_hand():
    assert rel_error(1.1, 1.0) == pytest.approx(0.1)
    assert rel_error(0.5, 1.0) == pytest.approx(-0.5)
    assert rel_error(None, 1.0) is None and rel_error(float("nan"), 1.0) is None
    with pytest.raises(ValueError, match="positive"):
        rel_error(1.0, 0.0)
    s = summarize([0.1, -0.3, None, 0.05])
    assert s["n"] == 4 and s["scored"] == 3
    assert s["mape"] == pytest.approx(0.15) and s["median_abs"] == pytest.approx(0.1)
    assert s["max_abs"] == pytest.approx(0.3) and s["bias"] == pytest.approx(0.05)
    assert meets(s, "mape", 0.10) is False and meets(s, "median_abs", 0.10) is True
    assert summarize([None])["mape"] is None and meets(summarize([None]), "mape", 0.1) is None


def _row(name, measured, maya, roofline=None, la=None, error=None):
    return report.add_errors({"name": name, "source": "neusight", "gpu": "h100", "world_size": 4, "nnodes": 1,
                              "note": "n", "measured_s": measured, "predicted_s": maya, "roofline_s": roofline,
                              "llm_analysis_s": la, "oom": False, "coverage": {"learned": 0.9}, "error": error})


def test_report_tables_summaries_and_files(tmp_path):
    rows = [_row("a", 0.200, 0.210, 0.100, 0.080), _row("b", 1.000, 0.950, 0.400),
            _row("c", 0.500, None, error="maya emulate exited 1: boom")]
    summary = report.table_summary(rows, report.GPU_TARGET)
    assert summary["maya"]["scored"] == 2 and summary["maya"]["mape"] == pytest.approx(0.05)
    assert summary["roofline"]["mape"] == pytest.approx((0.5 + 0.6) / 2)
    assert summary["llm-analysis"]["scored"] == 1 and summary["target"]["met"] is True
    rep = {"generated_at": "now", "machine": "m", "gpu": {"rows": rows, "summary": summary, "preamble": "p"},
           "cpu": {"skipped": "not here", "rows": []}, "notes": ["a note"]}
    paths = report.write_report(rep, tmp_path)
    md = paths["markdown"].read_text()
    assert "+5.0%" in md and "-5.0%" in md and "**met**" in md  # per-row errors and the verdict
    assert "boom" in md and "Skipped: not here" in md and "a note" in md
    assert paths["gpu_plot"].stat().st_size > 1000 and "gpu.png" in md
    data = json.loads(paths["json"].read_text())
    assert data["gpu"]["summary"]["maya"]["mape"] == pytest.approx(0.05)
    assert not list(tmp_path.glob(".*tmp"))  # atomic writes leave no temporaries


def test_missed_target_is_reported_as_missed(tmp_path):
    rows = [_row("a", 1.0, 1.5), _row("b", 1.0, 1.2)]
    summary = report.table_summary(rows, report.GPU_TARGET)
    assert summary["target"]["met"] is False
    assert "**missed**" in report.markdown_summary(summary)


def _trace(rows: list[dict]) -> pa.Table:
    cols = {f.name: [r.get(f.name) for r in rows] for f in TRACE_SCHEMA}
    return pa.table(cols, schema=TRACE_SCHEMA)


def _base(rank, seq, it, kind, op, **kw):
    return {"rank": rank, "seq": seq, "iteration": it, "kind": kind, "op": op, "stream": 0, **kw}


def test_serial_roofline_sums_the_slowest_rank_of_a_steady_iteration(tmp_path):
    spec = get_gpu("h100")
    gemm = dict(dtypes=["bfloat16", "bfloat16"], flops=2 * 4096**3, bytes=3 * 2 * 4096**2)
    ar = dict(group_ranks=[0, 1], coll_bytes=64 * 2**20)
    for rank, n_gemm in ((0, 1), (1, 2)):  # rank 1 does twice the GEMMs: it sets the pace
        rows = [_base(rank, 0, -1, "kernel", "aten::mm", **gemm)]  # warm-up iteration, ignored
        rows += [_base(rank, 1 + i, 0, "kernel", "aten::mm", **gemm) for i in range(n_gemm)]
        rows += [_base(rank, 9, 0, "kernel", "aten::view"), _base(rank, 10, 0, "collective", "c10d::allreduce_", **ar),
                 _base(rank, 11, 0, "marker", "step")]
        write_rank_trace(tmp_path, rank, _trace(rows))
    write_summary(tmp_path, EmulationSummary.from_json({"gpu": "h100", "nproc_per_node": 2, "world_size": 2}))
    expected = 2 * kernel_time(gemm["flops"], gemm["bytes"], "bfloat16", "gemm", spec) + \
        collective_time("all_reduce", ar["coll_bytes"], 2, 1, 2, spec)
    assert baselines.serial_roofline_s(tmp_path) == pytest.approx(expected)


def test_measured_iteration_time_from_a_profile_trace(tmp_path):
    # iteration -1 is the first step plus set-up (dropped), 0 and 1 are steady, 2 is the tail after the
    # last counted step (not an iteration); rank 1 is 1.5x slower and sets the pace
    for rank, scale in ((0, 1.0), (1, 1.5)):
        rows = []
        for it, (gap, dur) in enumerate([(0.5, 0.5), (0.01, 0.09), (0.02, 0.18), (0.001, 0.0)], start=-1):
            rows += [_base(rank, 2 * it + 2, it, "kernel", "aten::mm", host_gap_s=gap * scale, duration_s=dur * scale),
                     _base(rank, 2 * it + 3, it, "kernel", "aten::add", host_gap_s=0.0, duration_s=0.0)]
        write_rank_trace(tmp_path, rank, _trace(rows))
    write_summary(tmp_path, EmulationSummary.from_json({"gpu": "cpu", "world_size": 2, "iterations_found": 3}))
    assert measured_iteration_s(tmp_path) == pytest.approx((0.15 + 0.3) / 2)


def test_llm_analysis_baseline_is_flops_over_peak():
    pytest.importorskip("llm_analysis")
    model = dict(layers=36, hidden=1280, heads=20, vocab=50257, seq=1024)
    par = dict(tp=1, pp=1, dp=1, micro_batch=4, global_batch=4)
    t = baselines.llm_analysis_s(model, par, "h100", "fp32", False)
    # 3 x forward FLOPs of GPT-2-large at 4 x 1024 tokens (~21.3 TFLOP) over the H100 FP32 peak (66.9 TFLOP/s)
    assert t == pytest.approx(21.29e12 / 66.9e12, rel=0.02)
    t_tp = baselines.llm_analysis_s(model, dict(par, tp=4), "h100", "fp32", False)
    assert t_tp == pytest.approx(t / 4, rel=1e-6)
    with pytest.raises(baselines.BaselineUnavailable, match="no config"):
        baselines.llm_analysis_s(model, par, "cpu", "fp32", False)


def test_host_bound_predictions_are_called_out():
    rows = [_row("a", 0.2, 2.4), _row("b", 1.0, 1.05)]
    rows[0]["breakdown_s"] = {"host": 2.4, "compute": 0.22, "exposed_communication": 0.0, "idle": 2.18}
    rows[1]["breakdown_s"] = {"host": 0.1, "compute": 1.0, "exposed_communication": 0.0, "idle": 0.05}
    text = report.host_bound(rows)
    assert "1 of 2 predictions are host-bound" in text and "1 of them over-predict" in text
    assert "2.400 s / 220.0 ms" in report.markdown_table(rows)
    assert "host-speed range" not in text  # rows stored before predictions carried one
    rows[0]["band_s"] = [1.8, 3.0]  # the 2.4 s prediction's range misses the 0.2 s measurement
    assert "inside the prediction's host-speed range (`iteration_time_band_s`" in report.host_bound(rows)
    assert "for 0 of 1:" in report.host_bound(rows)
    rows[0]["band_s"] = [0.15, 3.0]
    assert "for 1 of 1 (a):" in report.host_bound(rows)


def test_device_time_diagnostic_is_scored_separately():
    row = {**_row("a", 0.2, 2.4), "breakdown_s": {"host": 2.4, "compute": 0.21, "exposed_communication": 0.01}}
    report.add_errors(row)
    assert row["maya_error"] == pytest.approx(11.0) and row["device_error"] == pytest.approx(0.1)
    summary = report.table_summary([row], report.GPU_TARGET)
    assert summary["maya device time (diagnostic)"]["mape"] == pytest.approx(0.1)
    assert summary["target"]["met"] is False  # the target is judged on maya's prediction, not the diagnostic


def test_measured_iteration_time_from_a_timing_only_profile(tmp_path):
    # per rank wall time of each iteration; the slowest rank sets each iteration, the first one is warm-up
    write_summary(tmp_path, EmulationSummary.from_json({"gpu": "cpu", "world_size": 2, "iterations_found": 3,
                             "measured_iterations_s": {"0": [1.0, 0.2, 0.3], "1": [1.1, 0.25, 0.2]}}))
    assert measured_iteration_s(tmp_path) == pytest.approx((0.25 + 0.3) / 2)


def test_two_timing_runs_pool_their_steady_iterations_and_the_report_shows_the_drift(tmp_path):
    # a CPU case timed before its calibration and again after its prediction: the measured time is the median
    # of both runs' steady iterations (each run's first left out), each run's own median stays visible
    before, after = tmp_path / "profile", tmp_path / "profile-after"
    for out, walls in ((before, [2.0, 0.20, 0.22, 0.21]), (after, [2.1, 0.25, 0.24, 0.26])):
        write_summary(out, EmulationSummary.from_json({"gpu": "cpu", "world_size": 1, "iterations_found": 4,
                                                       "measured_iterations_s": {"0": walls}}))
    res = RunResult()
    _add_timing_run(res, before)
    assert res.measured_s == pytest.approx(0.21) and res.measured_runs_s == [pytest.approx(0.21)]
    _add_timing_run(res, after)
    assert res.measured_runs_s == [pytest.approx(0.21), pytest.approx(0.25)]
    assert res.measured_s == pytest.approx((0.22 + 0.24) / 2)  # median of the six steady iterations

    row = {**_row("cpu-x", res.measured_s, 0.2), "source": "cpu", "measured_runs_s": res.measured_runs_s}
    assert "| 230.0 ms (210.0 ms / 250.0 ms) |" in report.markdown_table([row])
    line = report.measurement_drift([row, {**row, "measured_runs_s": [0.2, 0.2]}])
    assert "differ by a median 9.5%, at most 19.0% (2 cases)" in line
    assert report.measurement_drift([_row("gpu-case", 1.0, 1.1)]) == ""  # published rows have no timing runs
