#!/usr/bin/env python3
"""PyTorch CPU baseline for bench/train_throughput.c: the same model
(fmnist-mlp: 784-1024-1024-1024-10, relu, softmax cross-entropy), batch 64,
SGD lr 0.05 momentum 0.9, single-threaded, on 16 fixed random batches in
memory; warm-up steps, then timed steps. Prints samples/s.

Needs Debian's python3-torch (apt-get install python3-torch), which is not
part of pipetop's set-up: it is only for this comparison (docs/benchmarks.md).
Run it with the system interpreter: /usr/bin/python3 bench/torch_baseline.py
"""
import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

BATCHES = 16


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    xs = [torch.rand(args.batch, 784) for _ in range(BATCHES)]
    ys = [torch.randint(0, 10, (args.batch,)) for _ in range(BATCHES)]

    def step(i):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(xs[i % BATCHES]), ys[i % BATCHES])
        loss.backward()
        opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(args.steps):
        loss = step(i)
    loss.item()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    core = os.environ.get("OPENBLAS_CORETYPE", "OpenBLAS's choice")
    print(f"torch {torch.__version__} fmnist-mlp batch {args.batch} threads "
          f"{torch.get_num_threads()} (OPENBLAS_CORETYPE {core}): {args.steps} steps in "
          f"{dt:.3f} s, {args.steps * args.batch / dt:.1f} samples/s, "
          f"{1e3 * dt / args.steps:.3f} ms/step; CPU time {cpu:.3f} s, "
          f"{args.steps * args.batch / cpu:.1f} samples/CPU-s")


if __name__ == "__main__":
    main()
