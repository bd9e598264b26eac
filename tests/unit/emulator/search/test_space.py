"""The search-space file: what it accepts, and the errors a user sees before any trial runs."""

import pytest

from emulator.search.space import Infeasible, SpaceError, parse_space

MEGATRON = """
[knobs]
tp = { values = [1, 2, 4, 8] }
pp = { values = [1, 2, 4] }
micro_batch = { values = [1, 2, 4], memory = "increasing" }
checkpoint = { type = "bool", memory = "decreasing", time = "increasing" }

[constants]
global_batch = 16
heads = 16

[derived]
dp = "gpus // (tp * pp)"
tokens = "global_batch * 1024"

[constraints]
layout = "gpus % (tp * pp) == 0"
batch = "global_batch % (dp * micro_batch) == 0"
heads = "heads % tp == 0"

[program]
args = ["--tp", "{tp}", "--pp", "{pp}", "--micro-batch", "{micro_batch}",
        { if = "checkpoint", args = ["--checkpoint"] }]
env = { CUDA_DEVICE_MAX_CONNECTIONS = "1" }

[predict]
tokens_per_iteration = "{tokens}"
"""


def test_megatron_space_renders_flags_env_layout_and_tokens():
    s = parse_space(MEGATRON, gpus=8)
    assert s.size() == 4 * 3 * 3 * 2
    vals = s.check({"tp": 2, "pp": 2, "micro_batch": 4, "checkpoint": True})
    assert vals["dp"] == 2
    plan = s.plan(vals)
    assert plan.argv == ["--tp", "2", "--pp", "2", "--micro-batch", "4", "--checkpoint"]
    assert plan.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert (plan.gpu, plan.nnodes, plan.nproc_per_node) == ("h100", 1, 8)
    assert plan.tokens_per_iteration == 16 * 1024
    assert "--checkpoint" not in s.plan(s.check({"tp": 2, "pp": 2, "micro_batch": 4, "checkpoint": False})).argv


def test_constraints_name_the_rule_a_configuration_breaks():
    s = parse_space(MEGATRON, gpus=8)
    with pytest.raises(Infeasible, match="constraint batch"):
        s.check({"tp": 1, "pp": 1, "micro_batch": 4, "checkpoint": False})  # dp 8 x 4 does not divide 16
    with pytest.raises(Infeasible, match="constraint layout"):
        s.check({"tp": 8, "pp": 2, "micro_batch": 1, "checkpoint": False})
    feasible = s.feasible()
    assert feasible and all(8 % (tp * pp) == 0 and 16 % (8 // (tp * pp) * mb) == 0 for tp, pp, mb, _ in feasible)


HARDWARE = """
[knobs]
gpu = { values = ["a100-80gb", "h100"] }
nodes = { type = "int", min = 1, max = 4 }
tp = { values = [4, 8] }

[derived]
gpus = "nodes * 8"

[program]
args = ["--tp", "{tp}"]

[cluster]
gpu = "{gpu}"
nnodes = "{nodes}"
nproc_per_node = 8
price_per_gpu_hour = 2.0
internode_bandwidth_GBps = 25
"""


def test_hardware_is_a_knob_and_cluster_settings_reach_the_prediction():
    s = parse_space(HARDWARE)
    plan = s.plan(s.check({"gpu": "a100-80gb", "nodes": 3, "tp": 8}))
    assert (plan.gpu, plan.nnodes, plan.nproc_per_node, plan.world_size) == ("a100-80gb", 3, 8, 24)
    assert plan.cluster == {"price_per_gpu_hour": 2.0, "internode_bandwidth_GBps": 25}
    # --gpus with a space that defines gpus: a constraint, not a redefinition
    assert {k[1] for k in parse_space(HARDWARE, gpus=16).feasible()} == {2}


@pytest.mark.parametrize("text, message", [
    ("[knobs]\ntp = { values = [1, 2] }\n[program]\nargs = ['--tp', '{tpp}']", "names \\['tpp'\\], which the space"),
    ("[knobs]\ntp = { values = [1, 2] }\n[constraints]\nc = 'tp % heads == 0'\n[program]\nargs = ['{tp}']",
     "unknown knob\\(s\\) \\['heads'\\]"),
    ("[knobs]\ntp = { vals = [1, 2] }", "unknown key\\(s\\) \\['vals'\\]"),
    ("[knobs]\ntp = { values = [] }", "no values"),
    ("[knobs]\ntp = { values = [1, 2] }\nidle = { values = [1] }\n[program]\nargs = ['{tp}']",
     "\\['idle'\\] reach no run"),
    ("[knobs]\ntp = { values = [1, 2] }\n[constraints]\nnever = 'tp > 2'\n[program]\nargs = ['{tp}']",
     "no configuration of the 2 meets every constraint \\(never rules out 2\\)"),
    ("[knob]\ntp = 1", "unknown section"),
    ("[knobs]\ntp = { values = [1, 2] }\n[program]\nargs = ['{tp.real}']", "names no knob"),
    ("[knobs]\ntp = { values = [1, 2] }\n[derived]\nx = '__import__(\"os\")'\n[program]\nargs = ['{tp}', '{x}']",
     "calls something other than"),
    ("[knobs]\ntp = { values = [1, 2] }\n[derived]\na = 'b + 1'\nb = 'a + 1'\n[program]\nargs = ['{a}', '{tp}']",
     "cycle"),
    ("[knobs]\ntp = { values = [1, 2] }\n[cluster]\nnics = 4\n[program]\nargs = ['{tp}']",
     "unknown key\\(s\\) \\['nics'\\]"),
    ("[knobs]\ntp = [1, 2]\n[program]\nargs = ['{tp}']\n[search]\nobjective = 'speed'", "objective must be one of"),
    ("[knobs\n", "not valid TOML"),
])
def test_bad_space_files_fail_before_any_trial_with_a_clear_message(text, message):
    with pytest.raises(SpaceError, match=message):
        parse_space(text, gpus=8)


def test_a_space_without_a_cluster_size_says_how_to_give_one():
    with pytest.raises(SpaceError, match="the cluster's size is unknown"):
        parse_space("[knobs]\ntp = [1, 2]\n[program]\nargs = ['--tp', '{tp}']")


def test_explicit_points_are_the_whole_space():
    text = MEGATRON + """
[[points]]
tp = 2
pp = 2
micro_batch = 2
checkpoint = true
[[points]]
tp = 8
pp = 1
micro_batch = 1
checkpoint = true
"""
    s = parse_space(text, gpus=8)
    assert s.feasible() == [(2, 2, 2, True), (8, 1, 1, True)]
    with pytest.raises(Infeasible, match="listed points"):
        s.check({"tp": 1, "pp": 1, "micro_batch": 1, "checkpoint": True})


def test_the_example_space_files_parse_and_set_overrides_constants():
    from emulator.search.space import load_space, parse_overrides
    from tests.paths import EXAMPLES

    sizes = {f: len(load_space(EXAMPLES / "search" / f"{f}.toml").feasible()) for f in ("megatron", "fsdp2",
                                                                                       "efficiency")}
    assert sizes["efficiency"] >= 1000 and sizes["megatron"] > 100 and sizes["fsdp2"] > 10
    small = load_space(EXAMPLES / "search" / "megatron.toml", overrides=parse_overrides(["layers=2", "hidden=128"]))
    plan = small.plan(small.check(dict(zip(small.knobs, small.feasible()[0], strict=True))))
    assert plan.argv[:4] == ["--layers", "2", "--hidden", "128"]
    with pytest.raises(SpaceError, match="only constants can be set"):
        load_space(EXAMPLES / "search" / "megatron.toml", overrides={"tp": 2})


def test_the_readmes_megatron_space_is_the_shipped_file():
    """The README shows `examples/search/megatron.toml` for users to copy: the same space, the same plans."""
    import re

    from emulator.search.space import load_space
    from tests.paths import EXAMPLES

    readme = (EXAMPLES.parent / "README.md").read_text()
    shown = re.search(r"The Megatron one:\s*```toml\n(.*?)```", readme, re.S).group(1)
    s, shipped = parse_space(shown), load_space(EXAMPLES / "search" / "megatron.toml")
    assert s.knobs == shipped.knobs and s.feasible() == shipped.feasible()
    assert (s.cluster, s.predict, s.defaults) == (shipped.cluster, shipped.predict, shipped.defaults)
    first = dict(zip(s.knobs, s.feasible()[0], strict=True))
    assert s.plan(s.check(first)) == shipped.plan(shipped.check(first))


def test_a_set_constant_keeps_its_kind():
    from emulator.search.space import load_space, parse_overrides
    from tests.paths import EXAMPLES

    with pytest.raises(SpaceError, match=r"--set layers='abc': the file's layers is a number \(24\)"):
        load_space(EXAMPLES / "search" / "megatron.toml", overrides=parse_overrides(["layers=abc"]))
    assert load_space(EXAMPLES / "search" / "megatron.toml", overrides=parse_overrides(["layers=12"])).constants[
        "layers"] == 12
