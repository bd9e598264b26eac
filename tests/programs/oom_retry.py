"""A retry-on-OOM loop, as training scripts write it: halve the batch until the step fits, then go on.

Prints the large pool's allocated and reserved bytes after every caught OOM (`oom=BATCH ...`), where
it settled (`settled=BATCH ...`) and after `empty_cache` (`emptied ...`)."""

import torch

D = 8192  # one row of a batch: 32 KiB in fp32


def pools() -> str:
    s = torch.cuda.memory_stats()
    return f"allocated={s['allocated_bytes.large_pool.current']} reserved={s['reserved_bytes.large_pool.current']}"


w = torch.empty(D, D, device="cuda")
batch = 1 << 20  # 32 GiB per activation: three do not fit on an 80 GB GPU
with torch.no_grad():
    while True:
        try:
            x = torch.empty(batch, D, device="cuda")
            y = x @ w
            z = y * 2
            break
        except torch.cuda.OutOfMemoryError:
            x = y = None
            print(f"oom={batch} {pools()}", flush=True)
            batch //= 2
print(f"settled={batch} {pools()}", flush=True)
del x, y, z
torch.cuda.empty_cache()
print(f"emptied {pools()}", flush=True)
