"""Collate: what a user sees when the ranks of a job do not line up, or the trace is not readable."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.bench.synthetic import TraceBuilder, ddp_rank, write_job
from emulator.collate.hangs import HangError
from emulator.collate.job import CollateError, collate, collate_tables
from emulator.hosttime import clip_spikes
from emulator.trace.layout import rank_trace_path
from emulator.trace.schema import TraceSchemaError
from emulator.trace.summaries import EmulationSummary


def _summary(world, nnodes=1):
    return EmulationSummary(world_size=world, nnodes=nnodes, nproc_per_node=world // nnodes, gpu="h100")


def _ranks_with(colls_by_rank):
    tables = {}
    for r, colls in colls_by_rank.items():
        b = TraceBuilder(r)
        for op, nbytes in colls:
            b.kernel("aten::add", [[4, 4], [4, 4]], ["float32"] * 2)
            b.collective(op, "0", sorted(colls_by_rank), nbytes)
        tables[r] = b.table()
    return tables


def test_a_rank_that_skips_a_collective_is_a_hang_naming_ranks_group_and_collective():
    tables = _ranks_with({0: [("c10d::allreduce_", 64), ("c10d::allreduce_", 64)],
                          1: [("c10d::allreduce_", 64), ("c10d::allreduce_", 64)],
                          2: [("c10d::allreduce_", 64)]})
    with pytest.raises(HangError) as e:
        collate_tables(tables, _summary(3))
    msg = str(e.value)
    assert "all_reduce #1" in msg and "group '0'" in msg and "never by ranks [2]" in msg
    issue = e.value.report.issues[0]
    assert issue.missing == [2] and issue.issued_by == [0, 1] and issue.collective == "all_reduce"


def test_members_issuing_different_collectives_is_reported():
    tables = _ranks_with({0: [("c10d::allreduce_", 64)], 1: [("c10d::_allgather_base_", 128)]})
    with pytest.raises(HangError, match=r"ranks \[0\] issued all_reduce of 64 bytes; ranks \[1\] issued all_gather"):
        collate_tables(tables, _summary(2))


def test_all_to_all_members_may_send_different_amounts_but_other_sizes_must_agree():
    # an expert-parallel MoE's dispatch with uneven splits: each rank sends what it routed (all_to_allv)
    collate_tables(_ranks_with({0: [("c10d::alltoall_base_", 4096)], 1: [("c10d::alltoall_base_", 1024)]}),
                   _summary(2))
    with pytest.raises(HangError, match="differs"):
        collate_tables(_ranks_with({0: [("c10d::allreduce_", 4096)], 1: [("c10d::allreduce_", 1024)]}), _summary(2))


def test_unmatched_send_is_reported():
    tables = {}
    for r in range(2):
        b = TraceBuilder(r)
        if r == 0:
            b.p2p("c10d::send", 1, 1024)
            b.p2p("c10d::send", 1, 1024)
        else:
            b.p2p("c10d::recv_", 0, 1024)
        tables[r] = b.table()
    with pytest.raises(HangError, match="rank 0 sends 2 message.* to rank 1, which receives 1"):
        collate_tables(tables, _summary(2))


def test_matching_job_collates_with_every_rank(tmp_path):
    out = write_job(tmp_path / "out", {r: ddp_rank(r, 4).table() for r in range(4)})
    job = collate(out)
    assert [v.rank for v in job.ranks] == [0, 1, 2, 3] and job.nproc_per_node == 4
    reshaped = collate(out, nnodes=2)
    assert reshaped.nproc_per_node == 2 and reshaped.nodes_spanned(range(4)) == 2
    with pytest.raises(CollateError, match="4 ranks but --nnodes 3"):
        collate(out, nnodes=3)


def test_trace_of_another_schema_version_is_a_clear_error(tmp_path):
    out = write_job(tmp_path / "out", {0: ddp_rank(0, 1).table()})
    path = rank_trace_path(out, 0)
    t = pq.read_table(path)
    pq.write_table(t.replace_schema_metadata({b"maya.trace_schema_version": b"99"}), path)
    with pytest.raises(TraceSchemaError, match=r"trace schema version 99, this maya reads versions \[1, 2, 3\]"):
        collate(out)


def _as_version_1(table: pa.Table) -> pa.Table:
    """A trace as version 1 wrote it: the rank column in the file, async_op and waits_for in args."""
    args = []
    for a, asy, wf in zip(table.column("args").to_pylist(), table.column("async_op").to_pylist(),
                          table.column("waits_for").to_pylist(), strict=True):
        d = json.loads(a or "{}")
        if asy is not None:
            d["async_op"] = asy
        if wf is not None:
            d["waits_for"] = wf
        args.append(json.dumps(d))
    t = table.drop_columns(["async_op", "waits_for", "blocking"])
    t = t.set_column(t.column_names.index("args"), "args", pa.array(args, pa.string()))
    return t.replace_schema_metadata({b"maya.trace_schema_version": b"1"})


def test_a_version_1_trace_still_simulates_as_its_version_2_twin(tmp_path):
    from emulator.pipeline import predict_from_trace

    tables = {r: ddp_rank(r, 2, record_waits=True).table() for r in range(2)}
    new = write_job(tmp_path / "v2", tables)
    old = write_job(tmp_path / "v1", tables, schema_version=1)
    for r, table in tables.items():
        pq.write_table(_as_version_1(table), rank_trace_path(old, r))
    a = predict_from_trace(new, roofline_only=True)
    b = predict_from_trace(old, roofline_only=True)
    assert b.iteration_time_s == a.iteration_time_s and b.breakdown_s == a.breakdown_s


def test_missing_rank_without_representative_is_a_clear_error(tmp_path):
    out = write_job(tmp_path / "out", {0: ddp_rank(0, 2).table()}, world_size=2, rank_map={"0": 0})
    with pytest.raises(CollateError, match="rank 1 has no trace"):
        collate(out)


def test_deduplicated_ranks_are_expanded_with_their_own_groups(tmp_path):
    tables = {r: ddp_rank(r, 4).table() for r in range(4)}
    groups = [{"name": "0", "ranks": [0, 1, 2, 3]}]
    out = write_job(tmp_path / "out", {0: tables[0]}, world_size=4, rank_map={str(r): 0 for r in range(4)},
                    groups=groups)
    job = collate(out)
    assert [v.rank for v in job.ranks] == [0, 1, 2, 3]
    assert all(v.rep.rank == 0 for v in job.ranks)
    assert all(set(v.group.values()) == {"0"} for v in job.ranks)


def test_a_hang_between_deduplicated_ranks_names_every_rank_that_shares_the_short_trace(tmp_path):
    # ranks 2 and 3 read rank 2's trace, which runs one layer fewer: one all-reduce per step the others wait on
    tables = {0: ddp_rank(0, 4, layers=4).table(), 2: ddp_rank(2, 4, layers=3).table()}
    out = write_job(tmp_path / "out", tables, world_size=4, rank_map={"0": 0, "1": 0, "2": 2, "3": 2},
                    groups=[{"name": "0", "ranks": [0, 1, 2, 3]}])
    with pytest.raises(HangError) as e:
        collate(out)
    issue = e.value.report.issues[0]
    assert issue.kind == "missing" and issue.issued_by == [0, 1] and issue.missing == [2, 3]
    assert "group '0'" in str(e.value)


def test_a_deduplicated_3d_job_simulates_exactly_like_the_full_one(tmp_path):
    from emulator.bench.synthetic import parallel3d_rank
    from emulator.pipeline import predict_from_trace

    tp, pp, dp = 2, 2, 2
    kw = dict(layers_per_stage=1, microbatches=2, hidden=512, tokens=512, iterations=2)
    tables = {r: parallel3d_rank(r, tp, pp, dp, **kw).table() for r in range(8)}
    groups = []
    for d in range(dp):
        for p in range(pp):
            groups.append({"name": f"tp{d}.{p}", "ranks": [(d * pp + p) * tp + t for t in range(tp)]})
        for t in range(tp):
            groups.append({"name": f"pp{d}.{t}", "ranks": [(d * pp + p) * tp + t for p in range(pp)]})
    for p in range(pp):
        for t in range(tp):
            groups.append({"name": f"dp{p}.{t}", "ranks": [(d * pp + p) * tp + t for d in range(dp)]})
    full = write_job(tmp_path / "full", tables, nnodes=2, nproc_per_node=4, groups=groups)
    reps = {0: 0, 2: 2}  # one emulated rank per pipeline stage
    rank_map = {str(r): (r // tp) % pp * tp for r in range(8)}
    dedup = write_job(tmp_path / "dedup", {r: tables[r] for r in reps}, nnodes=2, nproc_per_node=4, world_size=8,
                      groups=groups, rank_map=rank_map)
    job = collate(dedup)
    assert {"tp1.1", "dp1.1"} <= set(job.ranks[7].group.values())  # rank 7 = dp 1, stage 1, tp 1
    assert set(job.ranks[7].peer.values()) == {5}  # its previous stage
    a = predict_from_trace(full, roofline_only=True)
    b = predict_from_trace(dedup, roofline_only=True)
    assert b.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-9)
    assert b.breakdown_s == pytest.approx(a.breakdown_s, rel=1e-9)


def test_a_preemption_spike_in_a_repeated_op_is_clipped_but_a_one_off_gap_is_kept():
    ops = ["aten::mm"] * 8 + ["aten::embedding"]
    modules = [f"Net.layers.{i}.fc" for i in range(8)] + ["Net.emb"]
    gaps = [1e-4] * 8 + [0.5]
    gaps[3] = 0.08  # the machine took the core away during layer 3's gap
    out = clip_spikes(ops, ["forward"] * 9, modules, gaps)
    assert out[3] == pytest.approx(3e-4)  # SPIKE_FACTOR x the class median
    assert out[:3] == gaps[:3] and out[4:8] == gaps[4:8]
    assert out[8] == 0.5  # the data loader's gap before the embedding happens once: real host time
