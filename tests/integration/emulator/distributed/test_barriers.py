"""Barriers are collectives: recorded with their group and sequence number, matched across ranks."""

import json
import subprocess
import sys

from tests.programs.harness import PROGRAMS, ROOT, run_worker


def test_barriers_are_recorded_as_collectives_of_their_group(tmp_path):
    run = run_worker("barriers.py", tmp_path / "out", "--backend", "gloo", rank=1, world=2)
    assert run.rc == 0, run.summary["error"]
    t = run.trace[run.trace.kind == "collective"]
    assert t.op.tolist() == ["c10d::allreduce_", "c10d::barrier", "c10d::barrier", "c10d::allreduce_"]
    assert t.coll_seq.tolist() == [0, 1, 2, 3]  # one sequence with the group's other collectives
    assert set(t.group) == {"0"} and all(list(r) == [0, 1] for r in t.group_ranks)
    waits = run.trace[(run.trace.kind == "event_wait") & (run.trace.waits_for == "c10d::barrier")]
    assert waits.coll_seq.tolist() == [1, 2]  # the host waits for each barrier, as on a GPU


def test_a_barrier_only_rank_0_reaches_is_a_hang(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "predict", "--roofline-only", "--nproc-per-node", "2",
                           "--out", str(out), str(PROGRAMS / "barriers.py"), "--rank0-only"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]  # Exit.HANG
    assert "would hang" in proc.stdout and "barrier" in proc.stdout
    first = json.loads((out / "prediction.json").read_text())["hang"]["issues"][0]
    assert first["group"] == "0" and first["group_ranks"] == [0, 1] and first["coll_seq"] == 1
    assert "ranks [0] issued barrier of 0 bytes; ranks [1] issued all_reduce" in first["detail"]
