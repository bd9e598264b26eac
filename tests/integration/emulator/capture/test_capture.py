"""Recording: the worker's outputs, iterations, attribution, placeholders, unsupported ops, profile mode."""

import importlib.util
import json
import math

import pytest

from emulator.trace.schema import COLUMNS, KINDS, PHASES
from tests.programs.harness import run_worker, shared_run


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    return run_worker("tiny_train.py", tmp_path_factory.mktemp("train"), "--steps", "3")


@pytest.fixture(scope="module")
def misc():
    return shared_run("misc_api.py", extra=("--allow-unsupported",))


def test_trace_has_every_schema_column_and_valid_values(train):
    t = train.trace
    assert train.rc == 0, train.summary["error"]
    assert list(t.columns) == COLUMNS
    assert set(t.kind) <= set(KINDS) and set(t.phase) <= set(PHASES)
    assert list(t.seq) == list(range(len(t)))
    assert (t.host_gap_s >= 0).all()
    assert t.duration_s.isna().all()  # emulation measures nothing
    assert t.mem_allocated.notna().all() and (t.mem_reserved >= t.mem_allocated).all()
    for a in t.args:
        json.loads(a)


def test_iterations_follow_optimizer_steps(train):
    t, s = train.trace, train.summary
    assert s["iterations"] == 3
    assert set(t.iteration) == {-1, 0, 1, 2}
    # the ops of one steady iteration repeat exactly
    it0 = t[t.iteration == 0].op.tolist()
    it1 = t[t.iteration == 1].op.tolist()
    assert it0 == it1 and len(it0) > 20


def test_module_and_phase_attribution(train):
    t = train.trace
    fwd = t[(t.phase == "forward") & (t.op == "aten::addmm")]
    assert set(fwd.module) == {"Net.attn.qkv", "Net.attn.proj"}
    bwd = t[t.phase == "backward"]
    assert "Net.attn.qkv" in set(bwd.module) and "Net.emb" in set(bwd.module)
    steady = t[(t.phase == "optimizer") & (t.iteration == 0)]
    assert set(steady.op.str.slice(0, 15)) == {"aten::_foreach_"}


def test_gemm_signature_shows_the_linear_transpose_in_strides(train):
    t = train.trace
    head = t[(t.module == "Net.head") & (t.phase == "forward") & (t.op == "aten::mm")].iloc[0]
    assert [list(s) for s in head.shapes] == [[32, 64], [64, 128]]
    assert [list(s) for s in head.strides] == [[64, 1], [1, 64]]
    assert head.flops == 2 * 32 * 64 * 128


def test_summary_keys(train):
    s = train.summary
    for key in ("rank", "ok", "error", "oom", "peak_allocated", "peak_reserved", "iterations", "unsupported_ops",
                "placeholders", "wall_s", "work_hash", "groups", "n_events", "torch_version", "gpu"):
        assert key in s
    assert s["ok"] is True and s["n_events"] == len(train.trace) and s["gpu"] == "h100"


def test_data_dependent_values_use_counted_placeholders(misc):
    seen, s, t = misc.printed(), misc.summary, misc.trace
    assert seen["item"] == "0.0"
    assert "branch" not in seen  # bool(tensor) reads False
    assert seen["nonzero_shape"] == "(1000000, 2)"  # upper bound: every element selected
    assert seen["masked_shape"] == "(1000000,)"
    assert s["placeholders"]["item_float"] == 1 and s["placeholders"]["item_bool"] == 1
    assert s["placeholders"]["nonzero"] >= 2  # torch.nonzero and the mask index
    marked = t[t.placeholder]
    assert {"memcpy::d2h", "aten::nonzero", "aten::index"} <= set(marked.op)


def test_unsupported_op_is_listed_and_the_program_continues(misc):
    assert misc.summary["unsupported_ops"] == {"maya_test::no_fake_kernel": 1}
    assert misc.printed()["unsupported_out_shape"] == "(1000, 1000)"
    row = misc.trace[misc.trace.op == "maya_test::no_fake_kernel"].iloc[0]
    assert json.loads(row.args)["unsupported"] is True


def test_an_op_without_a_fake_kernel_stops_the_run_naming_it_its_module_and_line(tmp_path):
    run = run_worker("unsupported_op.py", tmp_path)
    assert run.rc == 1 and run.summary["ok"] is False
    err = run.summary["error"]
    assert "maya_test::no_fake_kernel has no fake (meta) kernel" in err
    assert "module Net.inner" in err and "unsupported_op.py:12 (return no_fake_kernel(x) * 2)" in err
    assert "--allow-unsupported" in err and "Traceback" not in err


def test_with_allow_unsupported_the_op_is_guessed_counted_and_timed_by_the_roofline(tmp_path):
    run = run_worker("unsupported_op.py", tmp_path, extra=["--allow-unsupported"])
    assert run.rc == 0 and run.printed()["out_shape"] == "(4, 4)"
    assert run.summary["unsupported_ops"] == {"maya_test::no_fake_kernel": 1}


def test_torch_compile_is_planned_by_inductor_or_runs_eagerly_and_is_reported(misc):
    assert misc.printed()["compiled_shape"] == "(1000, 1000)"
    if importlib.util.find_spec("triton") is not None:  # Inductor generates the kernel a GPU would run
        assert misc.summary["compiled"] == {"torch.compile": 1} and misc.summary["eager_fallbacks"] == {}
        assert (misc.trace.op == "triton::pointwise").sum() == 1
    else:
        assert misc.summary["eager_fallbacks"] == {"torch.compile": 1}


def test_failing_script_keeps_trace_and_traceback(tmp_path):
    run = run_worker("fails.py", tmp_path)
    assert run.rc == 1
    s = run.summary
    assert s["ok"] is False and s["oom"] is False
    assert "ValueError: boom from the training script" in s["error"]
    assert "broken_helper" in s["error"] and "emulator/capture" not in s["error"]
    assert (tmp_path / "trace" / "rank=0" / "part-0.parquet").exists()
    assert "aten::mm" in set(run.trace.op)  # recorded up to the failure


def test_oom_that_ends_the_program_exits_3(tmp_path):
    prog = tmp_path / "oom.py"
    prog.write_text("import torch\nx = torch.empty(100 * 2**30, dtype=torch.uint8, device='cuda')\n")
    run = run_worker(str(prog), tmp_path / "out")
    assert run.rc == 3
    assert run.summary["oom"] is True and "OutOfMemoryError" in run.summary["error"]


def test_iterations_flag_stops_cleanly(tmp_path):
    run = run_worker("tiny_train.py", tmp_path, "--steps", "10", extra=["--iterations", "2"])
    assert run.rc == 0, run.summary["error"]
    assert run.summary["iterations"] == 2 and run.summary["stopped_by_iterations"] is True
    assert "step 1" not in run.stdout  # stopped inside the 2nd opt.step(), before its print
    assert run.trace.iteration.max() == 0


def test_mark_iteration_and_system_exit(tmp_path):
    prog = tmp_path / "marks.py"
    prog.write_text("import sys, torch, emulator\nfor _ in range(3):\n"
                    "    torch.randn(8, 8, device='cuda').sum()\n    emulator.mark_iteration()\nsys.exit(0)\n")
    run = run_worker(str(prog), tmp_path / "out")
    assert run.rc == 0 and run.summary["ok"] is True  # SystemExit(0) is success
    assert run.summary["iterations"] == 3
    assert run.trace.iteration.tolist() == [-1, -1, 0, 0, 1, 1]
    prog.write_text("import sys\nsys.exit(2)\n")
    run = run_worker(str(prog), tmp_path / "out2")
    assert run.rc == 1 and "status 2" in run.summary["error"]


def test_profile_measures_durations_and_matches_emulated_gemm_shapes(tmp_path, train):
    prof = run_worker("tiny_train.py", tmp_path, "--steps", "3", extra=["--profile"])
    assert prof.rc == 0, prof.summary["error"]
    kernels = prof.trace[prof.trace.kind == "kernel"]
    assert (kernels.duration_s > 0).all()
    assert prof.summary["mode"] == "profile"

    def gemms(t):
        g = t[t.op.isin(["aten::mm", "aten::addmm"]) & t.phase.isin(["forward", "backward"]) & (t.iteration == 0)]
        return [(r.op, r.phase, [list(s) for s in r.shapes]) for r in g.itertuples()]

    assert gemms(prof.trace) == gemms(train.trace) and len(gemms(train.trace)) >= 9


def test_cpu_target_runs_real_cpu_ops_without_timing(tmp_path):
    run = run_worker("tiny_train.py", tmp_path, "--steps", "2", gpu="cpu")
    assert run.rc == 0, run.summary["error"]
    assert "device cpu" in run.stdout  # the script sees no GPU
    t = run.trace
    assert t.duration_s.isna().all()
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in set(t.op)


def test_activation_checkpointing_recomputes_in_backward(tmp_path):
    run = run_worker("gpt.py", tmp_path, "--checkpoint", "--steps", "2", "--vocab", "512")
    assert run.rc == 0, run.summary["error"]
    t = run.trace[run.trace.iteration == 0]
    flash = t[t.op == "aten::_scaled_dot_product_flash_attention"]
    assert list(flash.phase) == ["forward", "forward", "backward", "backward"]  # 2 layers, recomputed
    assert list(flash.module) == ["GPT.h.0", "GPT.h.1", "GPT.h.1", "GPT.h.0"]


def test_flex_attention_is_recorded_as_one_kernel_each_way(tmp_path):
    run = run_worker("flex_attention.py", tmp_path)
    assert run.rc == 0, run.summary["error"]
    flex = run.trace[run.trace.op.str.startswith("aten::flex_attention")]
    assert flex.op.tolist() == ["aten::flex_attention", "aten::flex_attention_backward"]
    fwd, bwd = flex.flops.tolist()
    assert fwd == 4 * 2 * 4 * 128 * 128 * 64  # dense score matrix
    assert bwd == 2.5 * fwd
    assert flex.phase.tolist()[1] == "backward"


def test_host_gaps_are_the_programs_time_not_the_emulators(tmp_path):
    """The emulator costs far more CPU per op than a real host; none of that may show up as host gaps.

    The same small program run for real on this CPU spends its whole step (host work *and* the tiny
    kernels) in a few milliseconds; the host time the emulated trace records for a step must not
    exceed that (before the per-crossing calibration it was several times larger)."""
    import statistics
    import subprocess
    import sys

    from tests.programs.harness import PROGRAMS, ROOT, _env

    def real_step_s() -> float:
        real = subprocess.run([sys.executable, str(PROGRAMS / "host_cost.py"), "--steps", "12"], cwd=ROOT,
                              env={**_env(), "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True, timeout=120)
        assert real.returncode == 0, real.stderr
        steps = [float(line.split("=")[1]) for line in real.stdout.split() if line.startswith("step_cpu_s=")]
        return statistics.median(steps[2:])  # medians on both sides: this shared machine's noise is large

    before = real_step_s()
    emu = run_worker("host_cost.py", tmp_path, "--steps", "10")
    # the real run before and after the emulation: this machine's speed moves by tens of percent within a
    # minute, and the emulation is compared with the real program at the slower of the two moments
    real_step = max(before, real_step_s())
    assert emu.rc == 0, emu.summary["error"]
    steady = emu.trace[emu.trace.iteration.between(1, 8)]
    per_step = steady.groupby("iteration").host_gap_s.sum().median()
    assert emu.summary["host_gap_baseline_s"]["crossing"] > 0
    assert per_step < 2.5 * real_step, (per_step, real_step)
    # the prices are measured before and after the program and every gap is charged their mean;
    # the loops that measure them leave nothing in the trace
    start, end = emu.summary["host_gap_price_samples"]
    mean = emu.summary["host_gap_baseline_s"]
    assert all(mean[k] == pytest.approx((start[k] + end[k]) / 2) for k in mean)
    assert not any(shapes is not None and len(shapes) and list(shapes[0]) == [256] for shapes in emu.trace.shapes)


def test_values_that_came_from_the_host_read_as_on_the_gpu(tmp_path):
    """Masks and token ids copied to the device keep their values (reads, views, ops on them, copy_);
    values produced on the device (random data) stay placeholders and are counted as such."""
    run = run_worker("host_values.py", tmp_path)
    assert run.rc == 0, run.summary["error"]
    got = run.printed()
    assert {k: got[k] for k in ("all", "row0_all", "tokens", "max_id", "copied")} == {
        "all": "False", "row0_all": "True", "tokens": "14", "max_id": "13", "copied": "14"}
    assert got["after_random"] == "0"  # the placeholder: the sum depends on device random numbers
    assert run.summary["real_value_reads"] == 5 and run.summary["placeholders"] == {"item_int": 1}


@pytest.fixture(scope="module")
def compiled_cpu(tmp_path_factory):
    """The compiled CPU program on the cpu target, profiled, and run with compile turned off (MAYA_COMPILE=eager)."""
    import os

    runs = {"cpu": run_worker("compiled_cpu.py", tmp_path_factory.mktemp("cpu"), gpu="cpu", timeout=600),
            "profile_dir": tmp_path_factory.mktemp("prof")}
    runs["profile"] = run_worker("compiled_cpu.py", runs["profile_dir"], gpu="cpu", extra=["--profile"], timeout=600)
    os.environ["MAYA_COMPILE"] = "eager"
    try:
        runs["eager"] = run_worker("compiled_cpu.py", tmp_path_factory.mktemp("eager"), gpu="cpu", timeout=600)
    finally:
        del os.environ["MAYA_COMPILE"]
    return runs


def test_a_compiled_cpu_program_records_inductors_cpp_kernels_in_place_of_the_unfused_ops(compiled_cpu):
    cpu, eager = compiled_cpu["cpu"], compiled_cpu["eager"]
    assert cpu.rc == 0 and eager.rc == 0, cpu.stderr[-2000:] + eager.stderr[-2000:]
    assert cpu.summary["compiled"] == {"torch.compile": 1} and cpu.summary["eager_fallbacks"] == {}
    assert eager.summary["eager_fallbacks"] == {"torch.compile": 1}
    steady = cpu.trace[cpu.trace.iteration == 1]
    unfused = eager.trace[eager.trace.iteration == 1]
    generated = steady[steady.op.str.startswith("cpp::")]
    assert len(generated) >= 2 and set(generated.op) <= {"cpp::pointwise", "cpp::reduction"}
    assert "cpp::reduction" in set(generated.op)  # the LayerNorm's statistics
    assert "aten::native_layer_norm" in set(unfused.op) and "aten::native_layer_norm" not in set(steady.op)
    assert len(steady) < len(unfused)  # fused: fewer kernels than the eager program runs
    assert (generated.bytes > 0).all() and all(json.loads(a)["numel"] > 0 for a in generated.args)
    # what each kernel's loops touch, counted from its source: the row's bytes, not its arguments' sizes
    work = [json.loads(a) for a in generated.args]
    assert all(w["read_bytes"] + w["write_bytes"] == b for w, b in zip(work, generated.bytes, strict=True))
    sizes = [sum(math.prod(s) * 4 for s in shapes) for shapes in generated.shapes]  # fp32 arguments
    assert any(b != size for b, size in zip(generated.bytes, sizes, strict=True))
    assert float(cpu.printed()["loss"]) == pytest.approx(float(eager.printed()["loss"]), rel=1e-3)  # ran for real


def test_profiling_a_compiled_cpu_program_times_each_cpp_kernel_for_the_calibration(compiled_cpu):
    from pipelines.runners.in_training import rows_from_profile

    prof = compiled_cpu["profile"]
    assert prof.rc == 0 and prof.summary["mode"] == "profile", prof.stderr[-2000:]
    generated = prof.trace[prof.trace.op.str.startswith("cpp::") & (prof.trace.iteration >= 0)]
    assert len(generated) >= 2 and (generated.duration_s > 0).all()
    # the CPU calibration's in-training rows keep them, so the cpu predictor learns the family
    rows = rows_from_profile(compiled_cpu["profile_dir"], {}, "test")
    learned = [r for r in rows if r["family"] == "generated"]
    assert learned and all(r["op"].startswith("cpp::") and r["timing"] == "in_training" for r in learned)
