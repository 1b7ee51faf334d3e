"""A 2-stage pipeline of the test GPT (gpt_model.py) in two processes over
gloo, for the bridge's import and live tests: stage r runs on rank r, the
micro-batches go 1F1B with a flush (or GPipe's all-forwards-first), the
activations and gradients travel with dist.send/recv, and every op runs
inside pipetop_torch.Monitor.op, which labels it for the profiler as
torch.distributed.pipelining does ("PP:1F3") and, under `pipetop console
--observe DIR` (PIPETOP_OBSERVE=DIR), streams it to the console.

    python3 pipe2.py --iters 4 --microbatches 4 [--trace DIR] [--schedule gpipe]
                     [--seconds S] [--split EXPORT.json]

--split takes the stages' FQNs, the micro-batching and the schedule from
`pipetop export-plan PLAN --to torch --out EXPORT.json` (docs/torch.md): a
2-rank plan, 1f1b-flush or gpipe, no data parallelism.

--trace DIR profiles each rank with torch.profiler and writes DIR/rank<r>.json.
"""

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import gpt_model
from pipetop_torch import Monitor, split

PARTS = [["tok", "blocks.0", "blocks.1", "blocks.2"],
         ["blocks.3", "blocks.4", "blocks.5", "ln_f", "head"]]


def order(schedule, rank, stages, m):
    """This rank's ops: ("F", mb) and ("B", mb) in schedule order."""
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warm = min(stages - rank - 1, m)
    ops = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", i) for i in range(m - warm, m)]


def iteration(a, rank, part, opt, mon, step):
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(0, gpt_model.VOCAB, (a.microbatches, a.mb, gpt_model.CONTEXT + 1),
                           generator=g)
    shape = (a.mb, gpt_model.CONTEXT, gpt_model.DIM)
    ins, outs, losses, sends = {}, {}, [], []
    for kind, i in order(a.schedule, rank, 2, a.microbatches):
        if kind == "F":
            if rank == 0:
                x = (tokens[i, :, :-1],)
            else:
                x = torch.empty(shape)
                with mon.op("RECV_F", rank, i):
                    dist.recv(x, src=0)
                x = (x.requires_grad_(),)
            ins[i] = x
            with mon.op("F", rank, i):
                y = part(*x)
                if rank == 1:
                    y = F.cross_entropy(y.reshape(-1, gpt_model.VOCAB),
                                        tokens[i, :, 1:].reshape(-1)) / a.microbatches
                    losses.append(y.item())
            outs[i] = y
            if rank == 0:
                with mon.op("SEND_F", rank, i):  # isend: gloo's send waits for the recv
                    sends.append(dist.isend(y[0].detach().contiguous(), dst=1))
        else:
            if rank == 0:
                dy = torch.empty(shape)
                with mon.op("RECV_B", rank, i):
                    dist.recv(dy, src=1)
                with mon.op("B", rank, i):
                    outs[i][0].backward(dy)
            else:
                with mon.op("B", rank, i):
                    outs[i].backward()
                with mon.op("SEND_B", rank, i):
                    sends.append(dist.isend(ins[i][0].grad.contiguous(), dst=0))
    for w in sends:
        w.wait()
    opt.step()
    opt.zero_grad(set_to_none=True)
    mon.step(loss=sum(losses) if rank == 1 else None, samples=a.mb * a.microbatches)


def train(rank, a):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank,
                            world_size=2)
    part = split(gpt_model.gpt(), a.parts)[rank]
    opt = torch.optim.SGD(part.parameters(), lr=0.05)
    mon = Monitor(rank=rank)
    dist.barrier()
    end = time.monotonic() + a.seconds
    if a.trace:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for step in range(a.iters):
                iteration(a, rank, part, opt, mon, step)
        prof.export_chrome_trace(os.path.join(a.trace, f"rank{rank}.json"))
    else:
        step = 0
        while step < a.iters or time.monotonic() < end:
            iteration(a, rank, part, opt, mon, step)
            step += 1
    mon.close()
    dist.barrier()
    dist.destroy_process_group()


def load_split(p, a):
    """a.parts, a.mb, a.microbatches and a.schedule from an export's JSON."""
    with open(a.split) as f:
        e = json.load(f)
    kinds = {"1f1b-flush": "1f1b", "gpipe": "gpipe"}
    if e.get("pipeline_ranks") != 2 or e.get("data_parallel") != 1:
        p.error(f"{a.split}: this example runs 2 pipeline ranks without data parallelism")
    if e.get("schedule_kind") not in kinds:
        p.error(f"{a.split}: schedule_kind {e.get('schedule_kind')!r}: this example runs "
                "1f1b-flush or gpipe")
    a.parts = e["module_fqns_per_stage"]
    a.mb, a.microbatches = e["microbatch_size"], e["n_microbatches"]
    a.schedule = kinds[e["schedule_kind"]]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=4)
    p.add_argument("--seconds", type=float, default=0)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--mb", type=int, default=2, help="samples per micro-batch")
    p.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"])
    p.add_argument("--trace", default="")
    p.add_argument("--split", default="", metavar="EXPORT.json",
                   help="the stages, micro-batches and schedule of an export-plan --to torch")
    a = p.parse_args()
    a.parts = PARTS
    if a.trace:
        os.makedirs(a.trace, exist_ok=True)
    if a.split:
        load_split(p, a)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        a.port = s.getsockname()[1]
    mp.spawn(train, args=(a,), nprocs=2)


if __name__ == "__main__":
    main()
