"""`maya search` as a user runs it: a real (tiny) Megatron-style program, every trial a `maya predict`.

Roofline-only predictions, so the throw-away warehouse needs no registered predictors. Each trial
emulates two ranks (a few seconds each); the Ray test starts a local Ray instance (~30 s).
"""

import json
import os
import subprocess
import sys

import pytest

from tests.paths import EXAMPLES

PROGRAM = [str(EXAMPLES / "validation" / "megatron_gpt.py"), "--layers", "2", "--hidden", "64", "--heads", "4",
           "--seq", "32", "--vocab", "512", "--steps", "3"]
SPACE = """
[knobs]
tp = { values = [1, 2] }
micro_batch = { values = [1, 2], memory = "increasing" }
flag = { values = ["", "--no-such-flag"] }

[constants]
global_batch = 4

[derived]
dp = "gpus // tp"

[constraints]
batch = "global_batch % (dp * micro_batch) == 0"

[program]
args = ["--tp", "{tp}", "--micro-batch", "{micro_batch}", "--global-batch", "{global_batch}",
        { if = "flag != ''", args = ["{flag}"] }]

[cluster]
gpu = "h100"
price_per_gpu_hour = 2.0
"""


def maya_search(tmp_path, *args):
    env = dict(os.environ, MAYA_WAREHOUSE=str(tmp_path / "warehouse"))
    cmd = [sys.executable, "-m", "emulator.cli", "search", "--gpus", "2", "--space", str(tmp_path / "space.toml"),
           "--roofline-only", "--out", str(tmp_path / "out"), *args, *PROGRAM]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture
def space(tmp_path):
    (tmp_path / "space.toml").write_text(SPACE)
    return tmp_path


def test_search_ranks_records_a_crash_and_a_rerun_reads_the_cache(space):
    r = maya_search(space, "--engine", "inline", "--algorithm", "grid", "--budget", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "3 evaluated (3 executed, 0 cached)" in out and "crash" in out
    assert "best: tp=1 micro_batch=" in out and "maya predict --gpu h100 --nproc-per-node 2" in out
    assert "tracebacks" in out  # the crashing trial's traceback path is shown
    r = maya_search(space, "--engine", "inline", "--algorithm", "grid", "--budget", "3", "--json")
    doc = json.loads(r.stdout)
    assert doc["counts"]["cached"] == 3 and doc["counts"]["executed"] == 0
    assert {t["bound_by"] for t in doc["trials"] if t["status"] == "ok"} <= {"host", "waiting", "communication",
                                                                            "compute"}
    assert any(t["bound_by"] for t in doc["trials"] if t["status"] == "ok")  # each prediction says what sets it
    crashed = [t for t in doc["trials"] if t["status"] == "crash"]
    assert crashed and "--no-such-flag" in crashed[0]["command"]
    assert "unrecognized arguments" in open(crashed[0]["traceback_path"]).read()
    assert (space / "out" / doc["search_id"] / "pareto.png").exists()


def test_bad_space_is_refused_before_any_trial(space):
    (space / "space.toml").write_text(SPACE.replace("{micro_batch}", "{microbatch}"))
    r = maya_search(space, "--engine", "inline")
    assert r.returncode == 2
    assert ("[program] args[3]: template '{microbatch}' names ['microbatch'], which the space does not define"
            in r.stdout)
    assert not (space / "warehouse" / "search" / "trials").exists()
    (space / "space.toml").write_text(SPACE)
    for flags, says in ((["--budget", "0"], "--budget must be at least 1, got 0"),
                        (["--workers", "0"], "--workers must be at least 1, got 0")):
        r = maya_search(space, "--engine", "inline", *flags)
        assert r.returncode == 2 and says in r.stdout  # a zero budget is not the default 300
    assert not (space / "warehouse" / "search" / "trials").exists()


def test_ray_engine_runs_trials_on_a_local_ray(space):
    r = maya_search(space, "--engine", "ray", "--algorithm", "random", "--budget", "1", "--seed", "3")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 evaluated (1 executed, 0 cached)" in r.stdout
