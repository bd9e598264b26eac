"""The Dagster instance maya writes is one Dagster accepts, with the limits it promises."""

import dagster as dg

from pipelines.resources import ensure_instance


def test_written_instance_loads_with_per_gpu_run_limit_and_pool_limit(tmp_path, monkeypatch):
    home = ensure_instance(tmp_path / "home")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = dg.DagsterInstance.get()
    config = instance.get_concurrency_config()
    assert config.pool_config.default_pool_limit == 1
    limits = config.run_queue_config.tag_concurrency_limits
    assert [(limit["key"], limit["limit"]) for limit in limits] == [("maya/gpu", 1)]


def test_a_teams_own_instance_file_is_kept(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    ensure_instance(home)
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: true\n"
