"""The runner drives the `maya` CLI per case: results are read back, failures recorded, runs cached."""

from __future__ import annotations

import sys
import textwrap

import pytest

from pipelines.validation import runner
from pipelines.validation.holdout import Case

# A stand-in for `python -m emulator.cli`: `emulate` writes a one-rank trace and summary,
# `simulate` writes prediction.json; it counts its calls so caching can be checked.
FAKE_CLI = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    import pyarrow as pa
    from emulator.trace.io import write_rank_trace, write_summary, write_json
    from emulator.trace.schema import TRACE_SCHEMA
    from emulator.trace.summaries import EmulationSummary
    calls = Path(sys.argv[1]); calls.write_text(calls.read_text() + sys.argv[2] + "\\n")
    cmd, args = sys.argv[2], sys.argv[3:]
    if cmd == "emulate":
        out = Path(args[args.index("--out") + 1])
        rows = [dict(rank=0, seq=i, iteration=it, kind="kernel", op="aten::mm", stream=0,
                     dtypes=["bfloat16", "bfloat16"], flops=2e12, bytes=1e6) for i, it in enumerate((-1, 0))]
        table = pa.table({f.name: [r.get(f.name) for r in rows] for f in TRACE_SCHEMA}, schema=TRACE_SCHEMA)
        write_rank_trace(out, 0, table)
        write_summary(out, EmulationSummary(ok=True, gpu="h100", world_size=1, nproc_per_node=1, nnodes=1))
    elif cmd == "simulate" and os.environ.get("FAKE_HANG"):
        write_json(Path(args[0]) / "prediction.json", {"iteration_time_s": None, "hang": {"issues": ["all_reduce #0"]}})
    elif cmd == "simulate":
        write_json(Path(args[0]) / "prediction.json",
                   {"iteration_time_s": 0.55, "oom": False, "estimator": {"coverage": {"learned": 0.8}}})
""")


def _case(name="neusight-x") -> Case:
    return Case(name=name, source="neusight", gpu="h100", world_size=1, nproc_per_node=1, nnodes=1,
                measured_s=0.5, args=["--layers", "1"])


@pytest.fixture
def fake_cli(tmp_path, monkeypatch):
    script = tmp_path / "fake_cli.py"
    script.write_text(FAKE_CLI)
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    monkeypatch.setattr(runner, "MAYA", [sys.executable, str(script), str(calls)])
    return calls


def test_a_case_is_emulated_simulated_and_cached(tmp_path, fake_cli):
    res = runner.run_gpu_case(_case(), tmp_path / "runs")
    assert res.error is None, res.error
    assert res.predicted_s == pytest.approx(0.55) and res.coverage == {"learned": 0.8}
    assert res.roofline_s is not None and res.roofline_s > 0  # the roofline baseline of the same trace
    assert fake_cli.read_text().split() == ["emulate", "simulate"]
    again = runner.run_gpu_case(_case(), tmp_path / "runs")  # cached: no new CLI calls
    assert again.predicted_s == pytest.approx(0.55) and fake_cli.read_text().split() == ["emulate", "simulate"]
    runner.run_gpu_case(_case(), tmp_path / "runs", fresh=True)
    assert fake_cli.read_text().split().count("emulate") == 2


def test_another_iteration_count_is_emulated_again_not_read_from_the_cache(tmp_path, fake_cli):
    runner.run_gpu_case(_case(), tmp_path / "runs")
    other = runner.GPU_ITERATIONS + 2  # `--gpu-iterations N`: other steady iterations, another run
    runner.run_gpu_case(_case(), tmp_path / "runs", iterations=other)
    assert fake_cli.read_text().split().count("emulate") == 2
    runner.run_gpu_case(_case(), tmp_path / "runs", iterations=other)
    assert fake_cli.read_text().split().count("emulate") == 2


def test_a_failing_emulation_is_recorded_not_raised(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "MAYA", [sys.executable, "-c", "import sys; print('no such op: aten::boom'); "
                                                               "sys.exit(2)"])
    res = runner.run_gpu_case(_case("vtrain-fail"), tmp_path / "runs")
    assert res.predicted_s is None
    assert "exited 2" in res.error and "aten::boom" in res.error
    assert (tmp_path / "runs" / "vtrain-fail" / "result.json").exists()


def test_a_hanging_command_is_stopped_at_the_timeout(tmp_path):
    log = tmp_path / "log.txt"
    rc = runner._run([sys.executable, "-c", "import time; time.sleep(60)"], log, timeout_s=1)
    assert rc == 124 and "timed out" in log.read_text()


def test_a_predicted_hang_is_an_error_row_and_the_emulation_is_reused(tmp_path, fake_cli, monkeypatch):
    monkeypatch.setenv("FAKE_HANG", "1")
    res = runner.run_gpu_case(_case(), tmp_path / "runs")
    assert res.predicted_s is None and "hang" in res.error and "all_reduce #0" in res.error
    monkeypatch.delenv("FAKE_HANG")
    res = runner.run_gpu_case(_case(), tmp_path / "runs")  # the failed result is not reused ...
    assert res.predicted_s == pytest.approx(0.55)
    assert fake_cli.read_text().split() == ["emulate", "simulate", "simulate"]  # ... but the emulation is


def test_cases_are_emulated_with_rank_deduplication(tmp_path, fake_cli):
    """Every case goes through the launcher's deduplication: fewer ranks share this machine's cores, so
    their host time is less inflated by each other (8 ranks side by side on 2 cores made a rank's
    host time 2.8x what it is with 2 at a time)."""
    runner.run_gpu_case(_case(), tmp_path / "runs")
    log = (tmp_path / "runs" / _case().name / "maya.log").read_text()
    assert "emulate" in log and "--no-dedup" not in log and "--jobs" not in log
