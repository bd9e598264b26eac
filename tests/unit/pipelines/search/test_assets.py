"""The saved-search rerun behind the Dagster schedule: cached trials are read back, the answer is tracked."""

import io

from rich.console import Console

from emulator.search import Options, Program, Store, run_search
from emulator.search.space import parse_space
from pipelines.definitions import defs
from pipelines.search.assets import rerun_saved
from tests.unit.emulator.search.fake import SPACE, FakeEvaluator


def test_a_saved_search_reruns_from_the_cache_and_reports_whether_the_answer_moved(tmp_path):
    store = Store(tmp_path / "search")
    space = parse_space(SPACE, gpus=8)
    opts = Options(engine="inline", algorithm="grid", budget=1000, gpus=8, roofline_only=True)
    res = run_search(space, Program.of("/w/train.py", None, ()), opts, store=store,
                     console=Console(file=io.StringIO()), evaluate=FakeEvaluator())
    store.save("team-job", res.search_id)
    first = rerun_saved(store=store)["team-job"]  # every trial cached: nothing runs (the real runner would fail)
    assert first["counts"]["executed"] == 0 and first["counts"]["cached"] == res.counts["executed"]
    assert first["knobs"] == {"tp": 2, "micro_batch": 4, "checkpoint": False, "gpu": "h100"}
    assert first["previous"] is None and not first["changed"]
    second = rerun_saved(["team-job"], store=store)["team-job"]
    assert second["previous"]["knobs"] == first["knobs"] and not second["changed"]
    assert len(store.saved()["team-job"]["answers"]) == 2


def test_the_schedule_is_wired_and_off_by_default():
    repo = defs.get_repository_def()
    assert "search_answers" in {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    sched = repo.get_schedule_def("search_schedule")
    assert sched.default_status.value == "STOPPED"
