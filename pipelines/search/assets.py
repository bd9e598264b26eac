"""Dagster: rerun the saved searches (`maya search --name NAME`) so a team sees when new predictors change
the answer.

`search_answers` reruns each saved search (`emulator.search.rerun_stored`): trials whose predictors
are unchanged are read back from the warehouse, the others re-simulated from their stored emulations
(no program runs again unless the program changed). Metadata per search: the best configuration, its
objective, and whether it changed since the previous run. `search_schedule` (weekly, off by default)
materializes it.
"""

import datetime as dt

import dagster as dg

from emulator.search import Store, rerun_stored


class SearchConfig(dg.Config):
    names: list[str] = []  # saved searches to rerun; empty: every saved search
    engine: str = "inline"  # "inline" or "ray"


def rerun_saved(names: list[str] | None = None, engine: str = "inline", store: Store | None = None) -> dict:
    """{name: {best, objective, changed, previous, counts}} after rerunning the saved searches."""
    store = store or Store()
    saved = store.saved()
    out = {}
    for name in names or sorted(saved):
        if name not in saved:
            raise ValueError(f"no saved search {name!r}; saved: {sorted(saved)}")
        res = rerun_stored(saved[name]["search_id"], store=store, engine=engine)
        best = res.best
        answer = dict(at=dt.datetime.now().isoformat(timespec="seconds"), search_id=res.search_id,
                      knobs=None if best is None else res.space.setting(best.key),
                      objective=None if best is None else best.value,
                      predictors=None if best is None else best.row.get("predictors"),
                      command=None if best is None else best.row.get("command"))
        previous = store.record_answer(name, answer)
        out[name] = dict(answer, counts=res.counts, previous=previous,
                         changed=previous is not None and previous.get("knobs") != answer["knobs"])
    return out


@dg.asset(group_name="search", compute_kind="python",
          description="The saved maya searches rerun against the current predictors: best configuration per search "
                      "and whether it changed (results under <warehouse>/search/).")
def search_answers(context: dg.AssetExecutionContext, config: SearchConfig) -> dg.MaterializeResult:
    answers = rerun_saved(config.names or None, config.engine)
    meta: dict = {"searches": dg.MetadataValue.int(len(answers))}
    for name, a in answers.items():
        meta[f"{name}_best"] = dg.MetadataValue.text(str(a["knobs"]))
        if a["objective"] is not None:
            meta[f"{name}_objective"] = dg.MetadataValue.float(float(a["objective"]))
        meta[f"{name}_changed"] = dg.MetadataValue.bool(bool(a["changed"]))
        meta[f"{name}_executed"] = dg.MetadataValue.int(int(a["counts"]["executed"]))
        if a["changed"]:
            context.log.warning(f"{name}: the answer changed from {a['previous']['knobs']} to {a['knobs']}")
    return dg.MaterializeResult(metadata=meta)


search_job = dg.define_asset_job("rerun_searches", selection=[search_answers],
                                 description="rerun every saved maya search")


@dg.schedule(job=search_job, cron_schedule="0 4 * * 1", default_status=dg.DefaultScheduleStatus.STOPPED)
def search_schedule(context: dg.ScheduleEvaluationContext):
    """Weekly: new champions (after a recalibration) may move a search's answer."""
    yield dg.RunRequest(run_key=f"searches-{context.scheduled_execution_time.strftime('%Y%m%d')}")


SEARCH_ASSETS = [search_answers]
