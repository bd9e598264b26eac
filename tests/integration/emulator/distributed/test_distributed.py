"""The recording process group: DDP, FSDP2, TP, pipelining, plain and functional collectives."""

import math

import pytest

from emulator.trace.io import read_rank_trace
from tests.programs.harness import ROOT, run_ranks, run_worker

D = 64  # dist_train.py's MLP: Linear(D, 4D) -> GELU -> Linear(4D, D)
LAYERS = [(4 * D, D), (D, 4 * D)]  # (out, in) of each Linear


def param_numel(out_f, in_f):
    return out_f * in_f + out_f


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    return run_worker("dist_train.py", tmp_path_factory.mktemp("ddp"), "--mode", "ddp", rank=1, world=2)


def test_init_process_group_nccl_becomes_the_recording_group(ddp):
    assert ddp.rc == 0, ddp.summary["error"]
    assert ddp.summary["groups"] == [{"name": "0", "ranks": [0, 1], "member": True}]
    assert ddp.printed()["backend"] == "nccl"  # what the script sees on the GPU cluster, not "fake"


def test_ddp_all_reduce_bytes_per_iteration_equal_gradient_bytes(ddp):
    t = ddp.trace
    grad_bytes = 4 * sum(param_numel(o, i) for o, i in LAYERS)
    for it in (-1, 0):  # both optimizer steps
        ar = t[(t.iteration == it) & (t.op == "c10d::allreduce_")]
        assert ar.coll_bytes.sum() == grad_bytes
        assert (ar.phase == "backward").all()
        assert all(list(r) == [0, 1] for r in ar.group_ranks)
    seqs = t[t.kind == "collective"].coll_seq.tolist()
    assert seqs == list(range(len(seqs)))  # one sequence per group, in issue order


def test_ddp_ranks_doing_the_same_work_hash_equal(ddp, tmp_path):
    rank0 = run_worker("dist_train.py", tmp_path, "--mode", "ddp", rank=0, world=2)
    assert rank0.summary["work_hash"] == ddp.summary["work_hash"]


def test_fsdp2_collective_bytes_equal_padded_parameter_bytes(tmp_path):
    run = run_worker("dist_train.py", tmp_path, "--mode", "fsdp", rank=1, world=2)
    assert run.rc == 0, run.summary["error"]
    t = run.trace[run.trace.iteration == 0]
    world = 2

    def padded(o, i):  # FSDP2 shards dim 0, padded to a multiple of the world size
        rows = math.ceil(o / world) * world
        return rows * i + rows

    gathers = t[t.op == "c10d::_allgather_base_"]
    scatters = t[t.op == "c10d::_reduce_scatter_base_"]
    assert sorted(set(gathers.coll_bytes)) == sorted({2 * padded(o, i) for o, i in LAYERS})  # bf16 params
    assert sorted(scatters.coll_bytes) == sorted(4 * padded(o, i) for o, i in LAYERS)  # fp32 grads
    # all-gathers and reduce-scatters run on their own streams, ordered by events
    assert set(gathers.stream) != {0} and set(scatters.stream) != {0}
    assert (t.kind == "event_record").any() and (t.kind == "event_wait").any()


def test_tensor_parallel_collectives_on_the_tp_group(tmp_path):
    run = run_worker("dist_train.py", tmp_path, "--mode", "tp", rank=1, world=2)
    assert run.rc == 0, run.summary["error"]
    t = run.trace[run.trace.iteration == 0]
    ar = t[t.op == "_c10d_functional::all_reduce"]
    assert len(ar) >= 1 and all(list(r) == [0, 1] for r in ar.group_ranks)
    assert (ar.coll_bytes == 8 * D * 4).all()  # the row-parallel output [8, D] fp32
    assert ar.async_op.all()
    waits = t[t.op == "_c10d_functional::wait_tensor"]
    assert list(waits.coll_seq) == list(ar.coll_seq) and (waits.kind == "event_wait").all()
    # local shard shapes: the column-parallel weight holds half the output features
    fwd = t[(t.op == "aten::addmm") & (t.phase == "forward")].iloc[0]
    assert [list(s) for s in fwd.shapes][2] == [D, 2 * D]


def test_plain_collectives_sub_groups_and_waits(tmp_path):
    run = run_worker("dist_train.py", tmp_path, "--mode", "coll", rank=1, world=2)
    assert run.rc == 0, run.summary["error"]
    t = run.trace
    colls = t[t.kind == "collective"]
    assert list(colls.op) == ["c10d::allreduce_", "c10d::_allgather_base_", "c10d::allreduce_", "c10d::broadcast_",
                              "_c10d_functional::all_reduce"]
    assert list(colls.coll_bytes) == [4096, 8192, 4096, 4096, 4096]
    assert list(colls.async_op) == [False, False, True, False, True]
    bcast = colls[colls.op == "c10d::broadcast_"].iloc[0]
    assert bcast.group != colls.iloc[0].group and bcast.coll_seq == 0  # the new_group has its own sequence
    waits = t[t.kind == "event_wait"]
    assert len(waits) == 5 and list(waits.coll_seq) == list(colls.coll_seq)
    assert [g["ranks"] for g in run.summary["groups"]] == [[0, 1], [0, 1]]


def test_2d_fsdp_tp_uses_mesh_sub_groups(tmp_path):
    run = run_worker("dist_train.py", tmp_path, "--mode", "fsdp_tp", rank=3, world=4)
    assert run.rc == 0, run.summary["error"]
    groups = run.summary["groups"]
    # every rank sees every mesh group (members or not), so the launcher can derive the mesh
    assert [g["ranks"] for g in groups] == [[0, 1, 2, 3], [0, 2], [1, 3], [0, 1], [2, 3]]
    assert [g["member"] for g in groups] == [True, False, True, False, True]
    t = run.trace[run.trace.iteration == 0]
    by_op = {op: {tuple(r) for r in t[t.op == op].group_ranks} for op in set(t[t.kind == "collective"].op)}
    assert by_op["c10d::_allgather_base_"] == {(1, 3)}  # FSDP over the dp dimension
    assert by_op["c10d::_reduce_scatter_base_"] == {(1, 3)}
    assert by_op["_c10d_functional::all_reduce"] == {(2, 3)}  # TP inside the pair


def test_pipeline_send_recv_with_correct_peers(tmp_path):
    r0, r1 = run_ranks("dist_train.py", tmp_path, "--mode", "pp", world=2)
    assert r0.rc == 0 and r1.rc == 0, (r0.summary["error"], r1.summary["error"])
    for me, other in ((r0, 1), (r1, 0)):
        p2p = me.trace[me.trace.kind == "p2p"]
        assert len(p2p) > 0 and (p2p.peer == other).all()
    # activations forward, gradients backward: each send has a matching recv of the same size
    sends0 = r0.trace[(r0.trace.op == "c10d::send")].coll_bytes.tolist()
    recvs1 = r1.trace[(r1.trace.op == "c10d::recv_")].coll_bytes.tolist()
    assert sends0 == recvs1
    assert 4 * D * 4 in sends0  # one micro-batch of activations: [8/2, D] fp32
    assert r0.summary["iterations"] == r1.summary["iterations"] == 2
    # batch_isend_irecv works are waited by the schedule: one wait row per p2p op, naming it
    t = r1.trace[r1.trace.iteration == 0]
    p2p, waits = t[t.kind == "p2p"], t[(t.kind == "event_wait") & (t.op == "c10d::wait")]
    assert sorted(zip(p2p.op, p2p.coll_seq, strict=True)) == sorted(zip(waits.waits_for, waits.coll_seq, strict=True))


def test_ddp_inside_pipeline_stages_with_several_micro_batches(tmp_path):
    """PP=2 x DP=2, more micro-batches than stages (1F1B's steady phase batches a send with a recv).

    The stages' start-up vote must come out as on the GPUs (static metadata given -> STATIC; a
    placeholder vote ran an extra forward that broke DDP's reducer), every completion wait must
    name the p2p op it waits for (DDP's start-up broadcasts are waited in C++, so matching waits by
    order pinned the schedule's waits on old messages), and the job must simulate without a hang."""
    from emulator.launch.emulate import run_emulation
    from emulator.pipeline import predict_from_trace

    program = ROOT / "examples" / "validation" / "megatron_gpt.py"
    s = run_emulation(script=str(program), module=None, gpu="a100-80gb", nproc_per_node=4, nnodes=1, iterations=2,
                      out=tmp_path, dedup=False,
                      argv=["--layers", "2", "--hidden", "64", "--heads", "2", "--seq", "32", "--vocab", "128",
                            "--pp", "2", "--micro-batch", "1", "--global-batch", "8", "--steps", "3"])
    assert s.ok and s.complete, s.error
    t = read_rank_trace(tmp_path, 0).to_pandas()
    steady = t[t.iteration == 0]
    assert (steady.op == "c10d::allreduce_").any()  # DDP's gradient all-reduce over the data-parallel pair
    p2p = steady[steady.kind == "p2p"]
    assert set(p2p.op) == {"c10d::send", "c10d::recv_"} and len(p2p) == 8  # 4 activations out, 4 gradients in
    waits = steady[(steady.kind == "event_wait") & steady.waits_for.isin(["c10d::send", "c10d::recv_"])]
    assert sorted(zip(p2p.op, p2p.coll_seq, strict=True)) == sorted(zip(waits.waits_for, waits.coll_seq, strict=True))
    # Megatron's p2p (the program's default): a batch of transfers is waited for where it is issued, then
    # the device is synchronized, so the next row after a batch's waits is a device sync
    rows = steady.reset_index(drop=True)
    p2p_wait = (rows.kind == "event_wait") & rows.waits_for.isin(["c10d::send", "c10d::recv_"])
    after_waits = [rows.kind[i + 1] for i in rows.index[:-1] if p2p_wait[i] and not p2p_wait[i + 1]]
    assert after_waits and set(after_waits) == {"device_sync"}
    pred = predict_from_trace(tmp_path, roofline_only=True, timeline=False, write=False)
    assert pred.hang is None and pred.iteration_time_s > 0


def test_pipeline_ranks_emulated_alone_read_their_peers_objects_from_an_emulated_pipeline(tmp_path):
    """PP=2 x DP=4 with rank deduplication: pipelining's stages exchange Python objects (the
    start-up vote), so one pipeline runs side by side and the ranks after it run alone, reading what
    the same stage of that pipeline sent (stand-ins). Rank 0 emulated that way must do exactly the
    work it does when all eight ranks run together (equal work hash), with fewer ranks emulated."""
    from emulator.launch.emulate import run_emulation

    program = ROOT / "examples" / "validation" / "megatron_gpt.py"
    argv = ["--layers", "2", "--hidden", "64", "--heads", "2", "--seq", "32", "--vocab", "128",
            "--pp", "2", "--micro-batch", "1", "--global-batch", "8", "--steps", "2"]
    kw = dict(script=str(program), module=None, gpu="a100-80gb", nproc_per_node=8, nnodes=1, iterations=1,
              argv=argv)
    dedup = run_emulation(out=tmp_path / "dedup", dedup=True, **kw)
    assert dedup.ok and dedup.complete, dedup.error
    assert len(dedup.ranks_emulated) < 8
    full = run_emulation(out=tmp_path / "full", dedup=False, **kw)
    assert full.ok and full.complete, full.error
    assert dedup.work_hash["0"] == full.work_hash["0"]
    # ranks that did their role's work share one trace, so each class of ranks is simulated once
    from emulator.collate.job import collate
    from emulator.core.hardware import get_gpu
    from emulator.estimate import estimate
    from emulator.pipeline import load_predictors
    from emulator.simulate.classes import quotient

    traces = set(dedup.rank_map.values())
    assert len(traces) < len(dedup.ranks_emulated)
    job = collate(tmp_path / "dedup")
    assert set(job.reps) == traces
    spec = get_gpu("a100-80gb")
    classes = quotient(job, estimate(job, spec, *load_predictors(spec, "roofline")).durations)
    assert classes is not None and len(classes[0]) == len(traces)
