"""Memory-monotone pruning: a known OOM rules out hungrier configurations, a fitting one the slower savers."""

from emulator.search.prune import Pruner
from emulator.search.space import parse_space

from .fake import SPACE


def _pruner():
    return Pruner(parse_space(SPACE, gpus=8))


def test_an_oom_rules_out_configurations_that_need_at_least_as_much_memory():
    p = _pruner()
    p.record((2, 4, False, "h100"), oom=True, trial=3)
    skip = p.why_skip((2, 8, False, "h100"))
    assert skip.rule == 1 and skip.trial == 3 and "ran out of memory" in skip.reason
    assert p.why_skip((2, 2, False, "h100")) is None  # less memory: must run
    assert p.why_skip((2, 8, True, "h100")) is None  # checkpointing saves memory: not proven
    assert p.why_skip((4, 8, False, "h100")) is None  # another TP: a knob with no declared direction
    assert p.why_skip((2, 8, False, "a100-80gb")) is None


def test_a_fit_rules_out_savers_that_cannot_be_faster():
    p = _pruner()
    p.record((2, 4, False, "h100"), oom=False, trial=5)
    skip = p.why_skip((2, 4, True, "h100"))  # checkpointing: less memory, declared never faster
    assert skip.rule == 2 and "checkpoint" in skip.reason
    # a smaller micro-batch saves memory but declares no time: it may be faster, so it runs
    assert p.why_skip((2, 2, True, "h100")) is None
    assert p.why_skip((2, 2, False, "h100")) is None


def test_no_memory_knobs_no_pruning():
    p = Pruner(parse_space("[knobs]\ntp = [1, 2]\n[program]\nargs = ['{tp}']", gpus=2))
    p.record((1,), oom=True, trial=1)
    assert not p.active and p.why_skip((2,)) is None
