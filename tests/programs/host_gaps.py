"""Host time between device ops: a sleep (the host waiting, e.g. on other processes) then CPU work."""

import time

import torch

x = torch.ones(256, 256, device="cuda")
y = x * 2
time.sleep(0.3)  # idle host: no CPU time
z = y + 1
t_end = time.process_time() + 0.15
n = 0
while time.process_time() < t_end:  # busy host: 150 ms of CPU
    n += 1
w = z - 1
print(f"spins={n > 0}")
