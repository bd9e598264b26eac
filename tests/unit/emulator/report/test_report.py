"""Reports: prediction.json keys (a contract), the Perfetto timeline, and bad news first on the terminal."""

import json

import pytest
from rich.console import Console

from emulator.bench.synthetic import TraceBuilder, ddp_rank, host_bound_tables, write_job
from emulator.cli import simulate_command
from emulator.pipeline import predict_from_trace
from emulator.report.prediction import CONTRACT_KEYS
from emulator.report.table import print_prediction


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



def _vocab_parallel_rank(rank: int, tp: int, h: int = 1024, ids: tuple = (8, 1024)) -> TraceBuilder:
    """TP x DP ranks of a Megatron-style model: each TP rank looks up the same ids in its slice of the
    vocabulary and all-reduces the partial embeddings over its TP group, inside the embedding module."""
    b = TraceBuilder(rank)
    group = [rank // tp * tp + i for i in range(tp)]
    t = ids[0] * ids[1]
    for it in range(3):
        b.iteration, b.phase = it, "forward"
        lookup = [b.kernel("aten::embedding", [[50304 // tp, h], list(ids)], ["bfloat16", "int64"], [[*ids, h]]),
                  b.kernel("aten::masked_fill", [[*ids, h]], ["bfloat16"]),
                  b.collective("c10d::allreduce_", f"tp{group[0]}", group, t * h * 2)]
        for row in lookup:
            row["module"] = "embed"
        b.mm(t, h, h)
        b.phase = "backward"
        b.mm(t, h, h)
        b.phase = "optimizer"
        b.kernel("aten::_fused_adamw_", [[h * h]] * 4, ["float32"] * 4)
    return b


def test_tokens_are_counted_once_per_tensor_parallel_group_that_shares_a_vocabulary_parallel_lookup(tmp_path):
    tables = {r: _vocab_parallel_rank(r, tp=2).table() for r in range(4)}  # TP 2 x DP 2
    pred = predict_from_trace(write_job(tmp_path / "out", tables), roofline_only=True)
    # two data-parallel replicas of 8 x 1,024 ids each; the TP pair of a replica saw the same ids
    assert pred.tokens_per_iteration == 2 * 8192
    assert pred.tokens_source == "inferred from the vocabulary embedding's inputs"

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


def _host_and_memory_job(tmp_path):
    from emulator.bench.synthetic import TraceBuilder

    b = TraceBuilder(0, host_gap_s=10e-6)
    for it in range(2):
        b.iteration = it
        b.phase = "forward"
        for j in range(4):
            b.mm(8192, 8192, 8192)["mem_allocated"] = (j + 1) * 2**30
        b.sync()  # the host waits for four big GEMMs here
        b.phase = "optimizer"
        b.mm(64, 64, 64)["mem_allocated"] = 2**30
    return write_job(tmp_path / "out", {0: b.table()})


def test_timeline_has_a_host_lane_with_its_waits_and_a_memory_counter(tmp_path):
    out = _host_and_memory_job(tmp_path)
    pred = predict_from_trace(out, roofline_only=True)
    ev = json.loads((out / "timeline.json").read_text())["traceEvents"]
    host = [e for e in ev if e.get("tid") == 100_000 and e["ph"] == "X"]
    waits = [e for e in host if e["cat"] == "host_wait"]
    gemms = [e for e in ev if e["ph"] == "X" and e["name"] == "aten::mm" and e["args"]["iteration"] == 0][:4]
    assert len(waits) == 2 and waits[0]["name"] == "wait: cuda::synchronize"
    # the host waits from the sync until the last queued GEMM ends
    assert waits[0]["ts"] + waits[0]["dur"] == pytest.approx(gemms[-1]["ts"] + gemms[-1]["dur"])
    work = [e["name"] for e in host if e["cat"] == "host"]
    assert work == ["forward (host)", "optimizer (host)", "forward (host)", "optimizer (host)"]
    mem = [e for e in ev if e["ph"] == "C" and e["name"] == "memory"]
    assert [m["args"]["allocated MiB"] for m in mem[:5]] == [1024, 2048, 3072, 4096, 1024]
    assert pred.iteration_time_s >= gemms[-1]["dur"] * 4e-6


def test_the_answer_says_what_sets_the_step(tmp_path):
    """A program of tiny kernels with 1 ms of Python before each is bound by its host: the device idles, a
    faster GPU would not help; the DDP stack of large GEMMs is not, and a faster host would not help it."""
    slow_host = write_job(tmp_path / "host", host_bound_tables([1e-3]), nproc_per_node=1)
    pred = predict_from_trace(slow_host, roofline_only=True)
    assert pred.bound_by == "host" and json.loads((slow_host / "prediction.json").read_text())["bound_by"] == "host"
    console = Console(record=True, width=240)
    print_prediction(pred, console)
    assert "a faster GPU would not shorten it" in console.export_text()
    gemms = predict_from_trace(_out(tmp_path), roofline_only=True)
    assert gemms.bound_by in ("compute", "communication")
    assert gemms.breakdown_s["idle"] < 0.5 * gemms.iteration_time_s


def test_one_rank_whose_host_work_fills_the_step_makes_the_job_host_bound(tmp_path):
    """Rank 1 spends 1 ms of Python before each tiny kernel, rank 0 none; their all-reduce makes rank 0 wait,
    so the step is rank 1's host work although the ranks' mean host time is half of it."""
    pred = predict_from_trace(write_job(tmp_path / "out", host_bound_tables([1e-6, 1e-3])), roofline_only=True)
    assert pred.breakdown_s["host"] < 0.7 * pred.iteration_time_s  # the mean over the ranks
    assert pred.bound_by == "host"
