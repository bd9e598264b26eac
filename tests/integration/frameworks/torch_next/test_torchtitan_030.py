"""torchtitan 0.3.0 (unmodified, its defaults) trains under `maya emulate -m torchtitan.train` on 2 ranks, torch 2.14.

`make test-torch-next` runs this in a venv of its own (torch 2.14.1, torchtitan 0.3.0); elsewhere (torch 2.13 and
torchtitan 0.2.2, `test_torchtitan.py`) it is skipped. 0.3.0 names its model with `--module llama3 --config
llama3_debugmodel` (6 layers, FlexAttention, seq 2048, local batch 8, selective activation checkpointing, FSDP
over every rank) and, by default, wraps forward + backward in a CUDA graph (`wrap_with_cuda_graph`): the first
step runs eagerly, the second captures, every later one replays the graph.
"""

import json
from importlib import metadata

import pytest

from tests.integration.frameworks.run import emulate_module, ok, simulate
from tests.integration.frameworks.test_torchtitan import LLAMA_LAYERS, _collectives, _last_step

pytest.importorskip("torchtitan")
if tuple(int(p) for p in metadata.version("torchtitan").split(".")[:2]) < (0, 3):
    pytest.skip("torchtitan < 0.3: `make test-torch-next` runs this file", allow_module_level=True)

CONFIG = ("--module", "llama3", "--config", "llama3_debugmodel")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    import subprocess
    import sys

    from tests.paths import REPO

    assets = tmp_path_factory.mktemp("torchtitan")
    subprocess.run([sys.executable, str(REPO / "examples" / "third_party" / "torchtitan_assets.py"), str(assets)],
                   check=True, capture_output=True)
    return emulate_module("torchtitan.train", tmp_path_factory.mktemp("titan-out"), *CONFIG, cwd=assets, nproc=2,
                          flags=("--iterations", "3"))


def test_defaults_complete_on_both_ranks_with_compiled_flex_attention(run):
    assert run.rc == 0 and run.summary["ok"], ok(run)
    assert run.summary["iterations_found"] == 3 and run.summary["unsupported_ops"] == {}
    assert run.summary["compiled"].get("torch.compile", 0) >= 1 and run.summary["eager_fallbacks"] == {}
    assert "dp_shard=2" in run.log(0) and "Applied FSDP to the model" in run.log(0)
    kernels = _last_step(run)[lambda t: t.kind == "kernel"]
    names = kernels[kernels.op == "triton::template"].args.map(lambda a: json.loads(a)["kernel"])
    assert names.str.contains("flex_attention_backward").sum() == LLAMA_LAYERS  # Inductor's templates, per block
    assert (names.str.contains("flex_attention") & ~names.str.contains("backward")).sum() == LLAMA_LAYERS
    other = _last_step(run, 1)
    assert list(other[other.kind == "kernel"].op) == list(kernels.op)  # both ranks did the same work


def test_steady_steps_replay_the_captured_forward_and_backward(run):
    trace = run.trace(0)
    captures = trace[trace.op == "cuda::graph_capture"]
    assert captures.args.map(lambda a: json.loads(a)["rows"]).max() > 0  # the step captured once, not per step
    step = _last_step(run)
    kernels = step[step.kind == "kernel"]
    replayed = kernels[kernels.graph_replay.notna()]
    assert kernels.graph_replay.nunique() == 1 and len(replayed) > 0.8 * len(kernels)  # outside: the optimizer
    assert (replayed.host_gap_s.iloc[1:] == 0).all()  # one launch replays the whole graph
    # FSDP2's per-unit all-gathers and reduce-scatters are inside the graph too, over both ranks
    gathers, scatters = _collectives(step, "c10d::_allgather_base_"), _collectives(step, "c10d::_reduce_scatter_base_")
    units = LLAMA_LAYERS + 2  # the embedding, each block, norm + output
    assert len(gathers) >= 2 * units - 1 and len(scatters) >= units
    assert gathers.graph_replay.notna().all() and scatters.graph_replay.notna().all()
    assert all(list(g) == [0, 1] for g in [*gathers.group_ranks, *scatters.group_ranks])


def test_prediction_is_a_step_time(run):
    pred = simulate(run.out)
    assert pred["hang"] is None and pred["iteration_time_s"] > 0 and pred["mfu"] > 0
