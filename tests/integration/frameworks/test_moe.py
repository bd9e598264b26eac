"""A GPT with top-2 mixture-of-experts MLPs and expert parallelism over 2 ranks, written the way MoE
tutorials write it: router -> topk -> argsort, `torch.bincount` token counts, `.tolist()` split sizes, and
`all_to_all_single` dispatch and combine. Router choices follow the routing policy (`--routing`).
"""

import pytest

from tests.integration.frameworks.run import emulate, ok, simulate

LAYERS, EXPERTS, TOKENS, TOP_K = 2, 8, 4 * 128, 2


@pytest.fixture(scope="module")
def balanced(tmp_path_factory):
    return emulate("moe_ep.py", tmp_path_factory.mktemp("moe"), nproc=2, flags=("--no-dedup",))


def _all_to_alls(t):
    a = t[(t.kind == "collective") & t.op.str.contains("alltoall|all_to_all")]
    return list(zip(a.phase, a.coll_bytes, strict=True))


def test_balanced_routing_all_to_alls_match_across_ranks(balanced):
    run = balanced
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert run.summary["routing"] == "balanced" and run.summary["unsupported_ops"] == {}
    r0, r1 = _all_to_alls(run.steady(0)), _all_to_alls(run.steady(1))
    # per layer and pass: counts, then tokens out and back (forward), and the gradients' way (backward)
    assert len(r0) == len(r1) == LAYERS * 5 and r0 == r1
    dispatch = [b for p, b in r0 if p == "forward" and b > 64]  # the tokens out and back (counts: 64 bytes)
    # every routed token out (fp32, the norm's output under autocast) and back (bf16, the experts' output)
    assert dispatch == [TOKENS * TOP_K * 256 * 4, TOKENS * TOP_K * 256 * 2] * LAYERS
    assert simulate(run.out)["routing"] == "balanced"


def test_skewed_routing_sends_uneven_amounts_and_still_simulates(tmp_path):
    run = emulate("moe_ep.py", tmp_path / "zipf", nproc=2, flags=("--no-dedup", "--routing", "zipf:1.2"))
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert run.summary["routing"] == "zipf:1.2"
    assert _all_to_alls(run.steady(0)) != _all_to_alls(run.steady(1))  # the hot experts' rank gets more back
    pred = simulate(run.out)
    assert pred["hang"] is None and pred["routing"] == "zipf:1.2" and pred["iteration_time_s"] > 0
