"""In-training CPU rows: a calibration program that crashes is reported and writes nothing."""

from pipelines.runners.in_training import Program, run


def test_a_crashing_program_is_named_and_leaves_no_rows(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("raise RuntimeError('boom in the training script')\n")
    s = run("cpu", run_id="it-test", root=tmp_path / "wh", budget_s=60,
            programs=(Program("broken", str(script), 1, ()),))
    assert s["chunks_written"] == 0 and not s["complete"]
    assert len(s["failed"]) == 1 and s["failed"][0].startswith("broken: maya profile exited")
    assert not (tmp_path / "wh" / "measurements").exists()
