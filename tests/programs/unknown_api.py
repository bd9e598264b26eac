"""Calls a CUDA runtime binding the emulator does not provide."""

import torch

torch.cuda.init()
handle = torch._C._cuda_getCurrentBlasHandle()
print(f"handle={handle}")
