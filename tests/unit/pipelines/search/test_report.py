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

    def evaluate(group, store, console, program, workers, iterations):
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


def test_the_program_workers_and_iterations_reach_every_trial_and_an_unknown_program_stops_before_any(
        tmp_path, monkeypatch):
    programs = []
    monkeypatch.setattr(report, "select_groups", lambda *a: [_Group("g1", "a100-80gb")])
    monkeypatch.setattr(report, "ensure_predictors", lambda gpu, runs_dir: None)
    monkeypatch.setattr(report, "evaluate_group",
                        lambda g, store, console, program, workers, iterations:
                        programs.append((program, workers, iterations)) or _stop())
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
                        program="megatron-core", workers=2, iterations=2)
    assert programs == [("megatron-core", 2, 2)]


def _stop():
    raise KeyboardInterrupt


def test_the_report_prints_and_writes_each_layouts_measured_and_predicted_time(tmp_path, monkeypatch):
    from pipelines.search.evaluate import METHODS, GroupResult
    from pipelines.search.ranking import scores

    measured = {(1, 1, 2): 3.70, (2, 1, 8): 3.98, (8, 1, 2): 8.88}
    maya = {(1, 1, 2): 3.73, (2, 1, 8): 3.90, (8, 1, 2): 7.99}

    def evaluate(group, store, console, program, workers, iterations):
        r = GroupResult(name=group.name, kind="multi", gpus=64, layouts=3, measured=measured, wall_s=600.0,
                        iterations=iterations or 2)
        for m in METHODS:
            pred = maya if m == "maya" else {k: 4.0 for k in measured}
            r.predicted[m], r.scores[m] = pred, scores(pred, measured)
        return r

    monkeypatch.setattr(report, "select_groups", lambda *a: [_Group("multi-3.6B-64gpu", "a100-80gb")])
    monkeypatch.setattr(report, "ensure_predictors", lambda gpu, runs_dir: None)
    monkeypatch.setattr(report, "evaluate_group", evaluate)
    monkeypatch.setattr(report, "Store", lambda: None)
    out = io.StringIO()
    report.run_eval(efficiency=False, console=Console(file=out, width=200), out_dir=tmp_path)
    printed = out.getvalue()
    assert "MAPE / median signed" in printed
    assert "4.3% / -2.0%" in printed  # maya: errors +0.8%, -2.0%, -10.0%
    md = (tmp_path / "report.md").read_text()
    assert "| tp1-pp1-mb2 (measured best) | 3.700 | 3.730 |" in md
    assert "| tp8-pp1-mb2 | 8.880 | 7.990 |" in md and "-10.0% |" in md
    assert "| multi: all layouts | 3 |" in md
    assert "emulated iterations a trial: each group its own" in md
    assert "### multi-3.6B-64gpu (64 GPUs, 2 emulated iterations a trial)" in md
