"""Rank deduplication: which ranks get emulated, where every rank maps, and how traces are expanded."""

import pyarrow as pa

from emulator.capture.trace_rows import TraceRows
from emulator.launch.roles import deduplicate
from emulator.trace.expand import expand_rank
from emulator.trace.partitions import partitions
from emulator.trace.schema import TRACE_SCHEMA
from emulator.trace.summaries import RankSummary
from emulator.trace.workhash import work_hash


def mesh_groups(shape: tuple[int, ...]) -> list[dict]:
    """The groups a DeviceMesh of `shape` (row-major ranks) creates: one partition per dimension."""
    import itertools

    world = 1
    for s in shape:
        world *= s
    groups = [{"name": "0", "ranks": list(range(world))}]
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    for d in range(len(shape)):
        others = [range(s) for i, s in enumerate(shape) if i != d]
        for coord in itertools.product(*others):
            base = sum(c * strides[i] for i, c in zip([i for i in range(len(shape)) if i != d], coord, strict=True))
            ranks = [base + k * strides[d] for k in range(shape[d])]
            groups.append({"name": f"d{d}-{len(groups)}", "ranks": ranks})
    return groups


def fake_runner(world, groups, role_of):
    """run_ranks stand-in: a rank's work hash is its role; records which ranks were run."""
    ran = []

    def run(ranks):
        ran.extend(ranks)
        return {r: RankSummary(rank=r, ok=True, work_hash=str(role_of(r)), groups=groups) for r in ranks}

    return run, ran


def test_partitions_of_a_2d_mesh():
    parts = partitions(mesh_groups((4, 2)), 8)  # dp=4 x tp=2
    assert [p.size for p in parts] == [2, 4]
    assert parts[0].groups == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert parts[1].groups == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert all(p.complete for p in parts)
    assert parts[1].position(5) == 2


def test_identical_ranks_need_only_a_few_processes():
    groups = mesh_groups((4, 2))
    run, ran = fake_runner(8, groups, lambda r: "same")
    res = deduplicate(8, run)
    assert sorted(ran) == [0, 5, 6, 7]  # rank 0, the base (7) and one probe per mesh dimension
    assert res.significant == [False, False]
    # one trace for the one role: the emulated ranks that did the same work (rank 0, the probes) share
    # the representative's, so the simulator can run the class once
    assert set(res.rank_map.values()) == {7}


def test_pipeline_stages_are_distinct_roles():
    groups = mesh_groups((2, 4))  # dp=2 x pp=4: stage = r % 4
    run, ran = fake_runner(8, groups, lambda r: f"stage{r % 4}")
    res = deduplicate(8, run)
    pp, dp = res.partitions[1], res.partitions[0]
    assert pp.size == 4 and dp.size == 2
    assert res.significant == [False, True]
    for r in range(8):  # every rank maps to an emulated rank of its own stage
        assert res.rank_map[r] % 4 == r % 4 and res.rank_map[r] in ran
    assert len(set(ran)) <= 6


def test_logging_ranks_do_not_defeat_dedup():
    groups = mesh_groups((4, 2))
    run, ran = fake_runner(8, groups, lambda r: "logger" if r == 0 else "worker")
    res = deduplicate(8, run)
    assert len(set(ran)) == 4
    assert res.rank_map[0] == 0 and all(res.rank_map[r] != 0 for r in range(1, 8))
    # pipeline: the last stage of the first data-parallel replica logs the loss
    groups = mesh_groups((4, 2))  # dp=4 x pp=2: stage = r % 2, logger = rank 1
    run, ran = fake_runner(8, groups, lambda r: "logger" if r == 1 else f"stage{r % 2}")
    res = deduplicate(8, run)
    assert res.significant == [True, False] and len(set(ran)) == 4
    assert all(res.rank_map[r] in (r, 6, 7) for r in range(8)) and res.rank_map[3] == 7


def test_no_process_groups_probes_the_world():
    run, ran = fake_runner(4, [], lambda r: f"r{r}")
    res = deduplicate(4, run)  # every rank different: nothing to share
    assert res.rank_map == {0: 0, 1: 1, 2: 2, 3: 3}
    run, ran = fake_runner(4, [], lambda r: "same")
    res = deduplicate(4, run)
    assert sorted(set(ran)) == [0, 2, 3] and set(res.rank_map.values()) <= {0, 2, 3}


def test_1024_ranks_do_not_need_1024_processes():
    groups = mesh_groups((64, 4, 4))  # dp x pp x tp
    run, ran = fake_runner(1024, groups, lambda r: f"stage{(r // 4) % 4}")
    res = deduplicate(1024, run)
    assert len(set(ran)) <= 8
    assert all(res.rank_map[r] // 4 % 4 == r // 4 % 4 for r in range(1, 1024))


def test_verify_reports_a_rank_whose_work_differs():
    groups = mesh_groups((4, 2))
    # rank 2 is odd one out: the probes cannot see it, verification can
    run, ran = fake_runner(8, groups, lambda r: "odd" if r == 2 else "same")
    res = deduplicate(8, run, verify=4, seed=3)
    assert sorted(r for r in ran if r not in (0, 5, 6, 7)) == [1, 2, 3, 4]
    assert [m["rank"] for m in res.mismatches] == [2]
    assert res.rank_map[2] == 2  # it keeps its own trace


def test_a_failed_rank_stops_the_search():
    def run(ranks):
        return {r: RankSummary(rank=r, ok=r != 0, work_hash="x") for r in ranks}

    assert deduplicate(4, run) is None


def _rows(rank, rows):
    cols = {f.name: [] for f in TRACE_SCHEMA}
    for i, row in enumerate(rows):
        base = dict(rank=rank, seq=i, iteration=0, kind="collective", op="c10d::allreduce_", stream=0,
                    group=None, group_ranks=None, peer=None)
        base.update(row)
        for f in TRACE_SCHEMA:
            cols[f.name].append(base.get(f.name))
    return pa.table(cols, schema=TRACE_SCHEMA)


def test_expand_rank_maps_groups_and_peers_of_a_2d_mesh():
    groups = mesh_groups((2, 4))  # dp=2 x pp=4
    g = {tuple(x["ranks"]): x["name"] for x in groups}
    rep = _rows(1, [
        dict(group=g[(0, 1, 2, 3)], group_ranks=[0, 1, 2, 3], kind="p2p", op="c10d::send", peer=2),  # next stage
        dict(group=g[(1, 5)], group_ranks=[1, 5]),  # dp all-reduce
        dict(group="0", group_ranks=list(range(8))),  # world
        dict(kind="kernel", op="aten::mm"),
    ])
    out = expand_rank(rep, 1, 5, groups)
    assert out.column("rank").to_pylist() == [5] * 4
    assert out.column("group").to_pylist() == [g[(4, 5, 6, 7)], g[(1, 5)], "0", None]
    assert out.column("group_ranks").to_pylist() == [[4, 5, 6, 7], [1, 5], list(range(8)), None]
    assert out.column("peer").to_pylist() == [6, None, None, None]
    assert out.schema == rep.schema
    assert expand_rank(rep, 1, 1, groups) is rep


def test_collate_reads_a_deduplicated_rank_as_expand_rank_rewrites_it():
    from emulator.collate.job import collate_tables
    from emulator.trace.summaries import EmulationSummary

    groups = mesh_groups((2, 4))  # dp=2 x pp=4
    g = {tuple(x["ranks"]): x["name"] for x in groups}
    rep = _rows(1, [
        dict(group=g[(0, 1, 2, 3)], group_ranks=[0, 1, 2, 3], kind="p2p", op="c10d::send", peer=2),
        dict(group=g[(1, 5)], group_ranks=[1, 5]),
        dict(group=g[(1, 5)], group_ranks=None),  # a collective whose ranks come from the group's name
        dict(group="0", group_ranks=list(range(8))),
    ])
    summary = EmulationSummary(world_size=8, nnodes=1, nproc_per_node=8, gpu="h100", groups=groups,
                               rank_map={str(r): 1 for r in range(8)})
    job = collate_tables({1: rep}, summary, check=False)
    for rank in range(8):
        out = expand_rank(rep, 1, rank, groups)
        view = job.ranks[rank]
        rows = view.rep.ranked_rows
        assert [view.group[i] for i in rows] == out.column("group").to_pylist()
        assert [view.group_ranks.get(i) for i in rows] == [tuple(x) if x else None
                                                           for x in out.column("group_ranks").to_pylist()]
        assert [view.peer.get(i) for i in rows] == out.column("peer").to_pylist()



def test_ranks_sharing_a_trace_keep_their_own_single_member_groups_and_the_job_simulates(tmp_path):
    # TP 4 x DP 1 as Megatron builds it: the world, then two single-member groups per rank (its DP and its
    # PP group, each of degree 1), interleaved across ranks, so they form no partition. Ranks 1-3 share
    # rank 3's trace, whose gradient all-reduce runs on its DP group, ["7"] = [3].
    from emulator.bench.synthetic import TraceBuilder, write_job
    from emulator.pipeline import predict_from_trace

    groups = [{"name": "0", "ranks": [0, 1, 2, 3]}]
    for r in range(4):
        groups += [{"name": str(len(groups)), "ranks": [r]}, {"name": str(len(groups) + 1), "ranks": [r]}]
    own_dp = {r: str(1 + 2 * r) for r in range(4)}  # "1", "3", "5", "7"

    def rank_trace(r):
        b = TraceBuilder(r)
        for it in range(3):
            b.iteration, b.phase = it, "forward"
            b.mm(1024, 1024, 1024)
            b.collective("c10d::allreduce_", "0", [0, 1, 2, 3], 2**20)  # the TP all-reduce
            b.phase = "backward"
            b.mm(1024, 1024, 1024)
            b.collective("c10d::allreduce_", own_dp[r], [r], 2**22)  # the gradients, over a DP group of one
        return b.table()

    out = write_job(tmp_path / "out", {0: rank_trace(0), 3: rank_trace(3)}, world_size=4, groups=groups,
                    rank_map={"0": 0, "1": 3, "2": 3, "3": 3})
    rep = rank_trace(3)
    for rank in (1, 2):
        names = expand_rank(rep, 3, rank, groups).column("group").to_pylist()
        assert own_dp[rank] in names and own_dp[3] not in names
    pred = predict_from_trace(out, roofline_only=True)  # stopped with KeyError: CollectiveKey(group='7', seq=0)
    assert pred.hang is None and pred.iteration_time_s > 0

def test_expand_rank_without_groups_shifts_peers():
    rep = _rows(0, [dict(kind="p2p", op="c10d::send", peer=1, group="0", group_ranks=[0, 1, 2, 3])])
    out = expand_rank(rep, 0, 3, [{"name": "0", "ranks": [0, 1, 2, 3]}])
    assert out.column("peer").to_pylist() == [0]
    assert out.column("group_ranks").to_pylist() == [[0, 1, 2, 3]]


def test_an_interior_stage_expanded_as_another_interior_stage_talks_to_its_own_neighbours():
    # PP=4 x DP=2: pipelines [0,2,4,6] and [1,3,5,7]; interior stages 1 and 2 share one representative
    # (rank 4, stage 2) when the two interior probes hash equal; rank 3 is stage 1 of the other pipeline
    groups = [{"name": "0", "ranks": list(range(8))}, {"name": "pp0", "ranks": [0, 2, 4, 6]},
              {"name": "pp1", "ranks": [1, 3, 5, 7]}, {"name": "dp0", "ranks": [0, 1]},
              {"name": "dp1", "ranks": [2, 3]}, {"name": "dp2", "ranks": [4, 5]}, {"name": "dp3", "ranks": [6, 7]}]
    rep = _rows(4, [dict(kind="p2p", op="c10d::recv_", peer=2, group="0", group_ranks=None),
                    dict(kind="p2p", op="c10d::send", peer=6, group="0", group_ranks=None)])
    out = expand_rank(rep, 4, 3, groups, world_size=8)
    assert out.column("peer").to_pylist() == [1, 5]  # stage 0 and stage 2 of its own pipeline


def test_work_hash_ignores_device_index_and_scalar_operands_only():
    def table(args, shape=(4, 4)):
        return _rows(0, [dict(kind="kernel", op="aten::add", args=args, shapes=[list(shape)], dtypes=["float32"])])

    a = work_hash(table('{"other": 0, "device": "cuda:2"}'))
    assert a == work_hash(table('{"other": 2048, "device": "cuda:6"}'))
    assert a != work_hash(table('{"other": 0, "device": "cuda:2"}', shape=(4, 8)))
    assert a != work_hash(table('{"other": 0, "device": "cuda:2", "is_causal": true}'))


def test_the_recorders_running_work_hash_is_the_finished_tables():
    rows = TraceRows(3)
    rows.add(kind="kernel", op="aten::mm", stream=0, iteration=0, shapes=[[8, 4], [4, 2]], dtypes=["bfloat16"] * 2,
             args='{"device": "cuda:3", "alpha": 2}')
    rows.add(kind="collective", op="c10d::allreduce_", stream=0, iteration=0, shapes=[[8]], dtypes=["float32"],
             args="{}", group="7", group_ranks=[3, 7], coll_seq=0, coll_bytes=32, async_op=True)
    rows.add(kind="event_wait", op="c10d::wait", stream=0, iteration=0, waits_for="c10d::allreduce_", group="7",
             coll_seq=0)
    assert rows.work_hash() == work_hash(rows.to_table())


def test_fsdp_world_with_a_padded_last_rank_emulates_the_ends_and_one_interior_rank():
    # FSDP over 8 ranks and no mesh: rank 0 logs, the last rank holds the padded shard,
    # ranks 1..6 do identical work
    groups = [{"name": "0", "ranks": list(range(8))}]
    run, ran = fake_runner(8, groups, lambda r: "logs" if r == 0 else ("padded" if r == 7 else "interior"))
    res = deduplicate(8, run)
    assert len(set(ran)) == 4  # 0, 7 and two interior probes, not all 8
    assert res.rank_map[0] == 0 and res.rank_map[7] == 7
    assert {res.rank_map[r] for r in range(1, 7)} <= {5, 6}
    assert res.to_json()["partitions"][0]["ends_only"] is True


def short_runner(groups, work_of, steps: int = 3):
    """run_ranks stand-in with iterations: `work_of(rank, iteration)` is what the rank does in that iteration;
    returns the runner and the (rank, iterations asked) of every run."""
    ran = []

    def run(ranks, iterations=None):
        out = {}
        for r in ranks:
            ran.append((r, iterations))
            n = min(iterations or steps, steps)
            hashes = ["|".join(work_of(r, i) for i in range(k + 1)) for k in range(n)]
            out[r] = RankSummary(rank=r, ok=True, work_hash=hashes[-1], groups=groups, iterations=n,
                                 stopped_by_iterations=n < steps, iteration_hashes=hashes)
        return out

    return run, ran


def test_probes_that_do_the_bases_work_run_one_iteration_and_map_to_it():
    groups = mesh_groups((4, 2))
    run, ran = short_runner(groups, lambda r, i: "log" if r == 0 else "same")
    res = deduplicate(8, run, probe_iterations=1)
    assert sorted(ran) == [(0, None), (5, 1), (6, 1), (7, None)]  # each probe once, for one iteration
    assert res.probed == [5, 6] and res.rank_map[5] == res.rank_map[6] == 7
    assert res.rank_map[0] == 0 and set(res.rank_map.values()) == {0, 7}


def test_a_probe_that_represents_a_role_is_run_again_in_full():
    groups = mesh_groups((2, 4))  # dp=2 x pp=4: stage = r % 4
    run, ran = short_runner(groups, lambda r, i: f"stage{r % 4}")
    res = deduplicate(8, run, probe_iterations=1)
    full = {r for r, n in ran if n is None}
    assert set(res.rank_map.values()) <= full  # every trace a rank uses is a whole one
    assert {r for r, n in ran if n == 1} - full == set(res.probed)
    for r in range(8):
        assert res.rank_map[r] % 4 == r % 4


def test_a_probe_is_judged_by_its_first_iterations():
    # the probe's position shows only from the second iteration on: one probed iteration cannot see it,
    # two can (--verify, which emulates whole ranks, is the check for such programs)
    groups = [{"name": "0", "ranks": list(range(4))}]
    work = lambda r, i: "late" if (r == 2 and i >= 1) else "same"  # noqa: E731
    run, _ = short_runner(groups, work)
    assert deduplicate(4, run, probe_iterations=1).rank_map[2] == 3
    run, _ = short_runner(groups, work)
    assert deduplicate(4, run, probe_iterations=2).rank_map[2] == 2


def test_pipeline_middle_stages_that_differ_are_all_emulated():
    groups = [{"name": "0", "ranks": list(range(4))}]
    run, ran = fake_runner(4, groups, lambda r: f"stage{r}")
    res = deduplicate(4, run)
    assert sorted(set(ran)) == [0, 1, 2, 3]
    assert res.rank_map == {0: 0, 1: 1, 2: 2, 3: 3}


def test_expand_rank_keeps_a_second_world_sized_group_apart_from_the_default_group():
    # DDP (or TP) over a new group that holds every rank, beside the default group "0"
    groups = [{"name": "0", "ranks": [0, 1, 2, 3]}, {"name": "1", "ranks": [0, 1, 2, 3]}]
    rows = {c: [] for c in TRACE_SCHEMA.names}
    for i, name in enumerate(["0", "1"]):
        row = {c: None for c in TRACE_SCHEMA.names}
        row.update(rank=3, seq=i, iteration=0, kind="collective", op="c10d::allreduce_", stream=0,
                   group=name, group_ranks=[0, 1, 2, 3], coll_seq=0)
        for c in TRACE_SCHEMA.names:
            rows[c].append(row[c])
    rep = pa.table(rows, schema=TRACE_SCHEMA)
    out = expand_rank(rep, 3, 2, groups, world_size=4)
    assert out.column("group").to_pylist() == ["0", "1"]
    assert out.column("rank").to_pylist() == [2, 2]


def _pipeline_job(world: int, pp: int):
    """dp x pp (stage = r % pp) whose stages exchange Python objects over the pipeline groups (r // pp)."""
    groups = mesh_groups((world // pp, pp))
    pipeline = [g for g in groups if g["name"].startswith("d1-")]
    by_rank = {r: g["ranks"] for g in pipeline for r in g["ranks"]}
    run, ran = fake_runner(world, groups, lambda r: f"stage{r % pp}")
    return run, ran, (lambda r: by_rank[r])


def test_object_exchanging_pipelines_emulate_one_pipeline_with_stand_ins_not_one_per_rank():
    run, ran, unit_of = _pipeline_job(64, 8)  # 8 pipelines of 8 stages
    widened = deduplicate(64, run, unit_of=unit_of)
    widened_ranks = set(ran)

    run, ran, unit_of = _pipeline_job(64, 8)
    switched = []
    res = deduplicate(64, run, unit_of=unit_of, stand_in=lambda: switched.append(len(ran)))
    assert switched == [8] and sorted(ran[:8]) == unit_of(63)  # the last rank's pipeline ran first, alone
    assert len(set(ran)) < len(widened_ranks)  # then ranks alone: rank 0 and the probes, not their pipelines
    assert 0 in ran and not set(unit_of(0)) - {0} <= set(ran)
    # the same roles either way: every rank maps to an emulated rank of its own stage
    for r in range(64):
        assert res.rank_map[r] % 8 == r % 8 == widened.rank_map[r] % 8
