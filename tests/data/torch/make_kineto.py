"""Writes kineto-rank0.json and kineto-rank1.json: the two ranks of a
2-stage, 3-micro-batch 1F1B pipeline over two iterations (ProfilerStep#3 and
#4) in Kineto's object form ({"traceEvents": [...], "distributedInfo":
{"rank": R, ...}}, X events in microseconds on one host clock), with an
unlabelled aten op inside each compute op, a metadata and an instant event.
The times follow the pipeline's hand-offs: a receive ends 10 us after its
send. Run from this folder: python3 make_kineto.py."""
import json

T0 = 1733130000000000  # microseconds on the host's clock, as Kineto writes them
F, B, SEND, GAP = 1000, 2000, 50, 200
ORDERS = {
    0: [("F", 0), ("SEND_F", 0), ("F", 1), ("SEND_F", 1), ("RECV_B", 0), ("B", 0), ("F", 2),
        ("SEND_F", 2), ("RECV_B", 1), ("B", 1), ("RECV_B", 2), ("B", 2)],
    1: [("RECV_F", 0), ("F", 0), ("B", 0), ("SEND_B", 0), ("RECV_F", 1), ("F", 1), ("B", 1),
        ("SEND_B", 1), ("RECV_F", 2), ("F", 2), ("B", 2), ("SEND_B", 2)],
}
DUR = {"F": F, "B": B, "SEND_F": SEND, "SEND_B": SEND}


def simulate(t0):
    """Both ranks' ops of one iteration on one clock."""
    pos, clock, done, out = {0: 0, 1: 0}, {0: t0, 1: t0}, {}, {0: [], 1: []}
    while any(pos[r] < len(ORDERS[r]) for r in (0, 1)):
        for r in (0, 1):
            while pos[r] < len(ORDERS[r]):
                kind, mb = ORDERS[r][pos[r]]
                start = clock[r]
                if kind.startswith("RECV"):
                    peer = ("SEND_F" if kind == "RECV_F" else "SEND_B", mb)
                    if peer not in done:
                        break
                    end = max(start, done[peer]) + 10
                else:
                    end = start + DUR[kind]
                done[(kind, mb)] = end
                out[r].append((kind, mb, start, end))
                clock[r] = end
                pos[r] += 1
    return out, max(clock.values())


def ev(name, ts, dur, cat="user_annotation"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 4242, "tid": 4242, "ts": ts, "dur": dur,
            "args": {"External id": 1}}


def main():
    events, t = {0: [], 1: []}, T0
    for step in (3, 4):
        ops, end = simulate(t)
        for r in (0, 1):
            events[r].append(ev(f"ProfilerStep#{step}", t, end + GAP - t))
            for kind, mb, a, b in ops[r]:
                events[r].append(ev(f"PP:{r}{kind}{mb}", a, b - a))
                if kind in ("F", "B"):
                    events[r].append(ev("aten::mm", a + 10, (b - a) // 2, "cpu_op"))
        t = end + 2 * GAP
    for r in (0, 1):
        meta = {"name": "process_name", "ph": "M", "pid": 4242, "tid": 0,
                "args": {"name": "python3"}}
        instant = {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",
                   "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": T0}
        doc = {"schemaVersion": 1, "deviceProperties": [],
               "distributedInfo": {"backend": "gloo", "rank": r, "world_size": 2},
               "record_shapes": 0, "traceEvents": [meta] + events[r] + [instant],
               "traceName": f"rank{r}.pt.trace.json", "displayTimeUnit": "ms"}
        with open(f"kineto-rank{r}.json", "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
