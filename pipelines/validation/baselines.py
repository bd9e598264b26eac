"""The estimates a user would otherwise reach for, printed beside every maya figure.

- **roofline (serial)**: the same emulated trace, every op timed by maya's analytical roofline /
  alpha-beta fallback (`emulator.core.roofline`, no learned predictors) and summed per rank with no
  overlap and no pipeline bubbles; the slowest rank's iteration. What "count the FLOPs and bytes
  of my program" gives. (When the simulator offers a roofline-only mode, the runner reports that
  too, as `roofline (simulated)`.)
- **llm-analysis** (PyPI `llm-analysis`, Cheng Li): the FLOP-count model of a standard
  transformer, latency = training FLOPs / (TP x PP x peak x efficiency) x accumulation steps, with
  the package's own GPU configs and shipped default efficiencies. It models only 4/8/16-bit
  dtypes; for the FP32 NeuSight rows it is given the FP32 (non-tensor-core) peak from
  `emulator.core.hardware` as its peak, the only quantity its training latency uses.
"""

from __future__ import annotations

import logging
import math
import statistics
from pathlib import Path

import pandas as pd

from emulator.core.hardware import GPUSpec, get_gpu
from emulator.core.ops import collective_name, is_view_op, op_family
from emulator.core.roofline import collective_time, kernel_time, row_dtype
from emulator.trace.io import read_summary, read_traces

# maya GPU key -> llm-analysis gpu_configs name
LLM_ANALYSIS_GPUS = {"a100-80gb": "a100-sxm-80gb", "a100-40gb": "a100-sxm-40gb", "h100": "h100-sxm-80gb",
                     "a100-80gb-pcie": "a100-pcie-80gb", "a100-40gb-pcie": "a100-pcie-40gb",
                     "v100": "v100-sxm-32gb", "h100-nvl": "h100-pcie-80gb"}
TIMED_KINDS = ("kernel", "collective", "p2p", "memcpy", "memset")


class BaselineUnavailable(RuntimeError):
    """The baseline cannot be computed for this case; the message says why (shown in the report)."""


# ----------------------------------------------------------------------------- roofline from the trace
def _rank_iteration_times(table: pd.DataFrame, spec: GPUSpec, nnodes_of_group, gpus_per_node: int) -> dict[int, float]:
    times: dict[int, float] = {}
    for row in table.itertuples(index=False):
        if row.kind not in TIMED_KINDS or is_view_op(row.op):
            continue
        if row.kind in ("collective", "p2p"):
            ranks = list(row.group_ranks) if row.group_ranks is not None else []
            n = max(len(ranks), 2 if row.kind == "p2p" else 1)
            t = collective_time(collective_name(row.op), float(row.coll_bytes or 0), n, nnodes_of_group(ranks),
                                gpus_per_node, spec)
        else:
            fam = "memcpy" if row.kind == "memcpy" else op_family(row.op)
            dtypes = list(row.dtypes) if row.dtypes is not None else []
            flops = 0.0 if row.flops is None or math.isnan(row.flops) else float(row.flops)
            nbytes = 0.0 if row.bytes is None or math.isnan(row.bytes) else float(row.bytes)
            t = kernel_time(flops, nbytes, row_dtype(row.op, dtypes), fam, spec)
        times[int(row.iteration)] = times.get(int(row.iteration), 0.0) + t
    return times


def steady_iterations(ids: list[int], found: int | None = None) -> list[int]:
    """Trace iteration ids that represent the steady state.

    A trace numbers the span up to the first optimizer step -1 (it also holds the set-up), so K
    completed steps are ids -1..K-2; rows after the K-th step (id K-1, a partial tail) are not an
    iteration. Of the complete ones, the first (warm-up) is dropped when there are several.
    """
    ids = sorted(ids)
    if found:
        ids = [i for i in ids if i <= found - 2] or ids
    return ids[1:] if len(ids) > 1 else ids


def serial_roofline_s(out: Path, gpu: str | None = None, nproc_per_node: int | None = None) -> float:
    """Roofline-only iteration time of an emulation output folder (see module docstring)."""
    summary = read_summary(out)
    spec = get_gpu(gpu or summary.gpu)
    per_node = int(nproc_per_node or summary.nproc_per_node or spec.gpus_per_node)
    nnodes_of_group = lambda ranks: len({r // per_node for r in ranks}) if ranks else 1
    columns = ["kind", "op", "iteration", "dtypes", "flops", "bytes", "group_ranks", "coll_bytes"]
    per_iteration: dict[int, float] = {}
    traces = read_traces(out)
    if not traces:
        raise BaselineUnavailable(f"{out}: no rank traces")
    for table in traces.values():
        df = table.select(columns).to_pandas()
        for it, t in _rank_iteration_times(df, spec, nnodes_of_group, per_node).items():
            per_iteration[it] = max(per_iteration.get(it, 0.0), t)  # the slowest rank sets the pace
    steady = steady_iterations(list(per_iteration), summary.iterations_found)
    return statistics.median(per_iteration[i] for i in steady)


# ----------------------------------------------------------------------------- llm-analysis
def llm_analysis_s(model: dict, parallel: dict, gpu: str, dtype: str, checkpoint: bool) -> float:
    """llm-analysis' training latency per iteration for a GPT-style model (see module docstring)."""
    try:
        from llm_analysis.logger import logger as la_logger

        la_logger.setLevel(logging.ERROR)  # before config's import-time "transformers is not installed" warning
        from llm_analysis.analysis import ActivationRecomputation, LLMAnalysis
        from llm_analysis.config import DtypeConfig, ModelConfig, ParallelismConfig, get_gpu_config_by_name
    except ImportError as e:  # optional: the report says the baseline is missing instead of failing
        raise BaselineUnavailable(f"llm-analysis is not installed ({e})") from e
    name = LLM_ANALYSIS_GPUS.get(gpu)
    if name is None:
        raise BaselineUnavailable(f"llm-analysis has no config for {gpu}")
    gpu_cfg = get_gpu_config_by_name(name)
    if dtype == "fp32":
        from dataclasses import replace

        gpu_cfg = replace(gpu_cfg, peak_fp16_TFLOPS=get_gpu(gpu).peak_flops["float32"] / 1e12)
    tp, pp, dp = parallel["tp"], parallel["pp"], parallel["dp"]
    vocab = model["vocab"]
    m = ModelConfig(name="gpt", num_layers=model["layers"], n_head=model["heads"], hidden_dim=model["hidden"],
                    vocab_size=vocab, max_seq_len=model["seq"], ffn_embed_dim=model.get("ffn") or 4 * model["hidden"])
    analysis = LLMAnalysis(m, gpu_cfg, DtypeConfig(), ParallelismConfig(tp_size=tp, pp_size=pp, dp_size=dp))
    accumulation = parallel["global_batch"] // (parallel["micro_batch"] * dp)
    result = analysis.training(
        batch_size_per_gpu=parallel["micro_batch"], gradient_accumulation_steps=accumulation,
        global_batch_size=parallel["global_batch"], seq_len=model["seq"],
        activation_recomputation=ActivationRecomputation.FULL if checkpoint else ActivationRecomputation.NONE,
        flash_attn=False)  # the validation program runs unfused attention for every row
    return float(result["latency_per_iter"])
