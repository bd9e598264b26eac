"""Runs a little device work, then raises: the worker must keep the trace and the traceback."""

import torch

x = torch.randn(64, 64, device="cuda")
y = x @ x


def broken_helper():
    raise ValueError("boom from the training script")


broken_helper()
