"""A model whose forward calls an op that has no fake (meta) kernel: the emulator cannot size its output."""
import torch


@torch.library.custom_op("maya_test::no_fake_kernel", mutates_args=())
def no_fake_kernel(t: torch.Tensor) -> torch.Tensor:
    return t.clone()


class Inner(torch.nn.Module):
    def forward(self, x):
        return no_fake_kernel(x) * 2


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x)


out = Net()(torch.ones(4, 4, device="cuda"))
print(f"out_shape={tuple(out.shape)}")
