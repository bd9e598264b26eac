"""The shared op signature: families and work counts used by every stage."""

import pytest

from emulator.core.ops import canonical_op, collective_name, flops_and_bytes, op_family


def test_canonical_names():
    assert canonical_op("aten.mm.default") == "aten::mm"
    assert canonical_op("aten::addmm.out") == "aten::addmm"
    assert canonical_op("c10d.allreduce_.default") == "c10d::allreduce_"


def test_families():
    assert op_family("aten::mm") == "gemm"
    assert op_family("aten::_scaled_dot_product_flash_attention_backward") == "attention_bwd"
    assert op_family("aten::_fused_adamw_") == "optimizer"
    assert op_family("c10d::allgather_") == "collective"
    assert op_family("c10d::send") == "p2p"
    assert collective_name("c10d::_reduce_scatter_base_") == "reduce_scatter"
    assert collective_name("_c10d_functional::all_gather_into_tensor") == "all_gather"


def test_linear_forward_gemm_flops():
    # y[m,n] = x[m,k] @ W[n,k]^T recorded as mm([m,k],[k,n])
    flops, nbytes = flops_and_bytes("aten::mm", [[4096, 768], [768, 3072]], ["bfloat16", "bfloat16"],
                                    [[4096, 3072]], ["bfloat16"])
    assert flops == 2 * 4096 * 768 * 3072
    assert nbytes == (4096 * 768 + 768 * 3072 + 4096 * 3072) * 2


def test_scaled_mm_moves_fp8_operands_an_out_dtype_result_and_the_scales():
    m, k, n = 8192, 2048, 6144
    fp8 = ["float8_e4m3fn", "float8_e4m3fn", "float32", "float32"]
    flops, tensorwise = flops_and_bytes("aten::_scaled_mm", [[m, k], [k, n], [], []], fp8, [[m, n]], ["bfloat16"])
    assert flops == 2 * m * n * k
    assert tensorwise == m * k + k * n + m * n * 2 + 2 * 4
    _, rowwise = flops_and_bytes("aten::_scaled_mm", [[m, k], [k, n], [m, 1], [1, n]], fp8, [[m, n]], ["bfloat16"])
    assert rowwise == m * k + k * n + m * n * 2 + (m + n) * 4

def test_causal_attention_counts_half_the_pairs():
    q = [8, 12, 1024, 64]
    full, _ = flops_and_bytes("aten::_scaled_dot_product_flash_attention", [q, q, q], ["bfloat16"] * 3,
                              args='{"is_causal": false}')
    causal, _ = flops_and_bytes("aten::_scaled_dot_product_flash_attention", [q, q, q], ["bfloat16"] * 3,
                                args='{"is_causal": true}')
    assert full == 4 * 8 * 12 * 1024 * 1024 * 64
    assert causal == pytest.approx(full * (1024 * 1025 / 2) / (1024 * 1024))


def test_nll_loss_reads_the_picked_log_probabilities_not_the_whole_vocabulary():
    """Cross-entropy's second kernel gathers one log-probability per token: at 1,024 tokens and a
    50,304-word vocabulary it moves kilobytes, where counting its [N, V] input made it 200 MB (the CPU
    predictor then put a 6-us op at 6.6 ms). Its backward writes the whole [N, V] gradient once."""
    n, v = 1024, 50304
    _, fwd = flops_and_bytes("aten::nll_loss_forward", [[n, v], [n]], ["float32", "int64"], [[], []],
                             ["float32", "float32"])
    assert fwd == n * 4 + n * 8 + 2 * 4
    bwd_dtypes = ["float32", "float32", "int64", "float32"]
    _, bwd = flops_and_bytes("aten::nll_loss_backward", [[], [n, v], [n], []], bwd_dtypes, [[n, v]], ["float32"])
    assert n * v * 4 < bwd < 1.01 * n * v * 4
    _, log_softmax = flops_and_bytes("aten::_log_softmax", [[n, v]], ["float32"], [[n, v]], ["float32"])
    assert log_softmax == 2 * n * v * 4  # the softmax before it does read every logit


def test_embedding_backward_counts_the_table_its_args_size_when_the_row_has_no_outputs():
    """A benchmark row records no outputs; the zeroed [num_weights, dim] table it writes is still its work."""
    grad, idx = [[512, 256], [512]], ["float32", "int64"]
    _, small = flops_and_bytes("aten::embedding_dense_backward", grad, idx, None, None, '{"num_weights": 8192}')
    _, large = flops_and_bytes("aten::embedding_dense_backward", grad, idx, None, None, '{"num_weights": 32000}')
    _, traced = flops_and_bytes("aten::embedding_dense_backward", grad, idx, [[32000, 256]], ["float32"],
                                '{"num_weights": 32000}')
    assert large - small == (32000 - 8192) * 256 * 4
    assert traced == large  # a trace row (outputs recorded) and a benchmark row of one signature agree
