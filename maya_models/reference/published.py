"""Measurements published as figures and tables rather than data files, transcribed with their provenance.

Two sources, each a real measurement under stated conditions:

- FlashAttention-2 speed (Dao-AILab/flash-attention, BSD-3-Clause): TFLOP/s printed on the bars of
  `assets/flash2_h100_fwd_bwd_benchmark.png` and `assets/flash2_a100_fwd_bwd_benchmark.png`
  (forward + backward, the README's "Performance" section) and the FlashAttention-2 bars of
  `assets/flash3_fp16_fwd.png` (forward on an H100 SXM5, the FlashAttention-3 section). Setup of
  `benchmarks/benchmark_flash_attention.py`: hidden dimension 2048 (2048 / head_dim heads), batch
  16k / seqlen, fp16/bf16, FLOPs = 4·b·s²·h·d (halved when causal), backward = 2.5 x forward. PyTorch's
  `scaled_dot_product_attention` flash backend is this kernel (FlashAttention-2), so these rows are
  the `implementation = "fa2"` rows of the SDPA ops. A backward time is the forward+backward time
  less the forward time of the same shape measured on the same part (the H100 forward figure; on
  the A100 the aiconfigurator SGLang FlashAttention-2 forward table): the difference of two
  measurements, said so in each row's provenance. Bars whose label cannot be read are left out.
- Maximum achievable matmul FLOPS (stas00/ml-engineering, CC-BY-SA-4.0): `compute/accelerator/README.md`,
  the MAMF table: the best mean TFLOP/s over a sweep of shapes, 100 iterations after 50 warm-up
  iterations each, back to back with unlocked clocks (`benchmarks/mamf-finder.py`: A = [m, k],
  B = [n, k]ᵀ, `torch.mm`). The sweep keeps the GPU busy for minutes, so the clock is the one the
  power limit allows: `timing = "sustained"`. These rows are not trained on; the kernel predictor
  compares its own prediction of the same shape with them (`maya_models.kernels`).
"""

from __future__ import annotations

import pandas as pd

FA_COMMIT = "0251105a2fb19d2957484b7f023cd8c115286ced"
FA_REPO = "Dao-AILab/flash-attention"
MAMF_COMMIT = "744d01e18b79512572f64a6bbd8b5f4a725203a7"
MAMF_REPO = "stas00/ml-engineering"
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS, HIDDEN = 16384, 2048

# (gpu, figure, causal, head_dim) -> TFLOP/s per sequence length (None: the label cannot be read)
FA2_FWD_BWD = {
    ("h100", "assets/flash2_h100_fwd_bwd_benchmark.png", False, 64): (215, 254, 274, 288, 294, 296),
    ("h100", "assets/flash2_h100_fwd_bwd_benchmark.png", False, 128): (248, 294, 320, 326, 335, 338),
    ("h100", "assets/flash2_h100_fwd_bwd_benchmark.png", True, 64): (141, 192, 232, 257, 273, 284),
    ("h100", "assets/flash2_h100_fwd_bwd_benchmark.png", True, 128): (163, 221, 265, 294, 308, 328),
    ("a100-80gb", "assets/flash2_a100_fwd_bwd_benchmark.png", False, 64): (132, None, 162, 171, 175, 176),
    ("a100-80gb", "assets/flash2_a100_fwd_bwd_benchmark.png", False, 128): (None, None, 187, 196, 201, 203),
    ("a100-80gb", "assets/flash2_a100_fwd_bwd_benchmark.png", True, 64): (88, 119, 140, 156, 165, 171),
    ("a100-80gb", "assets/flash2_a100_fwd_bwd_benchmark.png", True, 128): (99, 133, 155, 173, 182, 189),
}
FA2_FWD = {  # the FlashAttention-2 bars of the FlashAttention-3 forward figure (H100 SXM5, fp16)
    ("h100", "assets/flash3_fp16_fwd.png", False, 64): (282, 306, 318, 321, 322, 324),
    ("h100", "assets/flash3_fp16_fwd.png", True, 64): (180, 229, 262, 284, 295, 299),
    ("h100", "assets/flash3_fp16_fwd.png", False, 128): (309, 350, 362, 366, 370, 370),
    ("h100", "assets/flash3_fp16_fwd.png", True, 128): (191, 260, 298, 319, 333, 335),
    ("h100", "assets/flash3_fp16_fwd.png", False, 256): (275, 313, 321, 323, 324, 326),
    ("h100", "assets/flash3_fp16_fwd.png", True, 256): (208, 251, 278, 293, 297, 298),
}
FA_DEVICES = {"h100": "NVIDIA H100 80GB SXM5", "a100-80gb": "NVIDIA A100 80GB SXM4"}

# (gpu, dtype, TFLOP/s, m, n, k, the table's accelerator and notes)
MAMF = [
    ("a100-80gb", "bfloat16", 271.2, 1024, 10240, 5120, "NVIDIA A100 SXM, torch 2.6.0+cu126"),
    ("h100", "bfloat16", 794.5, 2048, 2048, 13312, "NVIDIA H100 SXM, torch 2.7.0+cu126"),
    ("h200", "bfloat16", 794.5, 2048, 2048, 13312, "NVIDIA H100 SXM row, whose note says 'H200 is the same'"),
    ("h200", "float8_e4m3fn", 1453.4, 1280, 4096, 12032, "NVIDIA H200 SXM, torch 2.7.1+cu128"),
    ("b200", "bfloat16", 1745.0, 1792, 16128, 3072, "NVIDIA B200 SXM, torch 2.7.1+cu128"),
    ("b200", "float8_e4m3fn", 3432.5, 15360, 4096, 3072, "NVIDIA B200 SXM, torch 2.7.1+cu128"),
]


def attention_flops(b: int, s: int, heads: int, d: int, causal: bool) -> float:
    """The benchmark's forward FLOPs (`benchmarks/benchmark_flash_attention.py`: flops())."""
    return 4.0 * b * s * s * heads * d / (2 if causal else 1)


def _sdpa(gpu, s, d, causal, seconds, backward, provenance, software, device, row):
    b, h = TOKENS // s, HIDDEN // d
    q = [b, h, s, d]
    contig = [h * s * d, s * d, d, 1]
    lse = [b, h, s]
    if backward:  # grad_out, query, key, value, out, logsumexp (the emulator's input order)
        op = "aten::_scaled_dot_product_flash_attention_backward"
        shapes, dtypes = [q, q, q, q, q, lse], ["bfloat16"] * 5 + ["float32"]
        strides = [contig] * 5 + [[h * s, s, 1]]
        out_shapes, out_dtypes = [q, q, q], ["bfloat16"] * 3
    else:
        op = "aten::_scaled_dot_product_flash_attention"
        shapes, dtypes, strides = [q, q, q], ["bfloat16"] * 3, [contig] * 3
        out_shapes, out_dtypes = [q, lse], ["bfloat16", "float32"]
    return row(op=op, shapes=shapes, dtypes=dtypes, strides=strides, args={"dropout_p": 0.0, "is_causal": causal},
               out_shapes=out_shapes, out_dtypes=out_dtypes, duration_s=seconds, gpu=gpu,
               source="flashattention-bench", provenance=provenance, device_name=device, software=software,
               timing="isolated_events", implementation="fa2")


def flashattention(row, a100_forward) -> pd.DataFrame:
    """FlashAttention-2 forward and backward rows. `a100_forward(s, d, causal)` gives the A100's measured
    forward seconds of the benchmark's shape (aiconfigurator SGLang FA2), or None."""
    rows = []
    fwd_s = {}
    for (gpu, fig, causal, d), tflops in FA2_FWD.items():
        for s, tf in zip(SEQS, tflops, strict=True):
            sec = attention_flops(TOKENS // s, s, HIDDEN // d, d, causal) / (tf * 1e12)
            fwd_s[(gpu, s, d, causal)] = (sec, f"{FA_REPO}@{FA_COMMIT}:{fig}")
            rows.append(_sdpa(gpu, s, d, causal, sec, False, f"{FA_REPO}@{FA_COMMIT}:{fig} (FlashAttention-2 bar, "
                              f"s={s}, d={d}, causal={causal}: {tf} TFLOP/s)", "FlashAttention-2, fp16",
                              FA_DEVICES[gpu], row))
    for (gpu, fig, causal, d), tflops in FA2_FWD_BWD.items():
        for s, tf in zip(SEQS, tflops, strict=True):
            if tf is None:
                continue
            total = 3.5 * attention_flops(TOKENS // s, s, HIDDEN // d, d, causal) / (tf * 1e12)
            if gpu == "a100-80gb":
                sec = a100_forward(s, d, causal)
                where = "aiconfigurator a100_sxm/attention/sglang/0.5.10 (FlashAttention-2)"
            else:
                sec, where = fwd_s.get((gpu, s, d, causal), (None, None))
            if sec is None or total <= sec:
                continue
            rows.append(_sdpa(gpu, s, d, causal, total - sec, True,
                              f"{FA_REPO}@{FA_COMMIT}:{fig} (FlashAttention-2 bar, s={s}, d={d}, causal={causal}: "
                              f"{tf} TFLOP/s forward+backward) less the forward from {where}",
                              "FlashAttention-2, fp16/bf16", FA_DEVICES[gpu], row))
    return pd.DataFrame(rows)


def mamf(row) -> pd.DataFrame:
    rows = []
    for gpu, dtype, tf, m, n, k, what in MAMF:
        sec = 2.0 * m * n * k / (tf * 1e12)
        prov = (f"{MAMF_REPO}@{MAMF_COMMIT}:compute/accelerator/README.md (MAMF table: {what}; {tf} TFLOP/s at "
                f"{m}x{n}x{k})")
        if dtype == "bfloat16":
            rows.append(row(op="aten::mm", shapes=[[m, k], [k, n]], dtypes=[dtype] * 2, strides=[[k, 1], [1, k]],
                            args={}, out_shapes=[[m, n]], out_dtypes=[dtype], duration_s=sec, gpu=gpu,
                            source="mamf", provenance=prov, device_name=what, software=what, timing="sustained"))
        else:
            rows.append(row(op="aten::_scaled_mm", shapes=[[m, k], [k, n], [1], [1]],
                            dtypes=[dtype, dtype, "float32", "float32"], strides=[[k, 1], [1, k], [1], [1]],
                            args={}, out_shapes=[[m, n]], out_dtypes=[dtype],
                            duration_s=sec, gpu=gpu, source="mamf", provenance=prov, device_name=what,
                            software=what, timing="sustained"))
    return pd.DataFrame(rows)
