"""Which cases `make validate` runs, and why these.

CPU table (measured on this machine): the ordinary examples and the validation program at sizes
where one iteration takes ~0.1-1 s on a laptop-class CPU, so timer noise and Python overhead do
not dominate, at world sizes 1 and 2 (gloo).

GPU table (published measurements, evaluation only):
- NeuSight: all 13 GPT-2-large training measurements (H100 single/dp4/tp4/pp4, A100-SXM4-40GB
  dp4/tp4/pp4, A100-80GB-PCIe single).
- vTrain single node: 1,440 rows are far too many to emulate on 2 cores; one row per parallel layout
  (#GPUs, TP, PP, DP), drawn with a fixed seed among rows whose emulation work (micro-batches x
  layers) is at most 96, at most 16 layouts spread over 2/4/8 GPUs. Each takes tens of seconds.
- vTrain multi-node: the same rule with work <= 240 and 6 layouts (64-512 A100s; ranks are
  deduplicated so only the distinct pipeline stages are emulated). The 175B rows need >= 4,608
  layer-micro-batches per iteration (hours on 2 cores) and are left out.
`--quick` keeps a handful of each for a smoke run.
"""

from __future__ import annotations

from pipelines.validation.holdout import Case, load_neusight, load_vtrain, select_vtrain

SINGLE_MAX_WORK, SINGLE_CASES = 96, 16
MULTI_MAX_WORK, MULTI_CASES = 240, 6

_EXAMPLE = ["--model", "tiny", "--d-model", "256", "--layers", "4", "--heads", "8", "--kv-heads", "8",
            "--seq-len", "128", "--vocab", "4096", "--batch-size", "4", "--dtype", "float32"]
_MEGATRON = ["--layers", "4", "--hidden", "256", "--heads", "8", "--seq", "128", "--vocab", "4096",
             "--micro-batch", "4", "--dtype", "fp32", "--dropout", "0.0"]


def _cpu(name: str, program: str, world: int, args: list[str], note: str) -> Case:
    return Case(name=f"cpu-{name}", source="cpu", gpu="cpu", world_size=world, nproc_per_node=world, nnodes=1,
                measured_s=float("nan"), args=args, program=program, dtype="fp32", note=note)


def cpu_cases(quick: bool = False) -> list[Case]:
    cases = [
        _cpu("gpt-single", "examples/gpt_single.py", 1, _EXAMPLE, "examples/gpt_single.py, 1 process"),
        _cpu("megatron-1", "examples/validation/megatron_gpt.py", 1, _MEGATRON, "megatron_gpt, 1 process"),
        _cpu("ddp-2", "examples/ddp.py", 2, _EXAMPLE, "examples/ddp.py, DDP over 2 (gloo)"),
        _cpu("fsdp2-2", "examples/fsdp2.py", 2, _EXAMPLE, "examples/fsdp2.py, FSDP2 over 2 (gloo)"),
        _cpu("megatron-tp2", "examples/validation/megatron_gpt.py", 2, [*_MEGATRON, "--tp", "2"],
             "megatron_gpt TP=2"),
        _cpu("megatron-pp2", "examples/validation/megatron_gpt.py", 2,
             [*_MEGATRON, "--pp", "2", "--global-batch", "16"], "megatron_gpt PP=2, 4 micro-batches (1F1B)"),
        # shapes and layouts added (before their predictions were looked at) to check that CPU fidelity
        # generalizes beyond the six above: wider, deeper with longer sequences, TP of a wider model,
        # PP with twice the micro-batches
        _cpu("megatron-wide", "examples/validation/megatron_gpt.py", 1,
             [*_MEGATRON[:2], "--hidden", "768", "--heads", "12", *_MEGATRON[6:]],
             "megatron_gpt hidden 768, 1 process"),
        _cpu("megatron-deep-long", "examples/validation/megatron_gpt.py", 1,
             ["--layers", "12", "--hidden", "128", "--heads", "4", "--seq", "512", "--vocab", "4096",
              "--micro-batch", "2", "--dtype", "fp32", "--dropout", "0.0"], "megatron_gpt 12 layers, seq 512"),
        _cpu("megatron-tp2-wide", "examples/validation/megatron_gpt.py", 2,
             [*_MEGATRON[:2], "--hidden", "512", "--heads", "8", *_MEGATRON[6:], "--tp", "2"],
             "megatron_gpt hidden 512, TP=2"),
        _cpu("megatron-pp2-mb8", "examples/validation/megatron_gpt.py", 2,
             [*_MEGATRON, "--pp", "2", "--global-batch", "32"], "megatron_gpt PP=2, 8 micro-batches (1F1B)"),
        # FSDP2 at twice the width and sequence of fsdp2-2 (added before its prediction was looked at)
        _cpu("fsdp2-2-wide-long", "examples/fsdp2.py", 2,
             [*_EXAMPLE[:2], "--d-model", "512", *_EXAMPLE[4:10], "--seq-len", "256", *_EXAMPLE[12:]],
             "examples/fsdp2.py hidden 512, seq 256, FSDP2 over 2 (gloo)"),
        # DDP at width 640, seq 256 (added with the in-training calibration programs, before its prediction
        # was looked at: activations of 5 MB and more, past the first programs' outputs)
        _cpu("ddp-2-wide-long", "examples/ddp.py", 2,
             [*_EXAMPLE[:2], "--d-model", "640", "--layers", "4", "--heads", "10", "--kv-heads", "10",
              "--seq-len", "256", "--vocab", "4096", "--batch-size", "2", "--dtype", "float32"],
             "examples/ddp.py hidden 640, seq 256, DDP over 2 (gloo)"),
        # the first case compiled with torch.compile (added with the cpu target's Inductor path, before its
        # prediction was looked at): Inductor's C++ kernels in place of the fused ops
        _cpu("gpt-single-compiled", "examples/gpt_single.py", 1, [*_EXAMPLE, "--compile"],
             "examples/gpt_single.py with torch.compile, 1 process"),
    ]
    return cases[:3] if quick else cases


def gpu_cases(quick: bool = False) -> list[Case]:
    """NeuSight + the vTrain subsets; raises HoldoutMissingError when the shared data is absent."""
    neusight = load_neusight()
    single = select_vtrain(load_vtrain("single"), 4 if quick else SINGLE_CASES, SINGLE_MAX_WORK)
    multi = select_vtrain(load_vtrain("multi"), 1 if quick else MULTI_CASES, MULTI_MAX_WORK)
    if quick:
        neusight = [c for c in neusight if c.gpu == "h100" and "-4" in c.name][:4]
    return neusight + single + multi
