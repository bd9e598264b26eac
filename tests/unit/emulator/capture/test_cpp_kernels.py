"""A C++ kernel's work, read from the source Inductor generated for a CPU (emulator.capture.cpp_kernels)."""

from emulator.capture.cpp_kernels import kernel_kind, kernel_work, pointer_bytes
from emulator.core.ops import flops_and_bytes

# The shape of what Inductor writes (its indentation dropped) for a row sum of exp over a [32, 256] fp32 input
# gathered through int64 indices from a [4096, 256] table: a vector loop over each row, a scalar store per row.
GATHER_MEAN = '''
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  kernel(float* in_out_ptr0,
                       const int64_t* in_ptr0,
                       const float* in_ptr1)
{
auto out_ptr0 = in_out_ptr0;
{
#pragma GCC ivdep
for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(32L); x0+=static_cast<int64_t>(1L))
{
{
float tmp_acc0 = 0;
at::vec::Vectorized<float> tmp_acc0_vec = at::vec::Vectorized<float>(0);
for(int64_t x1=static_cast<int64_t>(0L); x1<static_cast<int64_t>(256L); x1+=static_cast<int64_t>(8L))
{
{
auto tmp0 = in_ptr0[static_cast<int64_t>(x0)];
auto tmp1 = Vec::loadu(in_ptr1 + static_cast<int64_t>(x1 + 256L*tmp0), static_cast<int64_t>(8));
auto tmp2 = tmp1.exp();
tmp_acc0_vec = tmp_acc0_vec + tmp2;
}
}
tmp_acc0 = tmp_acc0 + vec_reduce_all<float, 1>([](auto& x, auto& y) { return x + y; }, tmp_acc0_vec);
out_ptr0[static_cast<int64_t>(x0)] = static_cast<float>(tmp_acc0);
}
}
}
}
'''


def test_the_elements_a_kernel_touches_come_from_its_loops_not_its_arguments_sizes():
    assert kernel_kind(GATHER_MEAN) == "reduction"
    assert pointer_bytes(GATHER_MEAN) == {"in_out_ptr0": 4, "in_ptr0": 8, "in_ptr1": 4, "out_ptr0": 4}
    work = kernel_work(GATHER_MEAN)
    # 32 rows x 256 gathered floats, and one int64 index read per vector step (32 x 32 of them)
    assert work["read_bytes"] == 32 * 256 * 4 + 32 * 32 * 8
    assert work["write_bytes"] == 32 * 4  # one float a row
    assert work["transcendental_elems"] == 32 * 256
    # the table's 4 MB never enters the count: the roofline reads what the loops read
    args = {"loads": 2, "stores": 1, **work}
    _, nbytes = flops_and_bytes("cpp::reduction", [[32], [32], [4096, 256]], ["float32", "int64", "float32"],
                                args=args)
    assert nbytes == work["read_bytes"] + work["write_bytes"]


def test_a_kernel_compiled_for_dynamic_shapes_has_no_counted_work():
    dynamic = GATHER_MEAN.replace("x0<static_cast<int64_t>(32L)", "x0<static_cast<int64_t>(ks0)")
    assert kernel_work(dynamic) == {}
    args = {"loads": 2, "stores": 1}  # the row falls back to its arguments' sizes
    _, nbytes = flops_and_bytes("cpp::reduction", [[32], [32], [4096, 256]], ["float32", "int64", "float32"],
                                args=args)
    assert nbytes == (32 + 4096 * 256) * 4 + 32 * 8
