"""Some device work, then a batch too large for an 80 GB GPU that the program does not catch."""

import torch

w = torch.randn(1024, 1024, device="cuda")
y = w @ w
batch = torch.empty(200 * 2**30, dtype=torch.uint8, device="cuda")
print("never reached")
