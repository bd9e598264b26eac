"""FlexAttention (a higher-order op, as torchtitan's llama3 uses) forward and backward on the device."""

import torch
from torch.nn.attention.flex_attention import flex_attention

device = "cuda" if torch.cuda.is_available() else "cpu"
q, k, v = (torch.randn(2, 4, 128, 64, device=device, requires_grad=True) for _ in range(3))
out = flex_attention(q, k, v)
out.sum().backward()
print("flex ok", tuple(out.shape), tuple(q.grad.shape))
