"""The routing policy: token counts per expert, the same on every rank, named clearly when wrong."""

import json

import pytest

from emulator.core.routing import RoutingPolicy, RoutingPolicyError


def test_balanced_splits_evenly_remainder_first():
    p = RoutingPolicy.parse(None)
    assert p.spec == "balanced"
    assert p.counts(10, 4) == [3, 3, 2, 2]


def test_zipf_is_skewed_sums_to_n_and_moves_the_hot_expert_with_the_router_call():
    p = RoutingPolicy.parse("zipf:1.2")
    c0, c1 = p.counts(512, 8, call=0), p.counts(512, 8, call=1)
    assert sum(c0) == sum(c1) == 512
    assert c0[0] == max(c0) and c0 == sorted(c0, reverse=True)
    assert c1[1] == max(c1) and c1[1:] + c1[:1] == c0


def test_a_cap_spills_over_to_the_other_experts():
    c = RoutingPolicy.parse("zipf:3").counts(400, 4, cap=200)  # 200 tokens, top-2: one choice per token at most
    assert sum(c) == 400 and max(c) == 200


def test_trace_file_gives_measured_loads_per_router_call(tmp_path):
    f = tmp_path / "loads.json"
    f.write_text(json.dumps({"layers": [[3, 1], [1, 1]]}))
    p = RoutingPolicy.parse(f"trace:{f}")
    assert p.spec == f"trace:{f.resolve()}"
    assert p.counts(8, 2, call=0) == [6, 2] and p.counts(8, 2, call=1) == [4, 4] and p.counts(8, 2, call=2) == [6, 2]
    with pytest.raises(RoutingPolicyError, match="3 experts"):
        p.counts(8, 3)


@pytest.mark.parametrize("spec", ["zipf", "zipf:-1", "uniform", "trace:/no/such/file.json"])
def test_bad_policies_are_named(spec):
    with pytest.raises(RoutingPolicyError, match="--routing"):
        RoutingPolicy.parse(spec)
