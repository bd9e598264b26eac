"""Run under the emulator: device memory follows storages, not tensors. Prints `name=allocated_bytes`
after each step: a view keeps its storage alive, the last view's death frees it, and
`untyped_storage().resize_()` (how FSDP2 frees and re-grows unsharded parameters) frees and
takes memory."""

import torch


def show(name: str) -> None:
    print(f"{name}={torch.cuda.memory_allocated()}", flush=True)


x = torch.empty(1024, 1024, device="cuda")  # 4 MiB
show("one")
v = x[:512]
del x
show("view_alive")
del v
show("view_dead")
p = torch.empty(2048, 1024, device="cuda")  # 8 MiB
show("param")
p.untyped_storage().resize_(0)
show("resized_to_0")
p.untyped_storage().resize_(2048 * 1024 * 4)
show("regrown")
host = torch.empty(16)  # a host storage: resizing it is no device event
host.untyped_storage().resize_(0)
show("host_resized")
del p
show("all_dead")
print(f"peak={torch.cuda.max_memory_allocated()}", flush=True)
