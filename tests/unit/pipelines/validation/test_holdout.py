"""Holdout loaders and case selection: published rows become the right runnable configurations."""

from __future__ import annotations

import pytest

from pipelines.validation import holdout
from pipelines.validation.holdout import (
    HF_GPT2_PROGRAM,
    PROGRAM,
    HoldoutMissingError,
    case_work,
    load_neusight,
    load_vtrain,
    neusight_phases,
    select_vtrain,
)

HEADER = ("\ufeff# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
          "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)\n")


def _fake_shared(tmp_path, single_rows: str, neusight: dict[str, str] | None = None):
    data = tmp_path / "data" / "holdout"
    (data / "vtrain" / "data").mkdir(parents=True)
    (data / "vtrain" / "data" / "ground_truth_single.csv").write_text(HEADER + single_rows, encoding="utf-8")
    for rel, text in (neusight or {}).items():
        p = data / "neusight" / "scripts" / "asplos" / "label" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_vtrain_rows_become_megatron_program_arguments(tmp_path, monkeypatch):
    shared = _fake_shared(tmp_path, "8,32,4,1024,16,24,1024,2,2,2,219.732754\n")
    monkeypatch.setenv("MAYA_SHARED", str(shared))
    (case,) = load_vtrain("single")
    assert case.world_size == 8 and case.nnodes == 1 and case.nproc_per_node == 8
    assert case.measured_s == pytest.approx(0.219732754)
    assert case.parallel == {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 4, "global_batch": 32}
    args = case.args
    assert args[args.index("--tp") + 1] == "2" and args[args.index("--global-batch") + 1] == "32"
    assert "--checkpoint" in args and args[args.index("--dtype") + 1] == "fp16"
    assert "--half-params" in args  # Megatron-DeepSpeed --fp16: half-precision model, fp32 main weights
    assert args[args.index("--pad-vocab-to") + 1] == "128"  # Megatron pads the vocabulary
    assert args[args.index("--adam") + 1] == "fused"  # Megatron-DeepSpeed steps with Apex's FusedAdam on CUDA


def test_vtrain_bad_rows_are_refused_with_the_row_number(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_SHARED", str(_fake_shared(tmp_path, "8,32,4,1024,16,24,1024,2,2,1,219.7\n")))
    with pytest.raises(ValueError, match="row 2.*TP x PP x DP = 4"):
        load_vtrain("single")
    monkeypatch.setenv("MAYA_SHARED", str(_fake_shared(tmp_path / "b", "8,32,4,x,16,24,1024,2,2,2,219.7\n")))
    with pytest.raises(ValueError, match="row 2"):
        load_vtrain("single")


def test_missing_shared_folder_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("MAYA_SHARED", str(tmp_path / "nowhere"))
    with pytest.raises(HoldoutMissingError, match="MAYA_SHARED"):
        load_neusight()


def test_neusight_file_names_decode_to_parallel_layouts(tmp_path, monkeypatch):
    files = {
        "NVIDIA_H100_80GB_HBM3/gpt2_large-train-1024-16-dp4.json": '{"e2e_latency": 642.08}',
        "NVIDIA_H100_80GB_HBM3/gpt2_large-train-1024-4-pp4_1.json": '{"e2e_latency": 637.46}',
        "NVIDIA_H100_80GB_HBM3/gpt2_large-train-1024-1.json": '{"e2e_latency": 183.97, "num_layer": 36}',
        "NVIDIA_H100_80GB_HBM3/gpt2_large-inf-1024-4.json": '{"e2e_latency": 1.0}',  # inference: not a case
        "NVIDIA_H100_80GB_HBM3/bert_large-train-512-8.json": '{"e2e_latency": 1.0}',  # another model
    }
    monkeypatch.setenv("MAYA_SHARED", str(_fake_shared(tmp_path, "", files)))
    cases = {c.name.split("gpt2_large-train-")[1]: c for c in load_neusight()}
    assert sorted(cases) == ["1024-1", "1024-16-dp4", "1024-4-pp4_1"]
    dp = cases["1024-16-dp4"]
    assert dp.gpu == "h100" and dp.world_size == 4 and dp.measured_s == pytest.approx(0.64208)
    assert dp.parallel == {"tp": 1, "pp": 1, "dp": 4, "micro_batch": 4, "global_batch": 16}
    pp = cases["1024-4-pp4_1"]
    assert pp.parallel["pp"] == 4 and pp.parallel["micro_batch"] == 4  # one micro-batch through 4 stages
    single = cases["1024-1"]
    assert single.world_size == 1 and single.dtype == "fp32"
    # NeuSight timed Hugging Face's GPT-2 on single GPUs (forward + backward, no optimizer): that program
    assert single.program == HF_GPT2_PROGRAM and dp.program == pp.program == PROGRAM
    value = {k: v for k, v in zip(single.args[::2], single.args[1::2], strict=True)}
    assert value["--batch"] == "1" and value["--seq"] == "1024"
    assert value["--layers"] == "36"
    # the 4-GPU rows are Megatron-LM's whole step: Apex's FusedAdam, clipping at 1.0, the vocabulary padded to 128
    for c in (dp, pp):
        assert c.args[c.args.index("--adam") + 1] == "fused" and c.args[c.args.index("--clip-grad") + 1] == "1.0"
        assert c.args[c.args.index("--pad-vocab-to") + 1] == "128"
    assert "--adam" not in single.args and "--pad-vocab-to" not in single.args


def test_neusight_single_gpu_rows_give_their_forward_and_backward_apart(tmp_path, monkeypatch):
    """The error budget's split by pass: a single-GPU row's published forward and backward latencies (ms) in
    seconds; a 4-GPU row or a file without them gives none."""
    files = {
        "NVIDIA_H100_80GB_HBM3/gpt2_large-train-1024-1.json":
            '{"e2e_latency": 183.97, "num_layer": 36, "fw_latency": 63.7, "bwall_latency": 120.3}',
        "NVIDIA_H100_80GB_HBM3/gpt2_large-train-1024-4.json": '{"e2e_latency": 638.8, "num_layer": 36}',
        "NVIDIA_H100_80GB_HBM3/gpt2_large-train-1024-4-dp4.json":
            '{"e2e_latency": 194.9, "fw_latency": 60.0, "bwall_latency": 120.0}',
    }
    monkeypatch.setenv("MAYA_SHARED", str(_fake_shared(tmp_path, "", files)))
    got = neusight_phases()
    assert got == {"neusight-h100-gpt2_large-train-1024-1": {"forward": pytest.approx(0.0637),
                                                             "backward": pytest.approx(0.1203)}}
    assert set(got) <= {c.name for c in load_neusight()}  # keyed as the GPU table's cases are


def test_selection_is_deterministic_bounded_and_one_row_per_layout(tmp_path, monkeypatch):
    rows = "".join(f"{g},{gb},1,1024,16,{layers},1024,1,{g},1,{t}\n"
                   for g in (2, 4, 8) for gb in (8, 16, 64) for layers in (12, 24) for t in (100.0,)
                   if gb % g == 0)
    monkeypatch.setenv("MAYA_SHARED", str(_fake_shared(tmp_path, rows)))
    cases = load_vtrain("single")
    a = select_vtrain(cases, max_cases=10, max_work=96)
    b = select_vtrain(cases, max_cases=10, max_work=96)
    assert [c.name for c in a] == [c.name for c in b]
    assert len(a) == 3  # three layouts (DP over 2, 4, 8)
    assert all(case_work(c) <= 96 for c in a)
    assert select_vtrain(cases, max_cases=2, max_work=96)[0].world_size in (2, 4, 8)


@pytest.mark.skipif(not (holdout.shared_root() / "data" / "holdout").is_dir(), reason="shared holdout data absent")
def test_real_holdout_files_parse():
    single, multi, neusight = load_vtrain("single"), load_vtrain("multi"), load_neusight()
    assert len(single) == 1440 and len(multi) == 109
    assert single[0].world_size == 2 and single[0].measured_s == pytest.approx(0.372160408)
    assert max(c.world_size for c in multi) == 512 and min(c.nnodes for c in multi) == 8
    names = {c.name for c in neusight}
    assert "neusight-h100-gpt2_large-train-1024-16-tp4" in names and len(neusight) >= 11
