"""python3 -m pipetop_torch.profile --module M:FACTORY --input SHAPE --batch B ...

Measures an nn.Module layer by layer (pipetop_torch.chain) and writes a
pipetop profile (docs/formats.md, "Profile"): per layer the forward and
backward time of one micro-batch (the median of --repeats after --warmup;
CUDA events on a GPU; on the CPU the wall clock, or with --clock cpu the
process's CPU time, which other work on a shared machine does not inflate),
the parameter bytes (a
parameter two layers read counts once, at the first), the bytes of the
values that leave the layer (act_bytes), and the bytes its forward saves for
the backward besides its input, its output, parameters and buffers
(saved_bytes, from torch.autograd.graph.saved_tensors_hooks; a storage saved
twice counts once). `pipetop profile --torch` runs this module.
"""

import argparse
import datetime
import json
import platform
import re
import statistics
import sys
import time

import torch

from . import chain

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")
DEVICE_MAX = 63
CLOCKS = ("wall", "cpu")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m pipetop_torch.profile",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--module", required=True, metavar="M:FACTORY",
                   help="e.g. torchvision.models:resnet50 (called without arguments)")
    p.add_argument("--input", required=True, metavar="SHAPE",
                   help="one sample's shape, e.g. 3,224,224")
    p.add_argument("--batch", type=int, required=True, metavar="B", help="micro-batch size")
    p.add_argument("--tokens", type=int, default=0, metavar="VOCAB",
                   help="the input is token ids in [0, VOCAB) (default: float)")
    p.add_argument("--layers", default="", metavar="FQN,...",
                   help="the layers, in forward order (default: the top-level children, "
                        "containers flattened)")
    p.add_argument("--repeats", type=int, default=5, metavar="N")
    p.add_argument("--warmup", type=int, default=1, metavar="N")
    p.add_argument("--threads", type=int, default=0, metavar="N",
                   help="torch.set_num_threads (default: torch's own)")
    p.add_argument("--device", default="cpu", metavar="D", help="cpu or cuda[:N]")
    p.add_argument("--clock", default="wall", choices=CLOCKS,
                   help="on the CPU: wall (default) or cpu (the process's CPU time, all its "
                        "threads: with --threads 1 the wall time of an idle core)")
    p.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    p.add_argument("--name", default="", metavar="NAME",
                   help="the model's name in the profile (default: the factory's)")
    p.add_argument("--out", default="", metavar="FILE", help="write here (default stdout)")
    a = p.parse_args(argv)
    try:
        a.shape = tuple(int(x) for x in a.input.split(","))
    except ValueError:
        p.error(f"--input {a.input!r}: a shape is integers separated by commas")
    if a.clock == "cpu" and not a.device.startswith("cpu"):
        p.error(f"--clock cpu: --device {a.device} is timed with CUDA events")
    if not a.shape or min(a.shape) < 1 or a.batch < 1 or a.repeats < 1 or a.warmup < 0:
        p.error("--input, --batch and --repeats must be positive, --warmup >= 0")
    a.name = a.name or a.module.rpartition(":")[2].rpartition(".")[2]
    if not NAME_RE.match(a.name):
        p.error(f"--name {a.name!r}: 1-63 characters of letters, digits, _ - .")
    return a


class Clock:
    """Times a callable: CUDA events on a GPU; on the CPU perf_counter, or
    process_time with kind "cpu"."""

    def __init__(self, device, kind="wall"):
        self.cuda = device.type == "cuda"
        self.now = time.process_time if kind == "cpu" else time.perf_counter

    def time_ms(self, fn):
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            out = fn()
            b.record()
            torch.cuda.synchronize()
            return a.elapsed_time(b), out
        t0 = self.now()
        out = fn()
        return (self.now() - t0) * 1e3, out


def tensors(vals):
    if isinstance(vals, torch.Tensor):
        return [vals]
    if isinstance(vals, (tuple, list)):
        return [t for v in vals for t in tensors(v)]
    if isinstance(vals, dict):
        return [t for v in vals.values() for t in tensors(v)]
    return []


def nbytes(vals):
    return sum(t.numel() * t.element_size() for t in tensors(vals))


def as_tuple(vals):
    return vals if isinstance(vals, tuple) else (vals,)


def detached(vals, grad):
    """The layer's inputs as a stage receives them: fresh leaves, floating
    ones requiring grad (except the module's own input)."""
    out = []
    for v in vals:
        if isinstance(v, torch.Tensor):
            v = v.detach()
            if grad and v.is_floating_point():
                v.requires_grad_(True)
        out.append(v)
    return tuple(out)


def saved_bytes(seg, ins, outs_of, exclude):
    """Bytes of the storages seg's forward saves for the backward, less the
    storages in `exclude` (parameters, buffers) and its input and output."""
    saved = {}

    def pack(t):
        st = t.storage()
        saved[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        outs = outs_of(seg, fresh(ins))
    skip = set(exclude)
    for t in tensors(ins) + tensors(outs):
        skip.add(t.storage().data_ptr())
    return sum(n for p, n in saved.items() if p not in skip)


def fresh(ins):
    """Non-leaf copies of the leaves that require grad: a layer may work in
    place on its input (ResNet's ReLU(inplace=True)), which autograd refuses
    on a leaf. The copy is made before the clock starts."""
    return tuple(t.clone() if isinstance(t, torch.Tensor) and t.requires_grad else t
                 for t in ins)


def time_layer(seg, ins, grads, a, clock):
    """Median forward and backward ms of one segment over a.repeats."""
    fwd, bwd = [], []
    params = [p for p in seg.parameters()]
    for r in range(a.warmup + a.repeats):
        for p in params:
            p.grad = None
        for t in ins:
            if isinstance(t, torch.Tensor):
                t.grad = None
        x = fresh(ins)
        f_ms, outs = clock.time_ms(lambda: seg(*x))
        outs_t = [t for t in tensors(outs) if t.requires_grad]
        b_ms = 0.0
        if outs_t:
            b_ms, _ = clock.time_ms(
                lambda: torch.autograd.backward(outs_t, grads[:len(outs_t)]))
        if r >= a.warmup:
            fwd.append(f_ms)
            bwd.append(b_ms)
    return statistics.median(fwd), statistics.median(bwd)


def make_input(a, device, dtype):
    if a.tokens > 0:
        return torch.randint(0, a.tokens, (a.batch,) + a.shape, device=device)
    return torch.randn((a.batch,) + a.shape, device=device, dtype=dtype)


def device_name(device, threads):
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() or "cpu"
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        name = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        name = f"cpu: {name}"
    tail = f" torch x{threads}" if device.type == "cpu" else " torch"
    return name[:DEVICE_MAX - len(tail)] + tail


def profile(a):
    device = torch.device(a.device)
    dtype = DTYPES[a.dtype]
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = chain.load(a.module).to(device=device, dtype=dtype)
    model.train()
    c = chain.Chain(model, [f for f in a.layers.split(",") if f] or None)
    x = make_input(a, device, dtype)
    exclude = [t.storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())]
    clock = Clock(device, a.clock)
    layers, vals = [], (x,)
    for i, (fqn, seg) in enumerate(zip(c.layers, c.segments)):
        ins = detached(vals, grad=i > 0)
        with torch.no_grad():
            outs = seg(*fresh(ins))
        grads = [torch.randn_like(t) * 1e-2 for t in tensors(outs) if t.is_floating_point()]
        f_ms, b_ms = time_layer(seg, ins, grads, a, clock)
        sv = saved_bytes(seg, ins, lambda s, v: s(*v), exclude)
        layers.append({"name": fqn, "fwd_ms": f_ms, "bwd_ms": b_ms, "act_bytes": nbytes(outs),
                       "param_bytes": c.param_bytes(i), "saved_bytes": sv})
        vals = as_tuple(outs)
    return {
        "v": 1, "model": a.name, "device": device_name(device, torch.get_num_threads()),
        "source": "measured",
        "origin": {"kind": "measured", "framework": f"torch {torch.__version__}",
                   "module": a.module,
                   "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")},
        "precision": a.dtype, "microbatch": a.batch, "input_bytes": nbytes(x),
        "layers": layers,
    }


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        prof = profile(a)
    except chain.ChainError as e:
        print(f"pipetop_torch.profile: {a.module}: {e}", file=sys.stderr)
        return 1
    text = json.dumps(prof, indent=1) + "\n"
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        import os

        os.replace(tmp, a.out)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
