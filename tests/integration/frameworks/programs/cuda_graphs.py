"""Inference and a training step under CUDA graphs, the two ways PyTorch's CUDA-graph docs show."""
import torch
from gpt import GPT

model = GPT().cuda().to(torch.bfloat16)
static_x = torch.randint(0, 1024, (8, 128), device="cuda")

# 1. whole-network capture for inference: warm up on a side stream, capture, replay
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    for _ in range(3):
        model(static_x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(g):
    static_logits = model(static_x)
for _ in range(2):
    static_x.copy_(torch.randint(0, 1024, (8, 128), device="cuda"))
    g.replay()
print("graph replayed", static_logits.shape, flush=True)
torch.cuda.empty_cache()
print(f"cached_after_empty_cache={torch.cuda.memory_reserved() - torch.cuda.memory_allocated()}", flush=True)

# 2. make_graphed_callables for training
model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
graphed = torch.cuda.make_graphed_callables(model, (static_x,))
for step in range(3):
    x = torch.randint(0, 1024, (8, 128), device="cuda")
    logits = graphed(x)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)).float(), x.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.3f}", flush=True)
