"""Fault injection: every kind of output file truncated or foreign, then `maya simulate` of the folder.

What the user must see: one `error:` line naming the damaged file and what is wrong (no traceback),
exit 2, and no prediction.json / timeline.json of an earlier simulation left beside the damage.
Outputs that `maya simulate` writes itself (prediction.json, timeline.json) are simply replaced."""

import json
import os

import pytest
from typer.testing import CliRunner

from emulator.bench.synthetic import ddp_rank, write_job
from emulator.cli import app
from emulator.core.exitcodes import Exit
from emulator.trace.io import DamagedFile, read_rank_summary, write_rank_summary
from emulator.trace.layout import rank_summary_path, rank_trace_path
from emulator.trace.summaries import RankSummary

runner = CliRunner()


@pytest.fixture
def out(tmp_path):
    out = write_job(tmp_path / "out", {r: ddp_rank(r, 2).table() for r in range(2)})
    assert simulate(out).exit_code == Exit.OK
    assert (out / "prediction.json").exists() and (out / "timeline.json").exists()
    return out


def simulate(out):
    return runner.invoke(app, ["simulate", str(out), "--roofline-only"])


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def edit_summary(out, **changes):
    path = out / "emulation.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


DAMAGE = {
    "truncated trace": (lambda out: truncate(rank_trace_path(out, 1)), "part-0.parquet: not a readable Parquet file"),
    "missing trace": (lambda out: rank_trace_path(out, 1).unlink(), "part-0.parquet: no such file"),
    "truncated emulation.json": (lambda out: truncate(out / "emulation.json"), "emulation.json: not valid JSON"),
    "foreign schema version": (lambda out: edit_summary(out, schema_version=999), "emulation.json: schema version 999"),
    "a value of the wrong type": (lambda out: edit_summary(out, world_size="two"),
                                  "emulation.json: 'world_size' is 'two', not int"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_input_is_one_line_naming_the_file(out, damage):
    hurt, message = DAMAGE[damage]
    hurt(out)
    res = simulate(out)
    assert res.exit_code == Exit.BAD_INPUT, res.output
    assert message in res.output and "Traceback" not in res.output
    assert res.output.lstrip().startswith("error:")
    assert not (out / "prediction.json").exists() and not (out / "timeline.json").exists()


def test_debug_shows_the_traceback(out):
    truncate(rank_trace_path(out, 0))
    res = runner.invoke(app, ["simulate", str(out), "--roofline-only", "--debug"])
    assert res.exit_code != Exit.OK and isinstance(res.exception, DamagedFile)


@pytest.mark.parametrize("name", ["prediction.json", "timeline.json"])
def test_a_damaged_output_of_simulate_is_replaced(out, name):
    truncate(out / name)
    assert simulate(out).exit_code == Exit.OK
    json.loads((out / name).read_text())  # whole again


def test_a_truncated_rank_summary_is_named(tmp_path):
    write_rank_summary(tmp_path, RankSummary(rank=3, ok=True))
    truncate(rank_summary_path(tmp_path, 3))
    with pytest.raises(DamagedFile, match=r"rank=3\.json: not valid JSON"):
        read_rank_summary(tmp_path, 3)
