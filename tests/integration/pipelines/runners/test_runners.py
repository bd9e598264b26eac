"""The benchmark runners as a bare node runs them: `python -m pipelines.runners.<x>`."""

import json
import os
import signal
import subprocess
import sys
import time

from maya_models.warehouse import completed_chunks, read_measurements, scan_corrupt
from tests.paths import REPO


def _kernels_cmd(wh, *extra):
    return [sys.executable, "-m", "pipelines.runners.kernels", "--gpu", "cpu", "--run-id", "resume-test",
            "--root", str(wh), "--chunk-size", "3", "--repeats", "3", "--max-seconds-per-signature", "0.2",
            "--threads", "1", *extra]


def _summary(stdout: str) -> dict:
    line = [x for x in stdout.splitlines() if x.startswith("MAYA-SUMMARY ")][-1]
    return json.loads(line.removeprefix("MAYA-SUMMARY "))


def test_killed_sweep_resumes_without_duplicates(wh):
    proc = subprocess.Popen(_kernels_cmd(wh, "--budget-s", "120"), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while len(completed_chunks("cpu", "maya-bench", "resume-test", root=wh)) < 2:
            assert proc.poll() is None, "runner ended before it could be interrupted"
            assert time.monotonic() < deadline, "no chunk written in 90 s"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGKILL)  # mid-sweep, possibly mid-write
    finally:
        proc.wait()
    before = completed_chunks("cpu", "maya-bench", "resume-test", root=wh)
    out = subprocess.run(_kernels_cmd(wh, "--budget-s", "120", "--max-chunks", "2"), cwd=REPO,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    s = _summary(out.stdout)
    assert s["resumed"] and s["chunks_skipped"] == len(before) and s["chunks_written"] == 2
    after = completed_chunks("cpu", "maya-bench", "resume-test", root=wh)
    assert before < after and len(after) == len(before) + 2
    assert scan_corrupt(wh) == []  # the kill left no half file where readers look
    df = read_measurements(gpu="cpu", status=None, root=wh)
    assert not df.duplicated(["run_id", "signature"]).any()
    assert len(df) == 3 * len(after)


def test_gloo_collectives_two_ranks(wh):
    out = subprocess.run([sys.executable, "-m", "pipelines.runners.collectives", "--gpu", "cpu", "--run-id",
                          "coll-test", "--root", str(wh), "--budget-s", "60", "--max-bytes", "16384",
                          "--repeats", "3", "--warmup", "1"], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    s = _summary(out.stdout)
    assert s["ranks"] == 2 and s["backend"] == "gloo" and s["complete"]
    df = read_measurements(gpu="cpu", status=None, root=wh)
    assert set(df["op"]) == {"c10d::allreduce_", "c10d::_allgather_base_", "c10d::_reduce_scatter_base_",
                             "c10d::alltoall_base_", "c10d::broadcast_", "c10d::send"}
    ok = df[df["status"] == "ok"]
    assert len(ok) >= 5 * 3 and (ok["duration_s"] > 0).all() and (ok["group_size"] == 2).all()
    assert set(df[df["op"] == "c10d::send"]["kind"]) == {"p2p"}
    assert sorted(ok[ok["op"] == "c10d::allreduce_"]["coll_bytes"]) == [1024, 4096, 16384]


def test_cpu_sweep_reaches_past_ddps_gradient_buckets(wh):
    # by default the CPU sweep measures all-reduces larger than DDP's 25 MiB buckets, so a DDP program's
    # all-reduces are timed from measurements, not from the prior extrapolated past them
    out = subprocess.run([sys.executable, "-m", "pipelines.runners.collectives", "--gpu", "cpu", "--run-id",
                          "coll-sizes", "--root", str(wh), "--budget-s", "120", "--ops", "all_reduce",
                          "--repeats", "2", "--warmup", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    ok = read_measurements(gpu="cpu", status=None, root=wh)
    ok = ok[ok["status"] == "ok"]
    assert ok["coll_bytes"].min() == 1024 and ok["coll_bytes"].max() > 25 * 2**20


def test_runner_refuses_a_gpu_that_is_not_here(wh):
    out = subprocess.run([sys.executable, "-m", "pipelines.runners.kernels", "--gpu", "h100", "--run-id", "x",
                          "--root", str(wh)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "GPU" in out.stdout + out.stderr
    assert not wh.exists()
