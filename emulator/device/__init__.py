"""The fake CUDA device: a CPU-only (or GPU-less) PyTorch that behaves like the target GPU.

    boot.py        builds (once, cached) and preloads the C++ shim before `import torch`
    fake_cuda.cpp  CUDA device guard + CUDA hooks + SDPA backend choice by compute capability
    build_ext.py   the subprocess that compiles the shim with torch.utils.cpp_extension
    cuda_shim.py   `torch.cuda.*` answering as the target (properties, streams, events, memory, NVTX)
    fake_mode.py   FakeTensorMode for the device + GPU-path policies (foreach, swap, placeholders)

Only `emulator.launch.worker` should boot the device: it must happen in a fresh process before torch
is imported.
"""
