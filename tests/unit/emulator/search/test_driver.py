"""The search loop with a cheap evaluator: what a user sees in the summary, the cache, pruning, resume."""

from pathlib import Path

import pytest
from rich.console import Console

from emulator.search import Options, Program, Store, run_search
from emulator.search.driver import Search, run_inline
from emulator.search.space import parse_space

from .fake import SPACE, FakeEvaluator, fake_versions

PROGRAM = Program(script="train.py", module=None, argv=("--steps", "3"), hash="fakehash")
BEST = (2, 4, False, "h100")  # 1.25 s: the fastest configuration that fits


def _search(store, evaluate, **opts):
    space = parse_space(SPACE, gpus=8)
    o = Options(engine="inline", **{"algorithm": "grid", "budget": 1000} | opts)
    return Search(space, PROGRAM, o, store=store, evaluate=evaluate, console=Console(file=open("/dev/null", "w")),
                  versions=fake_versions)


def test_grid_finds_the_optimum_and_the_summary_accounts_for_every_configuration(tmp_path):
    ev = FakeEvaluator()
    res = run_inline(_search(Store(tmp_path), ev))
    c = res.counts
    assert res.best.key == BEST and res.best.value == pytest.approx(1.25)
    assert c["executed"] == len(ev.calls) and c["cached"] == 0
    assert c["executed"] + c["skipped"] == c["feasible_space"] == len(res.space.feasible())
    assert c["skipped"] > 0 and c["oom"] > 0  # pruning saved trials, and never skipped the answer
    for e in res.entries:
        if e.outcome == "skipped":
            assert e.reason and "trial" in e.reason


def test_a_second_search_reads_every_trial_back_and_new_predictors_re_run(tmp_path):
    store = Store(tmp_path)
    first = FakeEvaluator()
    run_inline(_search(store, first))
    again = FakeEvaluator()
    res = run_inline(_search(store, again))
    assert again.calls == [] and res.counts["cached"] == len(first.calls) and res.counts["executed"] == 0
    new = FakeEvaluator()
    s = _search(store, new)
    s._lookup_versions = lambda gpu, r: {"kernels": f"fake-{gpu} v2", "collectives": "x"}
    s._versions.clear()
    assert run_inline(s).counts["executed"] == len(first.calls)


def test_ctrl_c_keeps_finished_trials_and_a_rerun_resumes(tmp_path):
    store = Store(tmp_path)
    res = run_inline(_search(store, FakeEvaluator(interrupt_after=5)))
    assert res.interrupted and res.counts["executed"] == 5
    assert len(list((tmp_path / "trials").glob("*.parquet"))) == 5
    rest = FakeEvaluator()
    res2 = run_inline(_search(store, rest))
    assert not res2.interrupted and res2.counts["cached"] == 5 and res2.best.key == BEST
    # a caller running search after search (make search-eval) stops at the interrupted one
    with pytest.raises(KeyboardInterrupt, match="interrupted"):
        res.completed()
    assert res2.completed() is res2
    full = FakeEvaluator()
    run_inline(_search(Store(tmp_path / "fresh"), full))
    assert len(rest.calls) + 5 == len(full.calls)


def test_a_crashing_trial_is_recorded_with_its_traceback_and_the_search_goes_on(tmp_path):
    res = run_inline(_search(Store(tmp_path), FakeEvaluator(crash_on=(2, 4))))
    crashed = [e for e in res.entries if e.status == "crash"]
    assert len(crashed) == 4 and all(e.row["traceback_path"] == "/tmp/tb.txt" for e in crashed)  # ckpt x gpu
    assert res.counts["crash"] == 4 and res.best.key == (2, 2, False, "h100")  # the next best that ran


def test_budget_counts_evaluations_and_cmaes_reaches_the_optimum(tmp_path):
    res = run_inline(_search(Store(tmp_path), FakeEvaluator(), budget=6))
    assert res.counts["evaluated"] == 6
    res = run_inline(_search(Store(tmp_path / "cma"), FakeEvaluator(), algorithm="cmaes", budget=40, seed=1))
    assert res.best.value == pytest.approx(1.25)
    assert res.counts["evaluated"] <= 40


def test_run_table_and_search_json_are_written_for_the_dagster_rerun(tmp_path):
    store = Store(tmp_path / "search")
    space = parse_space(SPACE, gpus=8)
    opts = Options(engine="inline", algorithm="random", budget=8, gpus=8)
    res = run_search(space, PROGRAM, opts, store=store, console=Console(file=open("/dev/null", "w")),
                     evaluate=FakeEvaluator(), versions=fake_versions)
    meta = store.read_meta(res.search_id)
    assert meta["options"]["algorithm"] == "random" and meta["space_text"] == SPACE
    assert meta["best"]["knobs"] == space.setting(res.best.key)
    import duckdb

    con = duckdb.connect(str(tmp_path / "maya.duckdb"), read_only=True)
    assert con.execute("select count(*) from search_trials").fetchone()[0] == res.counts["executed"]
    assert con.execute("select count(*) from search_runs").fetchone()[0] == len(res.entries)
    assert Path(store.run_dir(res.search_id) / "trials.parquet").exists()
