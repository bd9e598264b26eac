"""`maya models ...` and `maya calibrate` run maya_models' and the pipelines' own command lines in a
subprocess (the emulator never imports them), pass every option through and exit with their code."""

import sys

import pytest
from typer.testing import CliRunner

from emulator.cli import app

runner = CliRunner()


@pytest.fixture
def called(monkeypatch):
    calls = []

    def fake(cmd):
        calls.append(cmd)
        return 7  # whatever the module exits with is maya's exit code

    monkeypatch.setattr("emulator.cli.subprocess.call", fake)
    return calls


@pytest.mark.parametrize("args, expected", [
    (["models", "list"], ["maya_models.registry", "list"]),
    (["models", "list", "--gpu", "H100"], ["maya_models.registry", "list", "--gpu", "h100"]),
    (["models", "train", "--gpu", "l4", "--cross-gpu", "--kind", "kernels", "--no-publish", "--json"],
     ["maya_models.train", "--gpu", "l4", "--cross-gpu", "--kind", "kernels", "--no-publish", "--json"]),
    (["models", "promote", "--gpu", "h100", "--kind", "collectives", "--version", "3"],
     ["maya_models.registry", "promote", "--gpu", "h100", "--kind", "collectives", "--version", "3"]),
    (["models", "rollback", "--gpu", "h100"], ["maya_models.registry", "rollback", "--gpu", "h100"]),
    (["models", "bootstrap", "--gpu", "cpu", "--force"], ["maya_models.bootstrap", "--gpu", "cpu", "--force"]),
    (["calibrate", "--gpu", "cpu", "--budget-s", "30", "--collective-budget-s", "5", "--traces", "a",
      "--traces", "b", "--skip-predictors"],
     ["pipelines.calibrate", "--gpu", "cpu", "--budget-s", "30.0", "--collective-budget-s", "5.0",
      "--traces", "a", "b", "--skip-predictors"]),
])
def test_options_pass_through_and_the_exit_code_comes_back(called, args, expected):
    res = runner.invoke(app, args)
    assert res.exit_code == 7, res.output
    assert called == [[sys.executable, "-m", *expected]]


def test_passed_through_command_lines_parse_in_the_modules_themselves(called):
    """What maya builds is what those modules' argparse accept (their options are mirrored, not guessed)."""
    import argparse

    from maya_models import bootstrap, registry, train
    from pipelines import calibrate

    for args, mod in ((["models", "train", "--gpu", "l4", "--cross-gpu", "--kind", "kernels", "--no-publish",
                        "--json"], train), (["models", "bootstrap", "--gpu", "cpu", "--force"], bootstrap),
                      (["models", "promote", "--gpu", "h100", "--kind", "kernels", "--version", "2"], registry),
                      (["calibrate", "--gpu", "cpu", "--budget-s", "1", "--traces", "x", "--skip-predictors"],
                       calibrate)):
        called.clear()
        runner.invoke(app, args)
        argv = called[0][3:]
        parsed = []

        def capture(self, a=None, namespace=None, _parsed=parsed):
            _parsed.append(argparse.ArgumentParser.parse_known_args(self, a, namespace))
            raise SystemExit(0)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(argparse.ArgumentParser, "parse_args", lambda self, a=None, n=None: capture(self, a, n)[0])
            with pytest.raises(SystemExit):
                mod.main(argv)
        assert parsed and parsed[0][1] == [], (mod.__name__, argv)


def test_a_bad_kind_is_refused_before_running(called):
    res = runner.invoke(app, ["models", "train", "--gpu", "h100", "--kind", "gemm"])
    assert res.exit_code == 2 and "--kind 'gemm'" in res.output and not called


def test_models_list_runs_the_registry_for_real(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'empty.db'}")
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "models", "list", "--gpu", "l4"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no maya models registered for l4" in proc.stdout
