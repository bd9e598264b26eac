"""First use of a GPU part: `maya predict` trains its predictors from the committed reference data
(`python -m maya_models.bootstrap`, in its own process) after one progress line, then goes on."""

import sys

import pytest
from typer.testing import CliRunner

from emulator.cli import app
from emulator.core.exitcodes import Exit
from emulator.core.hardware import get_gpu
from emulator.estimate.registry import RegistryPredictor, reference_parts

runner = CliRunner()


class _Summary:
    def outcome(self):
        return Exit.OK


@pytest.fixture
def first_use(monkeypatch, tmp_path):
    """No predictors until the (faked) bootstrap process has run; no emulation or simulation runs."""
    state = {"cmds": [], "bootstrapped": False, "emulated": False}

    def available(spec):
        return None if state["bootstrapped"] else f"no predictors registered for GPU {spec.key!r}"

    class Popen:
        def __init__(self, cmd, **kwargs):
            state["cmds"].append(cmd)
            self.stdout = iter(["training kernels predictor ...\n"])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def wait(self):
            state["bootstrapped"] = True
            return 0

    def emulate(**kwargs):
        state["emulated"] = True
        return _Summary()

    monkeypatch.setattr("emulator.estimate.registry.predictors_available", available)
    monkeypatch.setattr("emulator.cli.subprocess.Popen", Popen)
    monkeypatch.setattr("emulator.launch.emulate.run_emulation", emulate)
    monkeypatch.setattr("emulator.cli.run_simulation", lambda out, **kw: (None, Exit.OK))
    return state


def test_first_use_bootstraps_from_the_reference_data_then_predicts(first_use):
    res = runner.invoke(app, ["predict", "--gpu", "h100", "train.py"])
    assert res.exit_code == Exit.OK, res.output
    assert first_use["cmds"] == [[sys.executable, "-m", "maya_models.bootstrap", "--gpu", "h100"]]
    assert "training predictors for h100 from the committed reference data (first use, ~2 min) ..." in res.output
    assert "training kernels predictor" in res.output  # the bootstrap's own lines, shown as it goes
    assert first_use["emulated"]


def test_a_part_without_reference_data_gets_the_cross_gpu_model_and_says_so(first_use):
    assert "h200" not in reference_parts()
    res = runner.invoke(app, ["predict", "--gpu", "h200", "train.py"])
    assert res.exit_code == Exit.OK, res.output
    assert first_use["cmds"][0][-2:] == ["--gpu", "h200"]
    assert "the prediction will use the cross-GPU model" in res.output


def test_no_bootstrap_and_the_cpu_refuse(first_use):
    res = runner.invoke(app, ["predict", "--gpu", "h100", "--no-bootstrap", "train.py"])
    assert res.exit_code == Exit.BAD_INPUT and "maya models bootstrap --gpu h100" in res.output
    res = runner.invoke(app, ["predict", "--gpu", "cpu", "train.py"])
    assert res.exit_code == Exit.BAD_INPUT and "no predictors registered for GPU 'cpu'" in res.output
    assert not first_use["cmds"] and not first_use["emulated"]


def test_simulate_bootstraps_the_traces_part(first_use, tmp_path):
    (tmp_path / "emulation.json").write_text('{"gpu": "l4"}')
    runner.invoke(app, ["simulate", str(tmp_path)])
    assert first_use["cmds"][0][-2:] == ["--gpu", "l4"]


def test_reference_parts_are_the_parts_measured_in_the_committed_data():
    parts = reference_parts()
    assert {"h100", "a100-80gb", "l4"} <= parts
    assert "h200" not in parts  # only its sustained clock is measured: not trained on


def test_a_cross_gpu_model_is_labelled_as_such():
    class Model:
        def __init__(self, mode):
            self.predictor = type("P", (), {"info": {"mode": mode}})()

        def unwrap_python_model(self):
            return self

    h200 = get_gpu("h200")
    assert "cross-GPU model" in RegistryPredictor(Model("cross-gpu"), "models:/maya-kernels-h200@champion v1",
                                                  h200).label
    assert "cross-GPU" not in RegistryPredictor(Model("own"), "models:/maya-kernels-h100@champion v1", h200).label
