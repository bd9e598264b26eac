"""fp16 AMP with GradScaler, dropout, a CUDA generator, torch.save of a device state dict, tensor <-> host."""

import io

import torch
import torch.nn as nn

m = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.1), nn.Linear(16, 4)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for _ in range(2):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = m(torch.randn(8, 16, device="cuda")).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
print("scaler=ok")
try:
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    print(f"generator={g.device}")
except Exception as e:
    print(f"generator=failed:{type(e).__name__}")
try:
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    print(f"saved_bytes={buf.tell()}")
except Exception as e:
    print(f"saved_bytes=failed:{type(e).__name__}")
x = torch.tensor([1, 2, 3], device="cuda")
print(f"tensor_shape={tuple(x.shape)}")
y = x.cpu()
print(f"host_shape={tuple(y.shape)}")
print(f"tolist={x.tolist()}")
