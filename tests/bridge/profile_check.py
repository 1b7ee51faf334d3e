"""Checks a profile of `pipetop profile --torch` against torch itself
(tests/bridge/profile_torch_test.sh):

    profile_check.py PROFILE.json M:FACTORY SHAPE BATCH TOKENS THREADS REPEATS [CLOCK]

- the layers' parameter bytes add up to sum(p.numel() * p.element_size())
  over model.parameters(), exactly;
- each layer's act_bytes equals the bytes of the tensor its module returns
  in the whole model's forward (forward hooks, no bridge code involved);
- its forward and backward times add up to within 25 % of a whole
  forward + backward of the model timed here (median of REPEATS after one
  warm-up, the same threads, on the profile's clock: CLOCK wall, the
  default, or cpu, the process's CPU time as `--clock cpu` measures it),
  which it prints with the load average.
"""

import json
import os
import statistics
import sys
import time

import torch

TIME_TOL = 0.25


def make_input(shape, batch, tokens):
    torch.manual_seed(2)
    if tokens:
        return torch.randint(0, tokens, (batch,) + shape)
    return torch.randn((batch,) + shape)


def out_bytes(v):
    if isinstance(v, torch.Tensor):
        return v.numel() * v.element_size()
    if isinstance(v, (tuple, list)):
        return sum(out_bytes(x) for x in v)
    return 0


def main():
    path, module, shape, batch, tokens, threads, repeats = sys.argv[1:8]
    now = time.process_time if sys.argv[8:] == ["cpu"] else time.perf_counter
    shape, batch, tokens = tuple(int(x) for x in shape.split(",")), int(batch), int(tokens)
    torch.set_num_threads(int(threads))
    prof = json.load(open(path))
    import importlib

    mod, _, fn = module.partition(":")
    model = getattr(importlib.import_module(mod), fn)()
    want = sum(p.numel() * p.element_size() for p in model.parameters())
    got = sum(l["param_bytes"] for l in prof["layers"])
    assert got == want, f"parameter bytes: profile {got}, torch {want}"

    mods = dict(model.named_modules())
    seen = {}
    hooks = [mods[l["name"]].register_forward_hook(
        lambda m, i, o, n=l["name"]: seen.__setitem__(n, out_bytes(o))) for l in prof["layers"]]
    x = make_input(shape, batch, tokens)
    y = model(x)
    for h in hooks:
        h.remove()
    for l in prof["layers"]:
        assert l["act_bytes"] == seen[l["name"]], \
            f"{l['name']}: act_bytes {l['act_bytes']}, its output {seen[l['name']]} bytes"

    dy = torch.randn_like(y) * 1e-2
    times = []
    for r in range(1 + int(repeats)):
        model.zero_grad(set_to_none=True)
        t0 = now()
        model(x).backward(dy)
        if r > 0:
            times.append((now() - t0) * 1e3)
    whole = statistics.median(times)
    layers = sum(l["fwd_ms"] + l["bwd_ms"] for l in prof["layers"])
    err = layers / whole - 1
    print(f"{module}: {len(prof['layers'])} layers, {got} parameter bytes (torch: {want}); "
          f"per-layer times sum to {layers:.1f} ms, whole forward+backward {whole:.1f} ms "
          f"({err:+.1%}), load {os.getloadavg()[0]:.2f}")
    assert abs(err) <= TIME_TOL, f"per-layer sum {layers:.1f} ms vs whole {whole:.1f} ms"


if __name__ == "__main__":
    main()
