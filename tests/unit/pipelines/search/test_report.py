"""`make search-eval` on a fresh warehouse: each part's predictors come first, a failure is said in the report;
the validation program it runs is a checked choice."""

import io

import pytest
from rich.console import Console

from pipelines.search import groups, report


class _Group:
    """What run_eval reads of a vTrain group before its trials: name, part, layouts, work."""

    work = 0.0

    def __init__(self, name, gpu):
        self.name, self.first = name, type("Case", (), {"gpu": gpu})()

    def measured(self):
        return {}


def test_each_part_gets_its_predictors_before_any_trial_and_a_failure_is_a_note(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(report, "select_groups", lambda *a: [_Group("g1", "a100-80gb"), _Group("g2", "a100-80gb")])

    def ensure(gpu, runs_dir):
        calls.append(("predictors", gpu))
        return "could not get predictors for a100-80gb (bootstrap exited 1)" if gpu == "a100-80gb" else None

    def evaluate(group, store, console, program):
        calls.append(("trial", group.name))
        raise KeyboardInterrupt  # stop after the first group: what came before it is what the test is about

    monkeypatch.setattr(report, "ensure_predictors", ensure)
    monkeypatch.setattr(report, "evaluate_group", evaluate)
    monkeypatch.setattr(report, "Store", lambda: None)
    out = io.StringIO()
    try:
        report.run_eval(efficiency=False, console=Console(file=out), out_dir=tmp_path)
    except KeyboardInterrupt:
        pass
    assert calls == [("predictors", "a100-80gb"), ("trial", "g1")]
    assert "could not get predictors for a100-80gb" in out.getvalue()


def test_the_program_reaches_every_trial_and_an_unknown_or_uninstalled_one_stops_before_any(tmp_path, monkeypatch):
    programs = []
    monkeypatch.setattr(report, "select_groups", lambda *a: [_Group("g1", "a100-80gb")])
    monkeypatch.setattr(report, "ensure_predictors", lambda gpu, runs_dir: None)
    monkeypatch.setattr(report, "evaluate_group",
                        lambda g, store, console, program: programs.append(program) or _stop())
    monkeypatch.setattr(report, "Store", lambda: None)
    with pytest.raises(ValueError, match="unknown validation program 'megatron'"):
        report.run_eval(efficiency=False, console=Console(file=io.StringIO()), out_dir=tmp_path, program="megatron")
    assert programs == []
    installed = {"megatron": None}
    monkeypatch.setattr(groups.importlib.util, "find_spec", lambda name, *a: installed.get(name, object()))
    with pytest.raises(ValueError, match="needs megatron-core, which is not installed"):
        report.run_eval(efficiency=False, console=Console(file=io.StringIO()), out_dir=tmp_path,
                        program="megatron-core")
    assert programs == []
    installed["megatron"] = object()
    with pytest.raises(KeyboardInterrupt):
        report.run_eval(efficiency=False, console=Console(file=io.StringIO()), out_dir=tmp_path,
                        program="megatron-core")
    assert programs == ["megatron-core"]


def _stop():
    raise KeyboardInterrupt
