"""Exercises device APIs a script may use: OOM handling, data-dependent values, an op without a
fake kernel, streams/events, NVTX, memory stats. Prints what it observed as `key=value` lines."""

import torch

dev = "cuda"
props = torch.cuda.get_device_properties(0)
print(f"name={props.name}")
print(f"total_memory={props.total_memory}")
print(f"sms={props.multi_processor_count}")
print(f"capability={torch.cuda.get_device_capability()}")

x = torch.randn(1000, 1000, device=dev)
print(f"allocated_after_x={torch.cuda.memory_allocated()}")
try:
    huge = torch.empty(200 * 2**30, dtype=torch.uint8, device=dev)  # 200 GiB: more than any GPU
    print("oom_caught=False")
except torch.cuda.OutOfMemoryError as e:
    print(f"oom_caught=True msg={str(e).splitlines()[0]}")

v = x.sum().item()
print(f"item={v}")
if (x > 0).any():
    print("branch=taken")
nz = torch.nonzero(x > 0)
print(f"nonzero_shape={tuple(nz.shape)}")
sel = x[x > 0]
print(f"masked_shape={tuple(sel.shape)}")


@torch.library.custom_op("maya_test::no_fake_kernel", mutates_args=())
def no_fake_kernel(t: torch.Tensor) -> torch.Tensor:
    return t.clone()


y = no_fake_kernel(x)
print(f"unsupported_out_shape={tuple(y.shape)}")

s = torch.cuda.Stream()
ev = torch.cuda.Event()
with torch.cuda.stream(s):
    z = x @ x
    ev.record()
torch.cuda.current_stream().wait_event(ev)
torch.cuda.nvtx.range_push("region")
w = z + 1
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print(f"peak={torch.cuda.max_memory_allocated()} reserved={torch.cuda.memory_reserved()}")
compiled = torch.compile(lambda t: t * 2)
print(f"compiled_shape={tuple(compiled(w).shape)}")
free, total = torch.cuda.mem_get_info()
print(f"mem_total={total}")
