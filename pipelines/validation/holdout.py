"""Published GPU measurements maya is judged against, turned into runnable validation cases.

Two sources, both in the evaluation-only holdout (`$MAYA_SHARED/data/holdout/`, see its README):
- vTrain (MICRO'24): measured Megatron-DeepSpeed GPT iteration times on A100 SXM nodes of 8 GPUs,
  `vtrain/data/ground_truth_{single,multi}.csv` (UTF-8 BOM, time in ms). The matching configs use
  the 1F1B schedule and activation checkpointing; mixed precision (fp16), vocabulary padded to a
  multiple of 128 x TP as Megatron does, and Megatron's unfused attention (QK^T, masked softmax,
  dropout, AV: no flash attention in the Megatron-DeepSpeed of 2023), i.e. the program's `eager` path.
- NeuSight (ASPLOS'25): measured end-to-end FP32 training latency of GPT-2-large,
  `neusight/scripts/asplos/label/<GPU>/gpt2_large-train-<seq>-<batch>[-dp4|-tp4|-pp4_1].json`
  (`e2e_latency` ms). Batch is the global batch; `pp4_1` is four stages with one micro-batch.
  The single-GPU numbers are forward + backward only (`e2e = fw + bwall`), without an optimizer step;
  the 4-GPU ones are Megatron-LM's whole training step (`NEUSIGHT_MEGATRON`).

Each row becomes a `Case`: the arguments of `examples/validation/megatron_gpt.py` that reproduce it,
the cluster shape, and the measured time. Nothing here is ever trained or tuned on.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "examples/validation/megatron_gpt.py"
# The Megatron-style validation programs, by name; both take the same command line. "imitation" is plain
# PyTorch (torch.distributed.pipelining for PP) and needs nothing else; "megatron-core" is built with
# megatron-core itself (a test-time extra: `make test-frameworks` installs it).
PROGRAMS = {"imitation": PROGRAM, "megatron-core": "examples/validation/megatron_core_gpt.py"}
# NeuSight's single-GPU rows timed Hugging Face's GPT-2, not a Megatron program: its own ops and layouts
HF_GPT2_PROGRAM = "examples/validation/hf_gpt2.py"

# NeuSight's directory names -> maya GPU keys (emulator.core.hardware)
NEUSIGHT_GPUS = {"NVIDIA_H100_80GB_HBM3": "h100", "NVIDIA_A100-SXM4-40GB": "a100-40gb",
                 "NVIDIA_A100_80GB_PCIe": "a100-80gb-pcie"}
GPT2_LARGE = dict(layers=36, hidden=1280, heads=20, vocab=50257)
VTRAIN_VOCAB = 50257  # Megatron GPT-2 BPE vocabulary
# vTrain measured with Megatron-DeepSpeed, whose `megatron/optimizer/__init__.py` on its main line (every
# version from 2023-01 on, e.g. 178beeb4 and ad0e1fd6 of microsoft/Megatron-DeepSpeed) takes Apex's
# FusedAdam when the accelerator is CUDA: one multi-tensor kernel per step, not torch's foreach passes.
# (Its commit 8fd352da, which builds torch's AdamW "as a temporary solution for CPU optimizer offloading",
# is on a side branch, not an ancestor of the main line.) vTrain's own profiler steps a FusedAdam too.
VTRAIN_ADAM = ["--adam", "fused"]
# NeuSight's 4-GPU rows (sitar-lab/NeuSight @ 6945927, scripts/asplos/collect_label_distributed.py) trained
# Megatron-LM (branch core_r0.5.0, scripts/asplos/install_megatron.sh) through Accelerate's Megatron-LM plugin:
# `model(**batch)` runs Megatron's whole train step, the update included (the plugin's `optimizer.step()`
# does nothing), inside the timed region. That Megatron-LM steps Apex's FusedAdam (its
# megatron/optimizer/__init__.py imports it unconditionally), clips at 1.0 (`megatron_lm_gradient_clipping`
# in NeuSight's Accelerate configs) and pads the vocabulary to a multiple of 128 x TP, as vTrain's did.
# The single-GPU rows are Hugging Face's GPT-2 timed forward + backward only, and keep their command line.
NEUSIGHT_MEGATRON = ["--adam", "fused", "--clip-grad", "1.0"]


class HoldoutMissingError(FileNotFoundError):
    """The shared holdout folder is not where MAYA_SHARED says; the GPU table cannot be built."""


def shared_root() -> Path:
    """$MAYA_SHARED, else `../shared` next to the repository root."""
    return Path(os.environ.get("MAYA_SHARED") or REPO_ROOT.parent / "shared").resolve()


def holdout_root(shared: Path | None = None) -> Path:
    root = Path(shared or shared_root()) / "data" / "holdout"
    if not root.is_dir():
        raise HoldoutMissingError(
            f"no holdout measurements at {root}; set MAYA_SHARED to the folder holding data/holdout/")
    return root


@dataclass
class Case:
    """One measured configuration and how to reproduce it with the validation program."""

    name: str
    source: str  # "vtrain-single" | "vtrain-multi" | "neusight"
    gpu: str  # maya GPU key
    world_size: int
    nproc_per_node: int
    nnodes: int
    measured_s: float
    args: list[str]  # arguments of PROGRAM
    model: dict = field(default_factory=dict)  # layers, hidden, heads, vocab, seq (for baselines)
    parallel: dict = field(default_factory=dict)  # tp, pp, dp, micro_batch, global_batch
    dtype: str = "fp16"
    checkpoint: bool = False
    note: str = ""
    program: str = PROGRAM  # relative to the repository root

    @property
    def micro_batches(self) -> int:
        """Micro-batches one data-parallel rank runs an iteration (gradient accumulation steps)."""
        p = self.parallel
        return p["global_batch"] // (p["micro_batch"] * p["dp"])

    def to_dict(self) -> dict:
        return asdict(self)


def _program_args(model: dict, par: dict, dtype: str, checkpoint: bool, attention: str, pad_vocab: int,
                  half_params: bool = False) -> list[str]:
    args = ["--layers", model["layers"], "--hidden", model["hidden"], "--heads", model["heads"],
            "--seq", model["seq"], "--vocab", model["vocab"], "--pad-vocab-to", pad_vocab,
            "--tp", par["tp"], "--pp", par["pp"], "--micro-batch", par["micro_batch"],
            "--global-batch", par["global_batch"], "--dtype", dtype, "--attention", attention]
    if checkpoint:
        args.append("--checkpoint")
    if half_params:
        args.append("--half-params")
    return [str(a) for a in args]


def _num(v: str) -> float:
    return float(v.strip())


def load_vtrain(kind: str = "single", shared: Path | None = None) -> list[Case]:
    """All rows of vTrain's ground_truth_<kind>.csv as cases (kind: 'single' or 'multi')."""
    if kind not in ("single", "multi"):
        raise ValueError(f"vTrain table kind must be 'single' or 'multi', not {kind!r}")
    path = holdout_root(shared) / "vtrain" / "data" / f"ground_truth_{kind}.csv"
    if not path.exists():
        raise HoldoutMissingError(f"{path} is missing")
    cases = []
    with open(path, encoding="utf-8-sig", newline="") as f:
        for i, raw in enumerate(csv.DictReader(f)):
            row = {k.strip(): v for k, v in raw.items() if k}
            try:
                gpus = int(_num(row["# GPUs"]))
                model = dict(layers=int(_num(row["# layers"])), hidden=int(_num(row["hidden size"])),
                             heads=int(_num(row["attention heads"])), vocab=VTRAIN_VOCAB,
                             seq=int(_num(row["sequence length"])))
                par = dict(tp=int(_num(row["tensor parallelism"])), pp=int(_num(row["pipeline parallelism"])),
                           dp=int(_num(row["data parallelism"])), micro_batch=int(_num(row["micro batch"])),
                           global_batch=int(_num(row["global batch"])))
                measured = _num(row["iteration time (ms)"]) / 1e3
            except (KeyError, ValueError) as e:
                raise ValueError(f"{path}: row {i + 2} is not a vTrain ground-truth row ({e})") from e
            if par["tp"] * par["pp"] * par["dp"] != gpus:
                raise ValueError(f"{path}: row {i + 2}: TP x PP x DP = "
                                 f"{par['tp'] * par['pp'] * par['dp']} but # GPUs = {gpus}")
            per_node = min(gpus, 8)
            cases.append(Case(
                name=f"vtrain-{kind}-{i:04d}", source=f"vtrain-{kind}", gpu="a100-80gb", world_size=gpus,
                nproc_per_node=per_node, nnodes=gpus // per_node, measured_s=measured,
                # Megatron-DeepSpeed's --fp16: a half-precision model with fp32 main weights, not autocast;
                # its optimizer on CUDA is Apex's FusedAdam (VTRAIN_ADAM)
                args=_program_args(model, par, "fp16", True, "eager", 128, half_params=True) + VTRAIN_ADAM,
                model=model, parallel=par,
                dtype="fp16", checkpoint=True,
                note=f"h{model['hidden']} L{model['layers']} tp{par['tp']} pp{par['pp']} dp{par['dp']} "
                     f"mb{par['micro_batch']} gb{par['global_batch']}"))
    return cases


_NEUSIGHT_NAME = re.compile(r"^gpt2_large-train-(?P<seq>\d+)-(?P<batch>\d+)(?:-(?P<par>dp4|tp4|pp4_1))?\.json$")


def load_neusight(shared: Path | None = None) -> list[Case]:
    """Every GPT-2-large training measurement of NeuSight (single GPU and 4-GPU dp/tp/pp)."""
    cases = []
    for gpu, path, m, data in _neusight_labels(shared):
        if "e2e_latency" not in data:
            raise ValueError(f"{path}: no e2e_latency key")
        seq, batch, kind = int(m["seq"]), int(m["batch"]), m["par"] or "single"
        n = 1 if kind == "single" else 4
        par = dict(tp=4 if kind == "tp4" else 1, pp=4 if kind == "pp4_1" else 1, dp=4 if kind == "dp4" else 1,
                   micro_batch=batch // 4 if kind == "dp4" else batch, global_batch=batch)
        model = dict(GPT2_LARGE, seq=seq)
        note = f"gpt2-large b{batch} {kind}"
        program = PROGRAM
        if kind == "single":  # Hugging Face's GPT-2, timed forward + backward only
            note += " (measured fwd+bwd, no optimizer step)"
            program = HF_GPT2_PROGRAM
            args = [str(v) for v in ("--layers", model["layers"], "--hidden", model["hidden"], "--heads",
                                     model["heads"], "--vocab", model["vocab"], "--seq", seq, "--batch", batch)]
        else:  # Megatron-LM's whole step
            args = _program_args(model, par, "fp32", False, "eager", 128) + NEUSIGHT_MEGATRON
        cases.append(Case(
            name=f"neusight-{gpu}-{path.stem}", source="neusight", gpu=gpu, world_size=n, nproc_per_node=n,
            nnodes=1, measured_s=float(data["e2e_latency"]) / 1e3, args=args, model=model, parallel=par,
            dtype="fp32", checkpoint=False, note=note, program=program))
    return cases


def neusight_phases(shared: Path | None = None) -> dict[str, dict[str, float]]:
    """{case name: {"forward": s, "backward": s}} of NeuSight's single-GPU rows: the forward and the whole
    backward it published beside each end-to-end time (`fw_latency`, `bwall_latency`, CUDA events around each
    pass), for the error budget's split by phase ({} without the holdout data)."""
    try:
        labels = list(_neusight_labels(shared))
    except HoldoutMissingError:
        return {}
    return {f"neusight-{gpu}-{path.stem}": {"forward": float(data["fw_latency"]) / 1e3,
                                            "backward": float(data["bwall_latency"]) / 1e3}
            for gpu, path, m, data in labels if not m["par"] and "fw_latency" in data and "bwall_latency" in data}


def _neusight_labels(shared: Path | None = None):
    """(gpu, path, name match, JSON) of every GPT-2-large training label of a known GPU, in a stable order."""
    base = holdout_root(shared) / "neusight" / "scripts" / "asplos" / "label"
    if not base.is_dir():
        raise HoldoutMissingError(f"{base} is missing")
    for gpu_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        gpu = NEUSIGHT_GPUS.get(gpu_dir.name)
        for path in sorted(gpu_dir.glob("gpt2_large-train-*.json")):
            m = _NEUSIGHT_NAME.match(path.name)
            if m and gpu is not None:
                with open(path) as f:
                    yield gpu, path, m, json.load(f)


def case_work(c: Case) -> float:
    """Emulation cost proxy: micro-batches x layers, summed over the distinct pipeline stages.

    Fake tensors make emulation cost independent of the hidden size; it grows with the number
    of ops, i.e. with layers and micro-batches (DP and TP replicas are deduplicated).
    """
    return c.micro_batches * c.model["layers"]


def select_vtrain(cases: list[Case], max_cases: int, max_work: float, seed: int = 0) -> list[Case]:
    """A deterministic, stratified subset of vTrain rows that fits `make validate` on a small CPU box.

    Rows are grouped by parallel layout (#GPUs, TP, PP, DP); from each layout one row whose
    `case_work` is at most `max_work` is drawn with a fixed seed (so model sizes and batches vary
    instead of always taking the smallest), and at most `max_cases` layouts are kept, spread
    round-robin over the GPU counts so 2-, 4- and 8-GPU (or 64-512-GPU) jobs are all represented.
    """
    rng = random.Random(seed)
    layouts: dict[tuple, list[Case]] = {}
    for c in cases:
        if case_work(c) <= max_work:
            p = c.parallel
            layouts.setdefault((c.world_size, p["tp"], p["pp"], p["dp"]), []).append(c)
    by_size: dict[int, list[Case]] = {}
    for key in sorted(layouts):
        by_size.setdefault(key[0], []).append(rng.choice(sorted(layouts[key], key=lambda c: c.name)))
    for size in by_size:
        rng.shuffle(by_size[size])
    chosen: list[Case] = []
    while len(chosen) < max_cases and any(by_size.values()):
        for size in sorted(by_size):
            if by_size[size] and len(chosen) < max_cases:
                chosen.append(by_size[size].pop())
    return sorted(chosen, key=lambda c: c.name)
