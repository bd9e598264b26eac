"""A vTrain group as a search space: its points listed costliest first, so trials run at once end together."""

import pytest

from emulator.search.space import parse_space
from pipelines.search.__main__ import main
from pipelines.search.groups import ITERATIONS, Group
from pipelines.validation.holdout import Case


def _case(tp: int, pp: int, micro_batch: int, gpus: int = 8, global_batch: int = 64) -> Case:
    dp = gpus // (tp * pp)
    args = ["--layers", "4", "--tp", str(tp), "--pp", str(pp), "--micro-batch", str(micro_batch)]
    return Case(name=f"t{tp}p{pp}m{micro_batch}", source="vtrain-single", gpu="a100-80gb", world_size=gpus,
                nproc_per_node=gpus, nnodes=1, measured_s=1.0, args=args,
                model={"layers": 4, "hidden": 64, "heads": 4, "vocab": 128, "seq": 32},
                parallel={"tp": tp, "pp": pp, "dp": dp, "micro_batch": micro_batch, "global_batch": global_batch})


def test_points_come_costliest_first_and_the_space_keeps_every_layout():
    group = Group("g", "single", [_case(1, 1, 8), _case(2, 1, 1), _case(1, 1, 1), _case(8, 1, 2), _case(4, 1, 1)])
    # micro-batches a rank runs: TP1 mb8 1, TP2 mb1 16, TP1 mb1 8, TP8 mb2 32, TP4 mb1 32
    assert group.costliest_first() == [(8, 1, 2), (4, 1, 1), (2, 1, 1), (1, 1, 1), (1, 1, 8)]
    space = parse_space(group.space_toml(), path="test")
    assert list(space.candidates()) == group.costliest_first()


def test_a_group_name_that_selects_nothing_is_an_error_that_names_the_groups(monkeypatch):
    from pipelines.search import evaluate

    multi = [Group("multi-3.6B-64gpu", "multi", [_case(8, 1, 1)]),
             Group("multi-39.1B-512gpu", "multi", [_case(4, 2, 1)])]
    single = [Group(f"single-{i}", "single", [_case(1, 1, m) for m in (1, 2, 4, 8, 16)]) for i in range(3)]
    monkeypatch.setattr(evaluate, "vtrain_groups", lambda kind: multi if kind == "multi" else single)
    assert [g.name for g in evaluate.select_groups(("multi-3.6B-64gpu",), 0, "multi")] == ["multi-3.6B-64gpu"]
    with pytest.raises(evaluate.GroupSelectionError, match="name multi-39.1B-512gpu with --multi"):
        evaluate.select_groups(("multi-3.6B-64gpu",), 0, "39.1B")
    with pytest.raises(evaluate.GroupSelectionError, match="no multi-node group named multi-9B.*multi-3.6B-64gpu"):
        evaluate.select_groups(("multi-9B",), 0)
    assert main(["--multi", "multi-9B", "--no-efficiency"]) == 2


def test_a_group_emulates_the_iterations_asked_for_and_never_fewer_than_a_steady_one():
    """`--iterations N`: every trial of the group emulates N optimizer steps (the program runs one more); by
    default a single-node group (host-bound) as many as the validation, a multi-node one (device-bound) 2. One
    alone would leave no steady iteration, and is refused before any trial."""
    group = Group("g", "single", [_case(1, 1, 8), _case(2, 1, 1)])
    knobs = dict(zip(("tp", "pp", "micro_batch"), group.costliest_first()[0], strict=True))
    default = parse_space(group.space_toml(), path="t").plan(knobs)
    fewer = parse_space(group.space_toml(2), path="t").plan(knobs)
    assert default.iterations == ITERATIONS > 2 and fewer.iterations == 2
    assert default.argv[default.argv.index("--steps") + 1] == str(ITERATIONS + 1)
    assert fewer.argv[fewer.argv.index("--steps") + 1] == "3"
    multi = Group("m", "multi", group.cases)
    by_default, asked = (parse_space(multi.space_toml(n), path="t").plan(knobs) for n in (None, ITERATIONS))
    assert by_default.iterations == 2 and by_default.argv[by_default.argv.index("--steps") + 1] == "3"
    assert asked.iterations == ITERATIONS
    with pytest.raises(ValueError, match="at least 2"):
        group.space_toml(1)
    with pytest.raises(SystemExit):
        main(["--iterations", "1", "--no-efficiency"])


def test_a_ranking_program_that_is_not_installed_is_refused_before_any_trial(monkeypatch, capsys):
    """megatron-core is a test-time extra: asking for its program without it is a usage error naming the fix."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "megatron" else real_find_spec(name, *a, **k))
    with pytest.raises(SystemExit) as stop:
        main(["--program", "megatron-core", "--no-efficiency"])
    assert stop.value.code == 2
    assert "make test-frameworks" in capsys.readouterr().err
