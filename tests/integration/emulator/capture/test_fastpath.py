"""The emulator's shortcuts (the signature cache, emulator.capture.fastpath; the collective ones) in a worker:
the same trace either way; the host clock."""


from tests.programs.harness import run_worker


def _run(tmp_path, name, monkeypatch, fast, program="tiny_train.py", *args, **worker):
    monkeypatch.setenv("MAYA_EMULATOR_FASTPATH", "1" if fast else "0")
    return run_worker(program, tmp_path / name, *args, **worker)


def test_fast_path_records_the_same_trace(tmp_path, monkeypatch):
    args = ("--steps", "3", "--autocast")
    exact = _run(tmp_path, "exact", monkeypatch, False, "tiny_train.py", *args)
    fast = _run(tmp_path, "fast", monkeypatch, True, "tiny_train.py", *args)
    assert exact.rc == 0 and fast.rc == 0, fast.summary["error"]
    assert fast.summary["fast_path"]["hits"] > len(fast.trace) / 2  # steady iterations repeat signatures
    assert exact.summary["fast_path"]["hits"] == 0
    cols = [c for c in exact.trace.columns if c != "host_gap_s"]
    assert exact.trace[cols].astype(str).equals(fast.trace[cols].astype(str))
    for k in ("peak_allocated", "peak_reserved", "work_hash", "iterations", "placeholders", "unsupported_ops"):
        assert exact.summary[k] == fast.summary[k]


def test_host_gaps_count_cpu_time_not_waiting(tmp_path, monkeypatch):
    run = _run(tmp_path, "gaps", monkeypatch, True, "host_gaps.py")
    assert run.rc == 0, run.summary["error"]
    assert run.summary["host_clock"] == "process_cpu"
    t = run.trace
    ops = t.op.tolist()
    gap_after_sleep = t.host_gap_s[ops.index("aten::add")]
    gap_after_spin = t.host_gap_s[ops.index("aten::sub")]
    assert gap_after_sleep < 0.1  # 0.3 s asleep: the host did no work
    assert 0.1 < gap_after_spin < 1.0  # 0.15 s of CPU work is host time


def test_in_place_metadata_changes_after_caching_are_recorded_as_they_are(tmp_path, monkeypatch):
    """A tensor's cached signature (and C++-answered device) must not survive `t_`, `resize_`,
    `set_`, `.data =` or `swap_tensors`: the fast path records what the exact path records."""
    exact = _run(tmp_path, "exact", monkeypatch, False, "metadata_changes.py")
    fast = _run(tmp_path, "fast", monkeypatch, True, "metadata_changes.py")
    assert exact.rc == 0 and fast.rc == 0, fast.summary["error"]
    assert fast.summary["fast_path"]["hits"] > 0
    cols = [c for c in exact.trace.columns if c != "host_gap_s"]
    assert exact.trace[cols].astype(str).equals(fast.trace[cols].astype(str))
    printed = fast.stdout.splitlines()
    assert "after_t_ (4, 2) True" in printed and "after_resize_ (3, 5) True" in printed
    assert "after_data (2, 7) True" in printed and "after_swap (1,) True" in printed
    assert "after_set_ (5, 2) True" in printed
    ops = fast.trace
    assert ops[ops.op == "aten::mm"].shapes.map(lambda s: [list(x) for x in s]).tolist()[-1] == [[4, 8], [8, 2]]


def test_collective_shortcuts_record_what_torch_records(tmp_path, monkeypatch):
    """DDP's parameter and buffer broadcasts (torch's C++ `_broadcast_coalesced`, and the Python stand-in
    that copies each tensor back from the start of its bucket) and collectives called straight to their
    FakeWork kernel leave the trace, memory peaks and work hash torch's own path leaves."""
    args = ("--mode", "ddp_bn", "--steps", "3")
    exact = _run(tmp_path, "exact", monkeypatch, False, "dist_train.py", *args, rank=1, world=2)
    fast = _run(tmp_path, "fast", monkeypatch, True, "dist_train.py", *args, rank=1, world=2)
    assert exact.rc == 0 and fast.rc == 0, (exact.summary["error"], fast.summary["error"])
    ops = exact.trace.op
    assert (ops == "c10d::broadcast_").sum() >= 3 + 3  # the 4 KiB buckets, then the buffers before each forward
    assert (ops == "aten::cat").sum() >= 1 and (ops == "aten::copy_").sum() >= 8
    cols = [c for c in exact.trace.columns if c != "host_gap_s"]
    assert exact.trace[cols].astype(str).equals(fast.trace[cols].astype(str))
    for k in ("peak_allocated", "peak_reserved", "work_hash", "iterations", "placeholders", "unsupported_ops"):
        assert exact.summary[k] == fast.summary[k]
