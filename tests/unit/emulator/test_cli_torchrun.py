"""`maya emulate|predict|profile` take torchrun's command line: replacing `torchrun` by `maya predict --gpu X`
works. What a user sees: the job is sized by --nproc-per-node/--nnodes, the other launcher flags are
named in one note line, nothing before the script is taken as the script, and everything after the
script reaches the program unchanged."""

import pytest
from typer.testing import CliRunner

from emulator.cli import app
from emulator.cli_args import IGNORED_FLAGS, split_launcher_flags
from emulator.core.exitcodes import Exit
from emulator.core.hardware import get_gpu

runner = CliRunner()


class _Summary:
    def outcome(self):
        return Exit.OK


@pytest.fixture
def launched(monkeypatch):
    """The keyword arguments `maya emulate`/`maya profile` hand to the launcher (nothing runs)."""
    calls = {}

    def fake(**kwargs):
        calls.update(kwargs)
        return _Summary()

    monkeypatch.setattr("emulator.launch.emulate.run_emulation", fake)
    monkeypatch.setattr("emulator.launch.profile.run_profile", fake)
    return calls


def test_torchrun_command_line_sizes_the_job_and_leaves_the_program_alone(launched):
    res = runner.invoke(app, ["emulate", "--gpu", "h100", "--standalone", "--nproc_per_node", "8",
                              "--rdzv-backend", "c10d", "--rdzv_endpoint=localhost:29500", "--max-restarts", "3",
                              "--tee", "3", "train.py", "--standalone", "--lr", "3e-4", "--nproc-per-node", "2"])
    assert res.exit_code == Exit.OK, res.output
    assert launched["script"] == "train.py" and launched["module"] is None
    assert launched["argv"] == ["--standalone", "--lr", "3e-4", "--nproc-per-node", "2"]
    assert launched["nproc_per_node"] == 8 and launched["nnodes"] == 1
    notes = [line for line in res.output.splitlines() if "accepted and ignored" in line]
    assert len(notes) == 1
    for flag in ("--standalone", "--rdzv-backend", "--rdzv-endpoint", "--max-restarts", "--tee"):
        assert flag in notes[0]


def test_the_equals_spelling_and_a_module(launched):
    res = runner.invoke(app, ["emulate", "--nproc-per-node=4", "--nnodes=2", "--node_rank", "1",
                              "--master-addr", "10.0.0.1", "--master_port=29500", "-m", "pkg.train", "--epochs", "1"])
    assert res.exit_code == Exit.OK, res.output
    assert (launched["script"], launched["module"], launched["argv"]) == (None, "pkg.train", ["--epochs", "1"])
    assert (launched["nproc_per_node"], launched["nnodes"]) == (4, 2)


@pytest.mark.parametrize("module", [["-m", "torchtitan.train"], ["--module=torchtitan.train"]])
def test_a_modules_own_options_that_share_mayas_names_reach_the_module(launched, module):
    # torchtitan's command line: `--module llama3` and `--out` after the module are torchtitan's, not maya's
    program = ["--module", "llama3", "--config", "llama3_debugmodel", "--out", "x", "--", "--gpu", "a100"]
    res = runner.invoke(app, ["emulate", "--gpu", "h100", "--out", "emu", *module, *program])
    assert res.exit_code == Exit.OK, res.output
    assert (launched["script"], launched["module"], launched["argv"]) == (None, "torchtitan.train", program)
    assert launched["gpu"] == "h100" and str(launched["out"]) == "emu"


@pytest.mark.parametrize("value", ["gpu", "auto"])
def test_nproc_per_node_gpu_is_the_parts_gpus_per_node(launched, value):
    res = runner.invoke(app, ["emulate", "--gpu", "l4", "--nproc-per-node", value, "train.py"])
    assert res.exit_code == Exit.OK, res.output
    assert launched["nproc_per_node"] == get_gpu("l4").gpus_per_node


def test_an_elastic_nnodes_range_takes_the_maximum_with_a_note(launched):
    res = runner.invoke(app, ["emulate", "--nnodes", "1:4", "train.py"])
    assert res.exit_code == Exit.OK, res.output
    assert launched["nnodes"] == 4
    assert "--nnodes 1:4 is an elastic range; maya emulates the maximum, 4 node(s)" in res.output
    assert "accepted and ignored" not in res.output  # no ignored flag, no note


def test_unknown_flag_before_the_script_is_bad_input_naming_it(launched):
    res = runner.invoke(app, ["predict", "--roofline-only", "--bogus-flag=1", "train.py"])
    assert res.exit_code == Exit.BAD_INPUT, res.output
    assert "unknown option '--bogus-flag' before the script" in res.output
    assert not launched


@pytest.mark.parametrize("args, message", [
    (["--no-python", "train.py"], "--no-python cannot be honoured"),
    (["--nproc-per-node", "lots", "train.py"], "--nproc-per-node 'lots'"),
    (["--nnodes", "4:1", "train.py"], "--nnodes '4:1'"),
])
def test_flags_maya_cannot_honour_are_refused(launched, args, message):
    res = runner.invoke(app, ["emulate", *args])
    assert res.exit_code == Exit.BAD_INPUT, res.output
    assert message in res.output and not launched


def test_predict_takes_the_same_command_line(launched, monkeypatch):
    seen = {}
    monkeypatch.setattr("emulator.cli.run_simulation", lambda out, **kw: (seen.update(kw), (None, Exit.OK))[1])
    res = runner.invoke(app, ["predict", "--roofline-only", "--standalone", "--nproc-per-node", "8", "--nnodes", "2",
                              "train.py", "--steps", "3"])
    assert res.exit_code == Exit.OK, res.output
    assert launched["script"] == "train.py" and launched["argv"] == ["--steps", "3"]
    assert (seen["nproc_per_node"], seen["nnodes"]) == (8, 2)


def test_profile_takes_the_launcher_flags_too(launched):
    res = runner.invoke(app, ["profile", "--standalone", "--nproc_per_node", "2", "train.py", "-x"])
    assert res.exit_code == Exit.OK, res.output
    assert launched["nproc_per_node"] == 2 and launched["argv"] == ["-x"]
    assert runner.invoke(app, ["profile", "--nnodes", "2", "train.py"]).exit_code == Exit.BAD_INPUT


@pytest.mark.parametrize("command", ["emulate", "predict", "profile"])
def test_help_lists_every_torchrun_flag(command):
    res = runner.invoke(app, [command, "--help"])
    assert res.exit_code == 0
    for spellings, _, _ in IGNORED_FLAGS:
        for s in spellings:
            assert s in res.output
    assert "--no-python" in res.output and "--nproc_per_node" in res.output and "--module" in res.output


def test_split_stops_at_the_script_and_at_a_double_dash():
    assert split_launcher_flags(["--standalone", "a.py", "--standalone"], set(), set()) == (
        ["a.py", "--standalone"], ["--standalone"], False)
    assert split_launcher_flags(["--out", "--standalone", "--role", "x", "--", "a.py"], {"--out"}, set()) == (
        ["--out", "--standalone", "--", "a.py"], ["--role"], False)
