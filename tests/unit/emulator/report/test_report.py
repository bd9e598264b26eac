"""Reports: prediction.json keys (a contract), the Perfetto timeline, and bad news first on the terminal."""

import json

from rich.console import Console

from emulator.bench.synthetic import ddp_rank, write_job
from emulator.cli import simulate_command
from emulator.pipeline import predict_from_trace
from emulator.report.prediction import CONTRACT_KEYS


def _out(tmp_path, world=4, **summary):
    return write_job(tmp_path / "out", {r: ddp_rank(r, world).table() for r in range(world)}, **summary)


def test_prediction_json_has_every_contract_key_with_sane_values(tmp_path):
    out = _out(tmp_path)
    pred = predict_from_trace(out, roofline_only=True)
    on_disk = json.loads((out / "prediction.json").read_text())
    missing = [k for k in CONTRACT_KEYS if k not in on_disk]
    assert not missing
    assert set(on_disk["breakdown_s"]) == {"compute", "communication", "exposed_communication", "host", "idle"}
    assert set(on_disk["estimator"]["coverage"]) == {"learned", "fallback"}
    assert on_disk["estimator"]["coverage"]["fallback"] == 1.0
    assert pred.iteration_time_s > 0 and 0 < pred.mfu < 1
    assert len(pred.peak_memory_bytes_per_rank) == 4 and pred.oom is False
    # 8 sequences x 1024 ids per rank fed to the embedding, 4 ranks
    assert pred.tokens_per_iteration == 4 * 8192
    assert pred.tokens_per_s == pred.tokens_per_iteration / pred.iteration_time_s
    assert pred.cost_per_iteration_usd == pred.iteration_time_s * 4 * 3.0 / 3600
    flag = predict_from_trace(out, roofline_only=True, tokens_per_iteration=1000, price_per_gpu_hour=1.0)
    assert flag.tokens_per_iteration == 1000 and flag.price_per_gpu_hour == 1.0


def test_timeline_has_a_process_per_rank_a_thread_per_stream_and_flows(tmp_path):
    out = _out(tmp_path)
    predict_from_trace(out, roofline_only=True)
    tl = json.loads((out / "timeline.json").read_text())
    ev = tl["traceEvents"]
    procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {0, 1, 2, 3}
    threads = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert (0, "stream 0") in threads and (0, "comm 0") in threads  # async all-reduces on their own stream
    xs = [e for e in ev if e["ph"] == "X"]
    assert xs and all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert starts and starts.keys() == ends.keys()
    assert all(starts[i]["pid"] != ends[i]["pid"] for i in starts)


def test_oom_is_said_first(tmp_path):
    out = _out(tmp_path, oom=True, oom_ranks=[2], ok=False)
    c = Console(record=True, width=120)
    pred = simulate_command(out, roofline_only=True, console=c)
    text = c.export_text()
    assert pred.oom is True and pred.oom_ranks == [2]
    first = next(line for line in text.splitlines() if line.strip())
    assert "OUT OF MEMORY" in text.split("maya prediction")[0] and "rank(s) [2]" in text
    assert "maya" in first or "OUT OF MEMORY" in first


def test_retargeting_to_a_smaller_gpu_reports_oom(tmp_path):
    gib = 2**30
    out = _out(tmp_path, peak_allocated_bytes={str(r): 28 * gib for r in range(4)},
               peak_reserved_bytes={str(r): 30 * gib for r in range(4)})
    assert predict_from_trace(out, roofline_only=True).oom is False
    small = predict_from_trace(out, gpu="l4", roofline_only=True)
    assert small.oom is True and "exceeds the target's" in small.oom_reason
