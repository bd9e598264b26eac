"""The discrete-event simulator: the timing effects a user relies on fall out of the trace."""

import numpy as np
import pytest

from emulator.bench.synthetic import TraceBuilder, ddp_rank, parallel3d_job
from emulator.collate.job import collate_tables
from emulator.core.hardware import get_gpu
from emulator.estimate import estimate, load_predictors
from emulator.simulate import simulate
from emulator.simulate.analysis import timing
from emulator.trace.summaries import EmulationSummary

H100 = get_gpu("h100")


def _summary(world, nnodes=1):
    return EmulationSummary(world_size=world, nnodes=nnodes, nproc_per_node=world // nnodes, gpu="h100")


def _run(job, spec=H100):
    k, c = load_predictors(spec, "roofline")
    est = estimate(job, spec, k, c)
    res = simulate(job, est.durations)
    assert res.hang is None
    return res, timing(res, 4e-6)


def test_async_allreduce_overlaps_backward_and_beats_sync():
    sync = collate_tables({r: ddp_rank(r, 4, async_op=False).table() for r in range(4)}, _summary(4))
    asyn = collate_tables({r: ddp_rank(r, 4, async_op=True).table() for r in range(4)}, _summary(4))
    _, ts = _run(sync)
    _, ta = _run(asyn)
    assert ta.iteration_time_s < 0.95 * ts.iteration_time_s
    # sync: every byte of communication is exposed; async: most of it hides behind the backward
    assert ts.breakdown_s["exposed_communication"] == pytest.approx(ts.breakdown_s["communication"], rel=1e-6)
    assert ta.breakdown_s["exposed_communication"] < 0.5 * ta.breakdown_s["communication"]
    parts = ta.breakdown_s["compute"] + ta.breakdown_s["exposed_communication"] + ta.breakdown_s["idle"]
    assert parts == pytest.approx(ta.iteration_time_s, rel=1e-3)


def test_recorded_waits_join_where_they_are_issued():
    waited = collate_tables({r: ddp_rank(r, 2, record_waits=True).table() for r in range(2)}, _summary(2))
    res, _ = _run(waited)
    rep = waited.ranks[0].rep
    first_adam = rep.op.index("aten::_fused_adamw_")
    last_coll = max(i for i in rep.comm_rows if i < first_adam)
    assert res.start[0][first_adam] >= res.end[0][last_coll]


def test_pipeline_stages_wait_for_activations_and_leave_bubbles():
    job = parallel3d_job(tp=1, pp=2, dp=1, gpus_per_node=2, layers_per_stage=2, microbatches=4, hidden=1024,
                         tokens=2048, iterations=2)
    res, t = _run(job)
    rep1 = job.ranks[1].rep
    first_kernel_1 = next(i for i, k in enumerate(rep1.kind) if k == "kernel")
    recv0 = rep1.comm_rows[0]
    assert res.start[1][first_kernel_1] >= res.end[1][recv0] > 0
    # GPipe with M=4 micro-batches on P=2 stages: about (M+P-1)/M of the compute, the rest is bubble
    assert t.breakdown_s["idle"] > 0.1 * t.iteration_time_s
    ratio = t.iteration_time_s / t.breakdown_s["compute"]
    assert 1.1 < ratio < 1.6


def test_event_wait_orders_streams_and_stream_sync_blocks_the_host():
    def prog(with_wait):
        b = TraceBuilder(0)
        b.kernel("aten::mm", [[8192, 8192], [8192, 8192]], ["bfloat16"] * 2, stream=1)
        b.record(7, stream=1)
        if with_wait:
            b.wait_event(7, stream=0)
        b.kernel("aten::add", [[16, 16], [16, 16]], ["bfloat16"] * 2, stream=0)
        b.sync(stream=0)
        b.kernel("aten::add", [[16, 16], [16, 16]], ["bfloat16"] * 2, stream=0)
        return collate_tables({0: b.table()}, _summary(1))

    for with_wait in (True, False):
        job = prog(with_wait)
        res, _ = _run(job)
        kind, s, e = job.ranks[0].rep.kind, res.start[0], res.end[0]
        mm, add = 0, kind.index("kernel", 1)
        if with_wait:
            assert s[add] >= e[mm]
        else:
            assert s[add] < e[mm]
        last = len(kind) - 1
        assert s[last] >= e[add]  # the host waited for stream 0 before launching it


def test_p2p_exchange_in_both_directions_does_not_deadlock():
    tables = {}
    for r in range(2):
        b = TraceBuilder(r)
        b.kernel("aten::mm", [[1024, 1024], [1024, 1024]], ["bfloat16"] * 2)
        b.p2p("c10d::send", 1 - r, 1 << 20, async_op=True)
        b.p2p("c10d::recv_", 1 - r, 1 << 20, async_op=True)
        b.kernel("aten::add", [[1024, 1024], [1024, 1024]], ["bfloat16"] * 2)
        tables[r] = b.table()
    job = collate_tables(tables, _summary(2))
    res, _ = _run(job)
    # the two ends of each message run together
    assert res.start[0][1] == res.start[1][2] and res.end[0][1] == res.end[1][2]
    assert res.start[0][3] >= res.end[0][2]  # the add consumes the received buffer


def test_1024_rank_3d_parallel_iteration_simulates_quickly():
    job = parallel3d_job(tp=8, pp=4, dp=32, layers_per_stage=1, microbatches=2, hidden=1024, tokens=1024,
                         iterations=2)
    res, t = _run(job)  # 1,024 ranks: one simulated representative per pipeline stage
    assert len(res.end) == 1024 and t.iteration_time_s > 0
    assert res.wall_s < 5
    full = simulate(job, estimate(job, H100, *load_predictors(H100, "roofline")).durations, classes=False)
    assert full.wall_s < 30
    assert all(np.array_equal(full.end[r], res.end[r]) for r in range(0, 1024, 37))


def test_a_blocking_device_to_host_copy_stalls_the_host_and_a_non_blocking_one_does_not():
    for non_blocking in (False, True):
        b = TraceBuilder(0)
        b.kernel("aten::mm", [[8192, 8192], [8192, 8192]], ["bfloat16"] * 2)
        b._row("memcpy", "memcpy::d2h", 0, bytes=4.0, blocking=not non_blocking)
        b.kernel("aten::add", [[16, 16], [16, 16]], ["bfloat16"] * 2, stream=1)
        job = collate_tables({0: b.table()}, _summary(1))
        res, _ = _run(job)
        s, e = res.start[0], res.end[0]
        if non_blocking:
            assert s[2] < e[0]  # the host ran ahead and launched on the other stream at once
        else:
            assert s[2] >= e[1]  # `.item()`: the host waited for the copy (and the mm before it)


def test_setup_before_the_first_forward_is_not_part_of_an_iteration():
    b = TraceBuilder(0)
    b.iteration, b.phase = -1, "other"  # model init + weights to the device: 1 s of host time
    b.gap = 1.0
    b._row("memcpy", "memcpy::h2d", 0, bytes=4e8, args={"non_blocking": True})
    b.gap = 5e-6
    b.phase = "forward"
    b.mm(4096, 4096, 4096)
    b.phase = "optimizer"
    b.kernel("aten::_fused_adamw_", [[1 << 20]] * 4, ["float32"] * 4, args={"list_lengths": [1, 1, 1, 1]})
    job = collate_tables({0: b.table()}, _summary(1))
    _, t = _run(job)
    assert t.setup_s >= 1.0
    assert t.iterations == [-1] and t.iteration_time_s < 0.01


def test_recorded_p2p_waits_join_their_own_op_not_a_collective_with_the_same_number():
    tables = {}
    for r in range(2):
        b = TraceBuilder(r)
        ar = b.collective("c10d::allreduce_", "0", [0, 1], 4 << 30, async_op=True)  # coll_seq 0 on group "0"
        msg = b.p2p("c10d::recv_" if r == 0 else "c10d::send", 1 - r, 1 << 30, async_op=True, group="0")
        assert msg["coll_seq"] == ar["coll_seq"] == 0
        b.kernel("aten::add", [[16, 16], [16, 16]], ["bfloat16"] * 2)  # independent: overlaps the recv
        b.wait(msg)
        b.kernel("aten::add", [[16, 16], [16, 16]], ["bfloat16"] * 2)  # consumes the recv
        b.wait(ar)
        b.kernel("aten::add", [[16, 16], [16, 16]], ["bfloat16"] * 2)  # consumes the all-reduce
        tables[r] = b.table()
    job = collate_tables(tables, _summary(2))
    res, _ = _run(job)
    s, e = res.start[0], res.end[0]
    ar, recv, a, b_, c = 0, 1, 2, 4, 6
    assert s[a] < e[recv]
    assert e[recv] <= s[b_] < e[ar]
    assert s[c] >= e[ar]


def test_simulating_classes_of_identical_ranks_gives_every_rank_exact_times():
    from emulator.simulate.classes import quotient

    job = parallel3d_job(tp=2, pp=2, dp=4, gpus_per_node=4, layers_per_stage=1, microbatches=2, hidden=512,
                         tokens=512, iterations=2)
    k, c = load_predictors(H100, "roofline")
    durations = estimate(job, H100, k, c).durations
    slow = [d.copy() for d in durations]
    slow[5] = slow[5] * 1.5  # a straggler: rank 5 no longer behaves like its class
    for durs in (durations, slow):
        full = simulate(job, durs, classes=False)
        fast = simulate(job, durs, classes=True)
        assert fast.hang is None and full.hang is None
        for r in range(job.world_size):
            assert np.array_equal(full.end[r], fast.end[r]), r
    reps, _ = quotient(job, durations)
    assert len(reps) == 2  # one per pipeline stage
    assert timing(simulate(job, slow)).iteration_time_s > timing(simulate(job, durations)).iteration_time_s


def test_one_odd_rank_splits_only_the_ranks_that_share_a_group_with_it():
    """Rank 0 logging the loss runs another program than its peers: the ranks that meet it in a collective
    become classes of their own (its TP mates, its DP mates), the rest stay one class, and every rank's
    times are still those of simulating each rank."""
    from emulator.simulate.classes import quotient

    job = parallel3d_job(tp=4, pp=1, dp=4, gpus_per_node=4, layers_per_stage=1, microbatches=2, hidden=512,
                         tokens=512, iterations=2)
    k, c = load_predictors(H100, "roofline")
    durations = estimate(job, H100, k, c).durations
    durations[0] = durations[0] * 1.2
    reps, cls = quotient(job, durations)
    tp_mates, dp_mates = {1, 2, 3}, {4, 8, 12}
    assert len(reps) == 4
    assert {cls[r] for r in tp_mates} != {cls[r] for r in dp_mates}
    assert len({cls[r] for r in tp_mates}) == len({cls[r] for r in dp_mates}) == 1
    rest = set(range(16)) - {0} - tp_mates - dp_mates
    assert len({cls[r] for r in rest}) == 1
    full, fast = simulate(job, durations, classes=False), simulate(job, durations, classes=True)
    for r in range(job.world_size):
        assert np.array_equal(full.start[r], fast.start[r]) and np.array_equal(full.end[r], fast.end[r]), r


def test_on_a_cpu_target_host_work_and_kernels_add_up_instead_of_overlapping():
    b = TraceBuilder(0, host_gap_s=1e-3)  # 1 ms of Python before each op
    for _ in range(4):
        b.mm(512, 512, 512, dtype="float32")
    job = collate_tables({0: b.table()}, _summary(1))
    k, c = load_predictors(get_gpu("cpu"), "roofline")
    est = estimate(job, get_gpu("cpu"), k, c)
    kernel = float(est.durations[0][0])
    gpu_like = simulate(job, est.durations)
    cpu = simulate(job, est.durations, launch_overhead_s=0.0, synchronous=True)
    # a GPU host runs ahead and kernels queue behind each other; a CPU runs each op itself, in turn
    assert gpu_like.end[0][-1] == pytest.approx(max(4e-3 + 4 * 4e-6, 1e-3 + 4e-6 + 3 * kernel) + kernel, rel=1e-6)
    assert cpu.end[0][-1] == pytest.approx(4 * (1e-3 + kernel), rel=1e-6)


def test_a_steady_iteration_is_never_shorter_than_its_host_work():
    """The first iteration ends with a long GEMM; the next ones are host-bound (1.1 ms of host work,
    tiny kernels). The second's host work runs under the first's GEMM, so end to end it looks shorter
    than its own host work; the steady-state time keeps the floor a real run settles to (a rank's host
    runs its iterations one after the other)."""
    b = TraceBuilder(0, host_gap_s=1e-4)
    for it in range(3):
        b.iteration = it
        for _ in range(10):
            b.kernel("aten::add", [[64, 64], [64, 64]], ["float32"] * 2)
        if it == 0:
            b.mm(8192, 8192, 8192)  # ~1.5 ms on an H100
    res, tm = _run(collate_tables({0: b.table()}, _summary(1)))
    host_per_iteration = 10 * (1e-4 + 4e-6)
    assert tm.iterations_s[1] < 0.5 * host_per_iteration  # the head start
    assert tm.iteration_time_s == pytest.approx(host_per_iteration, rel=1e-6)
    bd = tm.breakdown_s
    assert bd["compute"] + bd["exposed_communication"] + bd["idle"] == pytest.approx(tm.iteration_time_s, rel=1e-6)


def test_a_barrier_holds_every_member_until_the_last_arrives():
    tables = {}
    for r in range(2):
        b = TraceBuilder(r)
        if r == 0:
            b.mm(8192, 8192, 8192)  # rank 0 is busy; rank 1 reaches the barrier at once
        b.wait(b.collective("c10d::barrier", "0", [0, 1], 0))
        b.kernel("aten::add", [[64, 64], [64, 64]], ["float32"] * 2)
        tables[r] = b.table()
    job = collate_tables(tables, _summary(2))
    res, _ = _run(job)
    mm_end = res.end[0][0]
    barrier = {r: job.ranks[r].rep.comm_rows[0] for r in range(2)}
    after = {r: len(job.ranks[r].rep) - 1 for r in range(2)}
    assert res.start[1][barrier[1]] >= mm_end  # rank 1 waits in the barrier for rank 0
    assert res.end[1][barrier[1]] > res.start[1][barrier[1]]  # and the barrier itself takes time
    assert res.start[1][after[1]] >= res.end[1][barrier[1]]
    assert res.end[0][barrier[0]] == pytest.approx(res.end[1][barrier[1]])

def test_a_cuda_graph_replay_costs_one_launch_not_one_per_kernel():
    """Tiny kernels launched one by one are host-bound; the same kernels replayed from a CUDA graph
    pay one launch per replay (`graph_replay`), so the step is as long as the device work."""
    def rank(graphed: bool):
        b = TraceBuilder(0, host_gap_s=0.0)
        for it in range(3):
            b.iteration = it
            for _ in range(200):
                row = b.kernel("aten::add", [[8], [8]], ["float32"] * 2)
                if graphed:
                    row["graph_replay"] = it + 1
        return collate_tables({0: b.table()}, _summary(1))

    _, eager = _run(rank(False))
    _, graphed = _run(rank(True))
    launch = 4e-6
    assert eager.iteration_time_s >= 200 * launch
    assert graphed.iteration_time_s < 0.8 * eager.iteration_time_s
    assert graphed.breakdown_s["host"] == pytest.approx(launch, rel=1e-6)


def test_host_ops_run_on_the_host_in_program_order_and_count_as_host_time():
    """CPU offload: an op on offloaded host tensors (`host_op`) holds the host for its duration and
    launches nothing; the device work after it starts later."""
    def rank(host_ops: bool):
        b = TraceBuilder(0, host_gap_s=0.0)
        for it in range(3):
            b.iteration = it
            b.mm(1024, 1024, 1024)
            if host_ops:
                b._row("host_op", "aten::_foreach_lerp_", shapes=[[1 << 24], [1 << 24]],
                       dtypes=["float32", "float32"], flops=float(1 << 24), bytes=float(3 * 4 << 24))
        return collate_tables({0: b.table()}, _summary(1))

    _, plain = _run(rank(False))
    _, offload = _run(rank(True))
    step = 3 * 4 * (1 << 24) / (0.7 * 75e9)  # the host model of the roofline: bytes at 70% of 75 GB/s
    assert offload.breakdown_s["host"] == pytest.approx(step + 4e-6, rel=1e-3)
    assert offload.iteration_time_s == pytest.approx(max(plain.iteration_time_s, step + 4e-6), rel=0.05)
