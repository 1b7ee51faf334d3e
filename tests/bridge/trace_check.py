"""What pipetop made of profiler traces against sums computed straight from
the trace files (tests/bridge/import_trace_test.sh):

    trace_check.py STATUS.json EXPORT.json TRACE...

From the traces: ops per stage (X events labelled PP:<stage><kind><mb>),
iterations (ProfilerStep spans holding ops, else the most times one
(stage, kind, micro-batch) runs), compute time per stage (F, B, I, W).
From pipetop: `status --json` (events, steps) and `export --trace` (slices
per stage process, compute slices' durations). Equal, or the check fails.
"""

import json
import re
import sys

LABEL = re.compile(r"^PP:(\d+)(F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B)(\d+)$")
COMPUTE_CATS = {"fwd", "bwd", "bwd_input", "bwd_weight"}
US_TOL = 0.01  # the export prints microseconds with 3 decimals


def events(path):
    d = json.load(open(path))
    return d["traceEvents"] if isinstance(d, dict) else d


def from_traces(paths):
    ops, busy, counts, iters = {}, {}, {}, 0
    for p in paths:
        evs = [e for e in events(p) if e.get("ph") == "X"]
        steps = [(e["ts"], e["ts"] + e["dur"]) for e in evs
                 if e["name"].startswith("ProfilerStep#")]
        held = set()
        for e in evs:
            m = LABEL.match(e["name"])
            if not m:
                continue
            if steps:
                k = [i for i, (a, b) in enumerate(steps) if a <= e["ts"] < b]
                if not k:
                    continue
                held.add(k[0])
            s, kind, mb = int(m[1]), m[2], int(m[3])
            ops[s] = ops.get(s, 0) + 1
            if kind in ("F", "B", "I", "W"):
                busy[s] = busy.get(s, 0.0) + e["dur"]
            counts[(s, kind, mb)] = counts.get((s, kind, mb), 0) + 1
        iters = max(iters, len(held) if steps else max(counts.values(), default=0))
    return ops, busy, iters


def from_export(path):
    ops, busy = {}, {}
    for e in json.load(open(path))["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") == "bubble":
            continue
        s = e["pid"] - 1
        ops[s] = ops.get(s, 0) + 1
        if e["cat"] in COMPUTE_CATS:
            busy[s] = busy.get(s, 0.0) + e["dur"]
    return ops, busy


def main():
    status = json.load(open(sys.argv[1]))
    x_ops, x_busy = from_export(sys.argv[2])
    t_ops, t_busy, t_iters = from_traces(sys.argv[3:])
    assert t_ops, "no labelled op in the traces"
    assert status["events"] == sum(t_ops.values()), (status["events"], t_ops)
    assert status["steps"] == t_iters, ("iterations", status["steps"], t_iters)
    assert x_ops == t_ops, ("ops per stage", x_ops, t_ops)
    for s in t_busy:
        assert abs(x_busy[s] - t_busy[s]) <= US_TOL * max(1, t_ops[s]), \
            ("busy", s, x_busy[s], t_busy[s])
    print(f"{len(t_ops)} stages: ops {t_ops}, {t_iters} iterations, busy "
          f"{ {s: round(b / 1e3, 3) for s, b in t_busy.items()} } ms: the traces and pipetop agree")


if __name__ == "__main__":
    main()
