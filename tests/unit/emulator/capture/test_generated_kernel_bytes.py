"""What a generated Triton kernel's row says it does and moves: a looped reduction that reads a row in two passes moves
it twice, which Inductor's byte count (each buffer once) leaves out. The sources are in the form Inductor
generates for a CUDA target (torch 2.13)."""

from emulator.capture.compile import kernel_features, reread_pointers

# softmax over rows too wide for one block: one pass for the running max and sum, one to normalise
TWO_PASS_SOFTMAX = """
@triton.jit
def triton_red_fused__softmax_0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK, R0_BLOCK):
    xnumel = 4096
    r0_numel = 393216
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    _tmp2_max = tl.full([XBLOCK, R0_BLOCK], float('-inf'), tl.float32)
    _tmp2_sum = tl.zeros([XBLOCK, R0_BLOCK], tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 393216*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        _tmp2_max_next, _tmp2_sum_next = triton_helpers.online_softmax_combine(_tmp2_max, _tmp2_sum, tmp0, False)
        _tmp2_max = tl.where(r0_mask & xmask, _tmp2_max_next, _tmp2_max)
        _tmp2_sum = tl.where(r0_mask & xmask, _tmp2_sum_next, _tmp2_sum)
    tmp2, tmp3 = triton_helpers.online_softmax_reduce(_tmp2_max, _tmp2_sum, 1, False)
    tmp2 = tmp2[:, None]
    tmp3 = tmp3[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp4 = tl.load(in_ptr0 + (r0_1 + 393216*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp5 = tmp4 - tmp2
        tmp6 = libdevice.exp(tmp5)
        tmp7 = (tmp6 / tmp3)
        tl.store(out_ptr2 + (r0_1 + 393216*x0), tmp7, r0_mask & xmask)
"""

# cross-entropy backward in place: the first pass reads no row (only the per-row target, loaded before it),
# the second reads and writes the logits' gradient once, as an in-place buffer is counted (twice)
IN_PLACE_SECOND_PASS = """
@triton.jit
def triton_red_fused_nll_loss_backward_0(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK, R0_BLOCK):
    xnumel = 1024
    r0_numel = 50257
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), xmask, eviction_policy='evict_last')
    _tmp9 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_1 = r0_index
        tmp5 = (r0_1).to(tl.int64)
        tmp7 = tmp0 == tmp5
        tmp8 = tl.where(tmp7, -1.0, 0.0)
        _tmp9 = _tmp9 + tl.broadcast_to(tmp8, [XBLOCK, R0_BLOCK])
    tmp9 = tl.sum(_tmp9, 1)[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp10 = tl.load(in_out_ptr0 + (r0_1 + 50304*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp11 = libdevice.exp(tmp10) * tmp9
        tl.store(in_out_ptr0 + (r0_1 + 50304*x0), tmp11, r0_mask & xmask)
"""

# a layer norm whose first pass writes the embedded row and whose second reads it back to normalise it
STORED_THEN_LOADED = """
@triton.jit
def triton_red_fused_embedding_layer_norm_0(in_ptr0, in_ptr1, out_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK, R0_BLOCK):
    xnumel = 8192
    r0_numel = 2048
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), None, eviction_policy='evict_last')
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp2 = tl.load(in_ptr1 + (r0_1 + 2048*tmp0), r0_mask, eviction_policy='evict_first', other=0.0)
        tl.store(out_ptr0 + (r0_1 + 2048*x0), tmp2, r0_mask)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        r0_1 = r0_index
        tmp16 = tl.load(out_ptr0 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tl.store(out_ptr2 + (r0_1 + 2048*x0), tmp16, r0_mask)
"""

# a row that fits one block: no loop, every buffer read or written once
PERSISTENT = """
@triton.jit
def triton_per_fused_native_layer_norm_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK):
    r0_numel = 768
    R0_BLOCK: tl.constexpr = 1024
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 768*x0), r0_index < r0_numel, other=0.0)
    tmp1 = tl.sum(tmp0, 1)[:, None]
    tl.store(out_ptr0 + (r0_1 + 768*x0), tmp0 - tmp1 / 768, r0_index < r0_numel)
"""


def test_a_two_pass_softmax_reads_its_input_twice():
    assert reread_pointers(TWO_PASS_SOFTMAX) == {"in_ptr0": 1}
    assert kernel_features(TWO_PASS_SOFTMAX)["passes"] == 2


def test_per_row_values_and_an_in_place_pass_add_nothing_to_inductors_count():
    assert reread_pointers(IN_PLACE_SECOND_PASS) == {}
    assert kernel_features(IN_PLACE_SECOND_PASS)["passes"] == 2


def test_a_row_stored_in_one_pass_and_loaded_in_the_next_moves_again():
    assert reread_pointers(STORED_THEN_LOADED) == {"out_ptr0": 1}


def test_a_persistent_reduction_moves_each_buffer_once():
    assert reread_pointers(PERSISTENT) == {}
    assert kernel_features(PERSISTENT)["passes"] == 0


RELU = """
@triton.jit
def triton_poi_fused_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK):
    xoffset = tl.program_id(0) * XBLOCK
    x0 = xoffset + tl.arange(0, XBLOCK)[:]
    tmp0 = tl.load(in_ptr0 + (x0), None)
    tmp1 = tl.full([1], 0, tl.int32)
    tmp2 = triton_helpers.maximum(tmp1, tmp0)
    tl.store(out_ptr0 + (x0), tmp2, None)
"""


def test_only_reductions_along_a_block_axis_count_as_reductions():
    assert kernel_features(RELU)["reductions"] == 0  # triton_helpers.maximum is elementwise
    assert kernel_features(TWO_PASS_SOFTMAX)["reductions"] == 1  # online_softmax_reduce; the combine is not
    assert kernel_features(PERSISTENT)["reductions"] == 1
