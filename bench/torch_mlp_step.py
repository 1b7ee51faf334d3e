#!/usr/bin/env python3
"""Reference figure for bench/net_step.c: the same training step in PyTorch on
the CPU (784-1024-1024-1024-10 relu MLP, softmax cross-entropy, SGD momentum
0.9 lr 0.05, a pool of 64 random batches, 5 warm-up steps, median of the rest).

Usage: OPENBLAS_NUM_THREADS=1 python3 bench/torch_mlp_step.py [batch] [steps]
Needs python3-torch (Debian) or any PyTorch; prints one line like net_step."""
import statistics
import sys
import time

import torch

batch = int(sys.argv[1]) if len(sys.argv) > 1 else 64
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
torch.set_num_threads(1)
torch.manual_seed(1)
model = torch.nn.Sequential(
    torch.nn.Linear(784, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
pool = 64
xs = torch.rand(pool, batch, 784)
ys = torch.randint(0, 10, (pool, batch))
times = []
for s in range(-5, steps):
    b = (s + 5) % pool
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xs[b]), ys[b])
    loss.backward()
    opt.step()
    t = time.perf_counter() - t0
    if s >= 0:
        times.append(t)
med = statistics.median(times)
print(f"pytorch {torch.__version__} batch {batch}: step median {med * 1e3:.3f} ms "
      f"(min {min(times) * 1e3:.3f} ms), {batch / med:.0f} samples/s (last loss {loss.item():.4f})")
