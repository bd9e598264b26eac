"""CUDA graphs the two ways PyTorch's docs show: a whole-network capture for inference (warm-up on a side
stream, `torch.cuda.graph`, `replay()`), and `make_graphed_callables` for training."""

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.trace.layout import rank_trace_path
from tests.integration.frameworks.run import emulate, ok, simulate


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return emulate("cuda_graphs.py", tmp_path_factory.mktemp("graphs"))


def test_replays_reissue_the_captured_kernels_with_no_per_kernel_host_gaps(run):
    assert run.rc == 0 and run.summary["ok"], ok(run)
    t = run.trace()
    captures = t[t.op == "cuda::graph_capture"]
    assert len(captures) == 3  # the inference graph, the forward and the backward graph
    steady = run.steady()
    k = steady[steady.kind == "kernel"]
    replayed = k[k.graph_replay.notna()]
    assert len(replayed) > 0.8 * len(k)  # the training step is the two graphs, plus loss and optimizer
    for _, rows in replayed.groupby("graph_replay"):
        assert (rows.host_gap_s.iloc[1:] == 0).all()  # one host call launches the whole graph


def test_graph_replay_pays_one_launch_and_the_capture_keeps_its_pool(run, tmp_path):
    k = run.steady()
    k = k[k.kind == "kernel"]
    saved = (k.graph_replay.notna().sum() - k.graph_replay.nunique()) * 4e-6  # launches a replay does not pay
    # the same trace with every row launched on its own
    one_by_one = tmp_path / "one_by_one"
    shutil.copytree(run.out, one_by_one)
    path = rank_trace_path(one_by_one, 0)
    table = pq.read_table(path)
    i = table.schema.get_field_index("graph_replay")
    pq.write_table(table.set_column(i, "graph_replay", pa.nulls(table.num_rows, pa.int64())), path)
    graphed, plain = simulate(run.out), simulate(one_by_one)
    assert plain["breakdown_s"]["host"] - graphed["breakdown_s"]["host"] == pytest.approx(saved, rel=1e-3)
    # what the capture freed stays in the graph's private pool: empty_cache cannot give it back
    cached = [int(x.split("=")[1]) for x in run.log().splitlines() if x.startswith("cached_after_empty_cache=")]
    assert cached and cached[0] >= 8 * 128 * 1024 * 2  # at least the logits' worth of freed activations
