"""A GPT with top-2 mixture-of-experts MLPs and expert parallelism over 2 ranks, written the way MoE
tutorials write it: router -> topk -> argsort, `torch.bincount` token counts, `.tolist()` split sizes, and
`all_to_all_single` dispatch and combine. Router choices follow the routing policy (`--routing`).
"""

import json

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


def _splits(t):
    """Each token all-to-all's (phase, input split sizes, output split sizes), in order."""
    a = t[(t.kind == "collective") & (t.op == "_c10d_functional::all_to_all_single")]
    return [(p, json.loads(s)["input_split_sizes"], json.loads(s)["output_split_sizes"])
            for p, s in zip(a.phase, a.args, strict=True)]


def test_routing_from_a_recorded_trace_sizes_the_all_to_alls(tmp_path):
    # measured per-layer expert loads (16 units over 8 experts): layer 0 favours rank 0's experts (0-3),
    # layer 1 rank 1's (4-7); 1,024 choices per layer split 320/192/128/128/64/64/64/64 (768 : 256 per rank)
    hot0 = [5, 3, 2, 2, 1, 1, 1, 1]
    trace = tmp_path / "routing.json"
    trace.write_text(json.dumps({"layers": [hot0, hot0[::-1]]}))
    run = emulate("moe_ep.py", tmp_path / "trace", nproc=2, flags=("--no-dedup", "--routing", f"trace:{trace}"))
    assert run.rc == 0 and run.summary["ok"], ok(run)
    spec = f"trace:{trace.resolve()}"
    assert run.summary["routing"] == spec and run.summary["unsupported_ops"] == {}
    s0, s1 = _splits(run.steady(0)), _splits(run.steady(1))
    assert len(s0) == len(s1) == LAYERS * 4  # dispatch and combine per layer, forward and backward
    # what each rank sends to each rank is what that rank expects from it, in every all-to-all
    for (p0, in0, out0), (p1, in1, out1) in zip(s0, s1, strict=True):
        assert p0 == p1 and in0[1] == out1[0] and in1[0] == out0[1]
    # forward dispatch: every rank routes as the file says, so the hot experts' rank receives 3x the tokens
    dispatch = [(in0, out0, in1, out1)
                for (p, in0, out0), (_, in1, out1) in zip(s0, s1, strict=True) if p == "forward"][::2]
    assert dispatch == [([768, 256], [768, 768], [768, 256], [256, 256]),
                        ([256, 768], [256, 256], [256, 768], [768, 768])]
    # bytes on the wire follow: rank 0's experts send 1,536 tokens back in layer 0 (bf16), rank 1's 512
    back = [b for p, b in _all_to_alls(run.steady(0)) if p == "forward" and b > 64][1::2]
    assert back == [1536 * 256 * 2, 512 * 256 * 2]
    assert [b for p, b in _all_to_alls(run.steady(1)) if p == "forward" and b > 64][1::2] == back[::-1]
    pred = simulate(run.out)
    assert pred["hang"] is None and pred["routing"] == spec and pred["iteration_time_s"] > 0


def test_a_trace_with_the_wrong_expert_count_fails_naming_it(tmp_path):
    trace = tmp_path / "four.json"
    trace.write_text("[[5, 3, 2, 2]]")
    run = emulate("moe_ep.py", tmp_path / "bad", nproc=2, flags=("--no-dedup", "--routing", f"trace:{trace}"))
    assert run.rc != 0 and not run.summary.get("ok")
    assert "router call 0 has 8 experts, the file's entry 0 lists 4 loads" in (run.summary.get("error") or "")
