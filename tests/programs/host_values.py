"""Device values whose data came from the host: the emulator reads their real values (key=value lines)."""

import torch

import emulator

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
mask = torch.ones(2, 8, dtype=torch.long)
mask[1, 6:] = 0  # the second sequence is padded
m = mask.to(dev)
print(f"all={bool(m.all())}")
print(f"row0_all={bool(m[0].all())}")  # a view of the copied storage
print(f"tokens={int(m.sum())}")
ids = torch.arange(16).view(2, 8).to(dev)
print(f"max_id={int((ids * m).max())}")
target = torch.zeros(2, 8, dtype=torch.long, device=dev)
target.copy_(mask)  # copy_ from the host overwrites the whole target
print(f"copied={int(target.sum())}")
noise = torch.randn(2, 8, device=dev)  # device-side random data has no real value on the fake device
target.add_(noise.long())
print(f"after_random={int(target.sum())}")
emulator.mark_iteration()
