"""Tensors whose metadata changes in place after the emulator's signature cache has seen them.

Each block repeats an op on the same tensor before and after an in-place change (an op such as
`t_`/`resize_`/`set_`, `tensor.data = ...`, `torch.utils.swap_tensors`), so a stale cached
signature would record the old shapes. Prints the shapes it sees, and the device C++ reports
(`is_cuda`), for the test to compare with the trace."""

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
w = torch.randn(8, 4, device=device)
x = torch.randn(4, 16, device=device)
for _ in range(3):  # the signature of w, x and of the mm are cached by now
    y = w @ x
w.t_()  # (4, 8)
x2 = torch.randn(8, 2, device=device)
for _ in range(2):
    y = w @ x2
print("after_t_", tuple(y.shape), y.is_cuda)

a = torch.randn(6, 6, device=device)
for _ in range(3):
    b = a * 2
a.resize_(3, 5)
for _ in range(2):
    b = a * 2
print("after_resize_", tuple(b.shape), b.is_cuda)

c = torch.randn(5, 5, device=device)
for _ in range(3):
    d = c + 1
c.data = torch.randn(2, 7, device=device)
for _ in range(2):
    d = c + 1
print("after_data", tuple(d.shape), d.is_cuda)

e, f = torch.randn(3, 3, device=device), torch.randn(9, 1, device=device)
for _ in range(3):
    g = e.sum(0)
torch.utils.swap_tensors(e, f)
for _ in range(2):
    g = e.sum(0)
print("after_swap", tuple(g.shape), g.is_cuda)

s = torch.randn(10, device=device)
h = torch.randn(2, 2, device=device)
for _ in range(3):
    k = h.exp()
h.set_(s.untyped_storage(), 0, (5, 2), (2, 1))
for _ in range(2):
    k = h.exp()
print("after_set_", tuple(k.shape), k.is_cuda)
