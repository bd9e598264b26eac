"""What `maya search` prints and writes: the ranked table, the summary, the best command, Pareto files, JSON."""

import io
import json

from rich.console import Console

from emulator.search import Options, Program, Store
from emulator.search.driver import Search, run_inline
from emulator.search.report import pareto, print_report, to_json, write_pareto
from emulator.search.space import parse_space

from .fake import SPACE, FakeEvaluator, fake_versions


def _result(tmp_path, evaluate=None):
    s = Search(parse_space(SPACE, gpus=8), Program("/w/train.py", None, (), "h"),
               Options(engine="inline", algorithm="grid", budget=1000), store=Store(tmp_path / "s"),
               evaluate=evaluate or FakeEvaluator(), console=Console(file=io.StringIO()), versions=fake_versions)
    return run_inline(s)


def test_terminal_report_ranks_and_says_what_the_answer_cost(tmp_path):
    res = _result(tmp_path)
    buf = io.StringIO()
    print_report(res, Console(file=buf, width=200), top=5)
    text = buf.getvalue()
    assert "best 5 of" in text and "executed" in text and "skipped by pruning" in text
    assert "best: tp=2 micro_batch=4 checkpoint=False gpu=h100" in text
    assert "oom — out of memory on rank(s) [0]" in text
    assert "bound by" in text and "compute" in text  # what sets each configuration's step
    assert "host-bound" not in text  # a device-bound best is told apart by its kernels


def test_a_host_bound_best_names_the_configurations_this_machines_host_timing_cannot_tell_from_it(tmp_path):
    """Every step host-bound with a +-10% range: the best (1.25 s) reaches 1.375 s; tp=2 micro_batch=2 (1.5 s)
    and tp=2 micro_batch=8 with checkpointing (1.525 s) start under that, the rest above it."""
    res = _result(tmp_path, FakeEvaluator(host_band=0.1))
    buf = io.StringIO()
    print_report(res, Console(file=buf, width=400), top=5)
    text = buf.getvalue()
    assert "the best is host-bound: its step is 1.125-1.375 s" in text
    assert "2 more configuration(s) overlap that range (tp=2 micro_batch=2 checkpoint=False gpu=h100, " \
           "tp=2 micro_batch=8 checkpoint=True gpu=h100)" in text
    assert to_json(res)["best"]["iteration_time_band_s"] == [1.125, 1.375]


def test_pareto_front_files_and_json(tmp_path):
    res = _result(tmp_path)
    front = pareto(res.ranked())
    assert front[0].key == res.best.key  # the fastest is on the front
    times = [e.row["iteration_time_s"] for e in front]
    costs = [e.row["cost_per_million_tokens_usd"] for e in front]
    assert times == sorted(times) and costs == sorted(costs, reverse=True)
    files = write_pareto(res, tmp_path / "out")
    assert (tmp_path / "out" / "pareto.png").stat().st_size > 1000
    assert "<svg" in (tmp_path / "out" / "pareto.html").read_text()
    doc = json.loads((tmp_path / "out" / "search.json").read_text())
    assert doc == json.loads(json.dumps(to_json(res, {k: v for k, v in files.items() if k != "json"}), default=str))
    assert doc["best"]["rank"] == 1 and doc["counts"]["evaluated"] == res.counts["evaluated"]
    assert doc["trials"][0]["knobs"] == {"tp": 2, "micro_batch": 4, "checkpoint": False, "gpu": "h100"}
    assert doc["trials"][0]["bound_by"] == "compute"
