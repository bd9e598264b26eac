"""Run one KernelBench problem compiled, as KernelBench times it: `torch.compile(Model(*get_init_inputs()))` called
on `get_inputs()` on the GPU, under `torch.no_grad()`, twice (the first call compiles).

    maya emulate --gpu h100 --out OUT examples/validation/kernelbench_problem.py PROBLEM.py

Used by `python -m pipelines.validation.generated_kernels --curate` to see which kernels Inductor generates for
each problem; the problem's inputs are made on the device (`torch.set_default_device`), so its multi-GB tensors
are the emulator's fake ones, never host memory.
"""

import importlib.util
import sys

import torch

spec = importlib.util.spec_from_file_location("kernelbench_problem", sys.argv[1])
problem = importlib.util.module_from_spec(spec)
spec.loader.exec_module(problem)
torch.set_default_device("cuda")
model = problem.Model(*problem.get_init_inputs())
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
compiled = torch.compile(model)
with torch.no_grad():
    for _ in range(2):
        compiled(*inputs)
torch.cuda.synchronize()
