"""The `maya` command line's exit codes where nothing has to run: bad input, and saved folders re-simulated.

A CI gate reads 0 only for a valid prediction (emulator.core.exitcodes). The codes of runs that start
workers are in tests/integration/emulator/test_exit_codes.py."""

import time

import pytest
from typer.testing import CliRunner

from emulator.bench.synthetic import TraceBuilder, write_job
from emulator.cli import app
from emulator.core.exitcodes import Exit, table

runner = CliRunner()


def _folder(tmp_path, **summary):
    tables = {}
    for r in range(2):
        b = TraceBuilder(r)
        b.mm(1024, 1024, 1024)
        b.collective("c10d::allreduce_", "0", [0, 1], 4096)
        tables[r] = b.table()
    return write_job(tmp_path / "out", tables, **summary)


@pytest.mark.parametrize("command", [[], ["emulate"], ["predict"], ["simulate"], ["profile"]])
def test_help_lists_the_exit_codes(command):
    res = runner.invoke(app, [*command, "--help"])
    assert res.exit_code == 0
    for line in table().splitlines():
        assert line in res.output


@pytest.mark.parametrize("args", [["emulate", "missing.py"], ["predict", "--roofline-only", "missing.py"],
                                  ["profile", "missing.py"], ["predict", "--gpu", "h900", "train.py"]])
def test_bad_input_is_bad_input_and_writes_nothing(tmp_path, args):
    res = runner.invoke(app, [args[0], "--out", str(tmp_path / "out"), *args[1:]])
    assert res.exit_code == Exit.BAD_INPUT, res.output
    assert "no such script: missing.py" in res.output or "unknown GPU 'h900'" in res.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag, value", [("--price-per-gpu-hour", "-1"), ("--tokens-per-iteration", "0"),
                                         ("--jobs", "0")])
def test_a_number_out_of_range_is_refused_not_read_as_the_default(tmp_path, flag, value):
    """0 tokens or 0 jobs used to mean "not given" (the inferred count, all cores); a negative price a negative
    cost. Each is refused before the program runs."""
    res = runner.invoke(app, ["predict", "--roofline-only", "--out", str(tmp_path / "out"), flag, value, "train.py"])
    assert res.exit_code == Exit.BAD_INPUT, res.output
    assert flag in res.output and not (tmp_path / "out").exists()
    res = runner.invoke(app, ["simulate", str(_folder(tmp_path)), "--nnodes", "0", "--roofline-only"])
    assert res.exit_code == Exit.BAD_INPUT and "--nnodes" in res.output
    res = runner.invoke(app, ["calibrate", "--gpu", "cpu", "--budget-s", "-5"])  # it used to calibrate anyway
    assert res.exit_code == Exit.BAD_INPUT and "--budget-s must be a number of seconds > 0, got -5.0" in res.output
    for flag, value in (("--seed", "-1"), ("--gpus", "0")):  # a negative seed was numpy's ValueError
        res = runner.invoke(app, ["search", "--space", "space.toml", flag, value, "train.py"])
        assert res.exit_code == Exit.BAD_INPUT and flag in res.output


def test_predict_without_predictors_refuses_before_emulating(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'empty.db'}")
    monkeypatch.setenv("MAYA_MODEL_CACHE", str(tmp_path / "no-cache"))
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('an emulation started')\n")
    t0 = time.perf_counter()
    res = runner.invoke(app, ["predict", "--gpu", "l4", "--no-bootstrap", "--out", str(tmp_path / "out"), str(script)])
    assert res.exit_code == Exit.BAD_INPUT, res.output
    assert "no predictors registered for GPU 'l4'" in res.output and "--roofline-only" in res.output
    assert "maya models bootstrap --gpu l4" in res.output  # the fix for a part with reference data
    assert not (tmp_path / "out").exists()  # refused before anything ran
    assert time.perf_counter() - t0 < 60


def test_simulate_of_a_saved_folder_exits_as_its_run_did(tmp_path):
    ok = _folder(tmp_path / "ok")
    assert runner.invoke(app, ["simulate", str(ok), "--roofline-only"]).exit_code == Exit.OK
    oom = _folder(tmp_path / "oom", ok=False, complete=False, oom=True, oom_ranks=[1])
    res = runner.invoke(app, ["simulate", str(oom), "--roofline-only"])
    assert res.exit_code == Exit.OOM and "OUT OF MEMORY" in res.output
    failed = _folder(tmp_path / "failed", ok=False, complete=False, failed_rank=1, error="ValueError: bad shape")
    res = runner.invoke(app, ["simulate", str(failed), "--roofline-only"])
    assert res.exit_code == Exit.PROGRAM_FAILED and "the program failed during emulation on rank 1" in res.output
    stopped = _folder(tmp_path / "stopped", ok=False, complete=False, interrupted=True)
    res = runner.invoke(app, ["simulate", str(stopped), "--roofline-only"])
    assert res.exit_code == Exit.INTERRUPTED and "the emulation was interrupted" in res.output
    assert not (stopped / "prediction.json").exists()


def test_simulate_json_puts_only_the_prediction_on_stdout(tmp_path):
    import json

    ok = _folder(tmp_path / "ok")
    res = runner.invoke(app, ["simulate", str(ok), "--roofline-only", "--json"])
    assert res.exit_code == Exit.OK, res.output
    assert json.loads(res.stdout) == json.loads((ok / "prediction.json").read_text())
    assert "maya prediction" in res.stderr  # the table, on stderr
    oom = _folder(tmp_path / "oom", ok=False, complete=False, oom=True, oom_ranks=[1])
    res = runner.invoke(app, ["simulate", str(oom), "--roofline-only", "--json"])
    assert res.exit_code == Exit.OOM and json.loads(res.stdout)["oom"]


def test_version_names_maya_and_torch():
    from importlib.metadata import version

    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.stdout.strip() == f"maya {version('maya')} (torch {version('torch')})"


def test_shell_completion_is_offered():
    res = runner.invoke(app, ["--help"])
    assert "--install-completion" in res.output and "--show-completion" in res.output


def test_predict_json_sends_the_emulation_progress_to_stderr(tmp_path, monkeypatch):
    import json

    class Summary:
        def outcome(self):
            return Exit.OK

    def emulate(console=None, **kwargs):
        _folder(tmp_path)  # the emulation's output folder, tmp_path / "out"
        (console or _console()).print("emulating rank 0")
        return Summary()

    from emulator.cli import _console

    monkeypatch.setattr("emulator.launch.emulate.run_emulation", emulate)
    res = runner.invoke(app, ["predict", "--roofline-only", "--json", "--nproc-per-node", "2", "--out",
                              str(tmp_path / "out"), "train.py"])
    assert res.exit_code == Exit.OK, res.output
    assert json.loads(res.stdout)["world_size"] == 2
    assert "emulating rank 0" in res.stderr


def test_a_gpu_spec_file_with_an_unknown_field_is_refused_naming_it_and_the_allowed_ones(tmp_path):
    spec = tmp_path / "gpu.toml"
    spec.write_text('[gpu]\nbase = "h100"\nmemory_gb = 96\n')
    res = runner.invoke(app, ["emulate", "--gpu-spec", str(spec), "train.py"])
    assert res.exit_code == Exit.BAD_INPUT
    assert "memory_gb" in res.output and "memory_GiB" in res.output


def test_simulate_retargets_a_saved_trace_to_a_variant_of_a_gpu_spec_file(tmp_path):
    out = _folder(tmp_path)
    spec = tmp_path / "gpu.toml"
    spec.write_text('[gpu]\nbase = "h100"\nname = "H100 SXM 500W"\npower_limit_w = 500\n')
    res = runner.invoke(app, ["simulate", str(out), "--gpu-spec", str(spec), "--roofline-only", "--json"])
    assert res.exit_code == Exit.OK, res.output
    import json

    pred = json.loads(res.stdout[res.stdout.index("{"):])
    assert pred["gpu_variant"]["power_limit_w"] == 500 and pred["gpu_variant"]["name"] == "H100 SXM 500W"
