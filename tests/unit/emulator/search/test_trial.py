"""One trial: its cache keys, reuse of a stored emulation, and a failing program as a recorded crash."""

from pathlib import Path

from emulator.bench.synthetic import ddp_rank, write_job
from emulator.search.space import Plan
from emulator.search.trial import Program, TrialSpec, run_trial
from emulator.search.versions import ROOFLINE


def _spec(tmp_path: Path, argv=("--steps", "3"), **plan) -> TrialSpec:
    script = tmp_path / "prog" / "train.py"
    script.parent.mkdir(exist_ok=True)
    if not script.exists():
        script.write_text("print('hi')\n")
    p = dict(argv=["--tp", "1"], env={}, gpu="h100", nnodes=1, nproc_per_node=2, cluster={}) | plan
    return TrialSpec(Program.of(str(script), None, argv), Plan(**p), roofline_only=True)


def test_keys_separate_what_needs_an_emulation_from_what_needs_a_simulation(tmp_path):
    a = _spec(tmp_path)
    cheaper = _spec(tmp_path, cluster={"price_per_gpu_hour": 1.0})
    assert a.emulation_key() == cheaper.emulation_key() and a.trial_key(ROOFLINE) != cheaper.trial_key(ROOFLINE)
    assert a.trial_key(ROOFLINE) != a.trial_key({"kernels": "m v2", "collectives": "m v1"})
    assert a.emulation_key() != _spec(tmp_path, argv=("--steps", "4")).emulation_key()
    assert a.emulation_key() != _spec(tmp_path, gpu="a100-80gb").emulation_key()
    (tmp_path / "prog" / "model.py").write_text("x = 1\n")  # a file the program imports from beside it
    assert Program.of(a.program.script, None, a.program.argv).hash != a.program.hash


def test_a_stored_emulation_is_simulated_again_not_re_emulated(tmp_path):
    spec = _spec(tmp_path, cluster={"price_per_gpu_hour": 1.0})
    root = tmp_path / "search"
    write_job(root / "emulations" / spec.emulation_key(), {r: ddp_rank(r, 2).table() for r in range(2)})
    row = run_trial(spec, ROOFLINE, root)
    assert row["status"] == "ok" and row["emulation_reused"] and row["iteration_time_s"] > 0
    assert row["price_per_gpu_hour"] == 1.0 and row["world_size"] == 2
    assert row["command"].startswith("maya predict --gpu h100 --nproc-per-node 2")
    assert "--roofline-only" in row["command"]
    assert "--cluster" in row["command"] and "train.py --steps 3 --tp 1" in row["command"]


def test_a_program_that_cannot_run_is_a_crash_row_with_its_traceback_kept(tmp_path):
    spec = _spec(tmp_path)
    spec = TrialSpec(Program(script=str(tmp_path / "missing.py"), module=None, argv=(), hash="x"), spec.plan, True)
    row = run_trial(spec, ROOFLINE, tmp_path / "search")
    assert row["status"] == "crash" and "no such script" in row["reason"]
    assert Path(row["traceback_path"]).read_text().startswith("no such script")


def test_a_trial_holds_its_cores_only_while_it_runs(tmp_path, monkeypatch):
    """A reused worker (Ray) runs the next trial with the node's cores in view, not the last trial's slot:
    otherwise every later trial sees one core, one slot, and concurrent trials queue behind each other."""
    import os

    import emulator.search.trial as trial

    before = os.sched_getaffinity(0)
    spec = _spec(tmp_path, cluster={"price_per_gpu_hour": 1.0})
    root = tmp_path / "search"
    write_job(root / "emulations" / spec.emulation_key(), {r: ddp_rank(r, 2).table() for r in range(2)})
    seen, simulate = [], trial._simulate
    monkeypatch.setattr(trial, "_simulate", lambda *a: seen.append(os.sched_getaffinity(0)) or simulate(*a))
    row = run_trial(spec, ROOFLINE, root, cores=[min(before)])
    assert row["status"] == "ok"
    assert seen == [{min(before)}]
    assert os.sched_getaffinity(0) == before
