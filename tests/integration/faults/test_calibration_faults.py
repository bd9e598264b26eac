"""Fault injection on CPU calibration: Ctrl-C during the kernel benchmarks and a rerun; a second
calibration of the partition started while one runs.

What must hold: a clear message each time; the warehouse holds whole chunks only (every file reads
in full, no signature measured twice in a run) and the rerun resumes where the first run stopped."""

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq

from maya_models.warehouse import completed_chunks, measurement_files, read_measurements, scan_corrupt
from pipelines.calibration.checks import no_duplicate_signatures
from tests.integration.faults.interrupts import deliverable_ctrl_c
from tests.paths import REPO

RUNNER = [sys.executable, "-m", "pipelines.runners.kernels", "--gpu", "cpu", "--run-id", "run1", "--chunk-size", "4",
          "--repeats", "3", "--max-seconds-per-signature", "0.05", "--budget-s", "600"]


def wait_for(condition, proc, timeout=180):
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_an_interrupted_kernel_benchmark_keeps_whole_chunks_and_a_rerun_resumes(tmp_path):
    root = tmp_path / "wh"
    cmd = [*RUNNER, "--root", str(root)]
    # the whole plan (hundreds of chunks): the run must still be measuring when Ctrl-C comes (with 50 chunks a
    # fast, idle machine finished before the signal)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=deliverable_ctrl_c)
    wait_for(lambda: len(completed_chunks("cpu", "maya-bench", "run1", root=root)) >= 2, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "rerun with --run-id run1 to resume" in err and "Traceback" not in err
    done = completed_chunks("cpu", "maya-bench", "run1", root=root)
    assert not scan_corrupt(root) and all(pq.read_table(p).num_rows == 4 for p in measurement_files(root))
    rerun = subprocess.run([*cmd, "--max-chunks", "2"], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    summary = json.loads(rerun.stdout.split("MAYA-SUMMARY ", 1)[1])
    assert summary["resumed"] and summary["chunks_skipped"] == len(done) and summary["chunks_written"] == 2
    assert completed_chunks("cpu", "maya-bench", "run1", root=root) == set(range(len(done) + 2))
    assert no_duplicate_signatures(read_measurements(root=root, status=None)).passed


def test_a_second_calibration_of_a_running_partition_refuses_and_ctrl_c_stops_the_first(tmp_path):
    env = {**os.environ, "MAYA_WAREHOUSE": str(tmp_path / "wh"), "DAGSTER_HOME": str(tmp_path / "dh")}
    cmd = [sys.executable, "-m", "pipelines.calibrate", "--gpu", "cpu", "--budget-s", "60", "--skip-predictors"]
    # its own process group, as a terminal's Ctrl-C reaches it
    first = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=deliverable_ctrl_c)
    pending = tmp_path / "wh" / "runs" / "gpu=cpu" / "pending.json"
    wait_for(pending.exists, first)
    run_id = json.loads(pending.read_text())["run_id"]
    second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 75  # pipelines.calibrate.EXIT_BUSY
    assert f"a calibration of 'cpu' is already running (PID {first.pid} since" in second.stderr
    assert json.loads(pending.read_text())["run_id"] == run_id  # the second changed nothing
    os.killpg(first.pid, signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 130 and "interrupted: the chunks measured so far are in the warehouse" in err
    assert not scan_corrupt(tmp_path / "wh")  # whole chunks only
    assert json.loads(pending.read_text())["run_id"] == run_id  # the next calibration resumes this run
