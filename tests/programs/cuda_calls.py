"""CUDA calls ordinary training scripts make: GradScaler, constants made on the device, a step timer
with CUDA events, and tensor kinds the emulated device cannot hold (key=value lines)."""

import torch
import torch.nn as nn

m = nn.Sequential(nn.Linear(4096, 4096), nn.Linear(4096, 4096)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda", growth_interval=2)
print(f"initial_scale={scaler.get_scale()}")
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
scales, elapsed = [], []
x = torch.randn(8192, 4096, device="cuda")
for _ in range(3):
    start.record()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = m(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
    end.record()
    torch.cuda.synchronize()
    elapsed.append(start.elapsed_time(end))
    scales.append(scaler.get_scale())
print(f"scales={scales}")
print(f"elapsed_ms={elapsed}")
print(f"full={torch.full((3,), 2.5, device='cuda').sum().item()}")
print(f"filled={torch.empty(4, device='cuda').fill_(3.0).sum().item()} ones_like={torch.ones_like(x[0]).sum().item()}")
try:
    torch.cuda.Event().elapsed_time(torch.cuda.Event())
except RuntimeError as e:
    print(f"untimed={e}")
i, v = torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0])
for name, make in (("sparse", lambda: torch.sparse_coo_tensor(i, v, (2, 2)).to("cuda")),  # first kind
                   ("nested", lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], device="cuda")),
                   ("quantized", lambda: torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8).cuda())):
    try:
        make()
        print(f"{name}=moved")
    except RuntimeError as e:
        print(f"{name}={e}")
