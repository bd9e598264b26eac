"""The launcher with a stand-in worker: scheduling, merging, failures, OOM and stale outputs (no torch)."""

import sys
import textwrap

import pytest

from emulator.launch.emulate import run_emulation
from emulator.launch.job import BadJob
from emulator.trace.io import emulated_ranks, read_summary

FAKE_WORKER = textwrap.dedent('''
    """Stand-in for emulator.launch.worker: writes a one-row trace and a rank summary like the real one."""
    import argparse, json, os, sys
    import pyarrow as pa
    from emulator.trace.io import write_json, write_rank_trace
    from emulator.trace.schema import TRACE_SCHEMA

    argv = sys.argv[1:]
    prog = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser()
    for a in ("--gpu", "--script", "--module", "--out"):
        p.add_argument(a)
    for a in ("--rank", "--world-size", "--local-rank", "--local-world-size", "--nnodes", "--node-rank",
              "--iterations"):
        p.add_argument(a, type=int)
    p.add_argument("--profile", action="store_true")
    ns = p.parse_args(argv)
    q = argparse.ArgumentParser()
    q.add_argument("--fail-rank", type=int, default=-1)
    q.add_argument("--oom-rank", type=int, default=-1)
    q.add_argument("--crash-rank", type=int, default=-1)
    q.add_argument("--tp", type=int, default=1)
    q.add_argument("--role", default="same")  # same | tp: work depends on the tp position
    args = q.parse_args(prog)
    r, w = ns.rank, ns.world_size
    if r == args.crash_rank:
        print("segfault-like death before any output", flush=True)
        os._exit(139)
    tp = args.tp
    groups = [{"name": "0", "ranks": list(range(w)), "member": True}]
    groups += [{"name": f"tp{i}", "ranks": list(range(i * tp, i * tp + tp)), "member": r // tp == i}
               for i in range(w // tp)] if tp > 1 else []
    groups += [{"name": f"dp{j}", "ranks": list(range(j, w, tp)), "member": r % tp == j}
               for j in range(tp)] if 1 < tp < w else []
    role = str(r % tp) if args.role == "tp" else "same"
    row = {f.name: None for f in TRACE_SCHEMA}
    row.update(rank=r, seq=0, iteration=0, kind="kernel", op="aten::mm", stream=0,
               shapes=[[64, 64 * (1 + (r % tp if args.role == "tp" else 0))]], args='{"device": "cuda:%d"}' % r)
    write_rank_trace(ns.out, r, pa.table({k: [v] for k, v in row.items()}, schema=TRACE_SCHEMA))
    failed, oom = r == args.fail_rank, r == args.oom_rank
    error = ("Traceback (most recent call last):\\n  File \\"train.py\\", line 3\\nValueError: bad shape"
             if failed else None)
    write_json(os.path.join(ns.out, "ranks", f"rank={r}.json"), {
        "rank": r, "ok": not (failed or oom), "error": error, "oom": oom,
        "oom_message": "CUDA out of memory. Tried to allocate 2.00 GiB." if oom else None,
        "peak_allocated": 1000 + r, "peak_reserved": 2048 + r, "iterations": min(ns.iterations or 2, 2),
        "stopped_by_iterations": (ns.iterations or 2) < 2,
        "iteration_hashes": [f"{role}-{i}" for i in range(min(ns.iterations or 2, 2))],
        "unsupported_ops": {"aten::foo": 1} if r == 0 else {}, "placeholders": {"item_float": 2},
        "wall_s": 0.1, "work_hash": role, "groups": groups, "n_events": 1, "torch_version": "x", "gpu": ns.gpu})
    print(f"rank {r} done", flush=True)
    sys.exit(1 if failed else 3 if oom else 0)
''')


@pytest.fixture
def worker(tmp_path):
    path = tmp_path / "fake_worker.py"
    path.write_text(FAKE_WORKER)
    return [sys.executable, str(path)]


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('never run by the fake worker')\n")
    return str(path)


def emulate(script, worker, out, *args, nproc=4, **kw):
    return run_emulation(script=script, module=None, argv=list(args), gpu="h100", nproc_per_node=nproc,
                         out=out, worker=worker, **kw)


def test_no_dedup_runs_every_rank_and_merges(tmp_path, script, worker):
    out = tmp_path / "out"
    s = emulate(script, worker, out, dedup=False, jobs=2, iterations=2)
    assert s.ok and s.complete and not s.oom
    assert s.ranks_emulated == [0, 1, 2, 3] and emulated_ranks(out) == [0, 1, 2, 3]
    assert s.rank_map == {"0": 0, "1": 1, "2": 2, "3": 3}
    assert s.peak_allocated_bytes == {"0": 1000, "1": 1001, "2": 1002, "3": 1003}
    assert s.unsupported_ops == {"aten::foo": 1} and s.placeholders == {"item_float": 2}
    assert s.world_size == 4 and s.nproc_per_node == 4 and s.iterations_found == 2
    assert read_summary(out) == s
    assert (out / "logs" / "rank=3.log").read_text().strip() == "rank 3 done"


def test_dedup_runs_only_distinct_roles(tmp_path, script, worker):
    out = tmp_path / "out"
    s = emulate(script, worker, out, "--tp", "2", "--role", "tp", nproc=4, nnodes=2)  # 8 ranks, dp=4 x tp=2
    assert s.ok and s.complete and s.world_size == 8
    assert len(s.ranks_emulated) < 8
    for r in range(8):  # every rank maps to an emulated rank at the same tp position
        rep = s.rank_map[str(r)]
        assert rep in s.ranks_emulated and rep % 2 == r % 2
    assert s.peak_reserved_bytes["5"] == 2048 + s.rank_map["5"]
    assert [p["significant"] for p in s.dedup["partitions"]] == [True, False]


def test_probes_run_their_first_iteration_only_and_leave_no_trace(tmp_path, script, worker):
    out = tmp_path / "out"
    s = emulate(script, worker, out, "--tp", "2", nproc=4, nnodes=2)  # 8 ranks doing the same work
    assert s.ok and s.complete and s.iterations_found == 2  # a probe's one iteration is not the job's
    probed = s.dedup["probed"]
    assert probed and s.dedup["probe_iterations"] == 1
    assert set(probed).isdisjoint(emulated_ranks(out))  # their first-iteration traces were removed
    assert set(probed).isdisjoint(s.rank_map.values())
    assert all(s.rank_map[str(r)] == 7 for r in probed)


def test_probe_iterations_can_be_turned_off_and_bad_values_stop_before_anything_runs(tmp_path, script, worker,
                                                                                      monkeypatch):
    monkeypatch.setenv("MAYA_PROBE_ITERATIONS", "0")
    s = emulate(script, worker, tmp_path / "full", "--tp", "2", nproc=4, nnodes=2)
    assert s.ok and s.dedup["probed"] == [] and s.dedup["probe_iterations"] is None
    monkeypatch.setenv("MAYA_PROBE_ITERATIONS", "one")
    with pytest.raises(BadJob, match="MAYA_PROBE_ITERATIONS"):
        emulate(script, worker, tmp_path / "bad", nproc=2)
    assert not (tmp_path / "bad").exists()


def test_failing_rank_is_reported_with_its_traceback(tmp_path, script, worker, capsys):
    out = tmp_path / "out"
    s = emulate(script, worker, out, "--fail-rank", "2", dedup=False, jobs=4)
    assert not s.ok and not s.complete and s.failed_rank == 2
    assert "ValueError: bad shape" in s.error
    err = capsys.readouterr().err
    assert "failed on rank 2" in err and "ValueError: bad shape" in err
    assert read_summary(out).failed_rank == 2


def test_worker_that_dies_without_a_summary(tmp_path, script, worker):
    s = emulate(script, worker, tmp_path / "out", "--crash-rank", "0")
    assert not s.ok and s.failed_rank == 0
    assert "segfault-like death" in s.error


def test_oom_is_reported_as_oom(tmp_path, script, worker, capsys):
    s = emulate(script, worker, tmp_path / "out", "--oom-rank", "0", nproc=2, dedup=False)
    assert s.oom and not s.ok and s.oom_ranks == [0]
    assert "CUDA out of memory" in s.oom_message
    assert "OOM" in capsys.readouterr().err


def test_oom_with_dedup_still_maps_every_rank(tmp_path, script, worker):
    s = emulate(script, worker, tmp_path / "out", "--oom-rank", "0", nproc=4)
    assert s.oom and s.oom_ranks == [0] and s.failed_rank == 0
    assert set(s.rank_map) == {"0", "1", "2", "3"} and s.rank_map["0"] == 0
    assert set(s.peak_reserved_bytes) == {"0", "1", "2", "3"}


def test_stale_outputs_of_a_previous_run_are_cleared(tmp_path, script, worker):
    out = tmp_path / "out"
    emulate(script, worker, out, nproc=4, dedup=False)
    (out / "prediction.json").write_text("{}")
    keep, keep_log = out / "notes.txt", out / "logs" / "mine.txt"
    keep.write_text("mine")
    keep_log.write_text("mine too")
    s = emulate(script, worker, out, nproc=1)
    assert emulated_ranks(out) == [0] and s.world_size == 1
    assert not (out / "prediction.json").exists() and not (out / "ranks" / "rank=3.json").exists()
    assert not (out / "logs" / "rank=3.log").exists()
    assert keep.read_text() == "mine" and keep_log.read_text() == "mine too"


def test_bad_input_is_a_clear_error(tmp_path, worker):
    with pytest.raises(BadJob, match="no such script"):
        emulate(str(tmp_path / "missing.py"), worker, tmp_path / "out")
    assert not (tmp_path / "out").exists()
