"""Live monitoring of a PyTorch pipeline run from inside its processes.

    mon = Monitor(rank=pp_rank)          # once per process
    with mon.op("F", stage, mb):         # around each forward / backward
        ...
    mon.step(loss=loss, samples=batch)   # once per iteration

Each op is also a torch.profiler record_function scope named as
torch.distributed.pipelining names its actions ("PP:1F3"), so a profiler
trace of the same run imports into pipetop too (pipetop import-trace).

Where it reports: the console started with `pipetop console --observe DIR`
spawns one pipetop-agent per pipeline rank, each listening on a Unix socket
DIR/rank-<r>.sock (DIR is made mode 0700: only this user can connect). The
monitor connects to its rank's socket and writes one line per op and per
step; the agent relays them to the console as its own telemetry, over
pipetop's authenticated channels. Without PIPETOP_OBSERVE (or path=) the
monitor does nothing, so the same script runs unmonitored.

The lines (docs/protocol.md, "Observed runs"):
    pipetop-observe 1
    op STEP STAGE KIND MB START_NS END_NS
    step STEP LOSS SAMPLES END_NS
KIND is F, B, I, W, SEND_F, RECV_F, SEND_B or RECV_B; times are
time.monotonic_ns() (CLOCK_MONOTONIC, the agent's clock too); LOSS is a
number or "-".
"""

import contextlib
import math
import os
import socket
import sys
import time

KINDS = ("F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B")
HELLO = "pipetop-observe 1\n"


def label(kind, stage, mb):
    """A torch.profiler scope named as torch.distributed.pipelining names
    action `<stage><kind><mb>` ("PP:1F3")."""
    from torch.autograd.profiler import record_function

    return record_function(f"PP:{stage}{kind}{mb}")


def _rank_default():
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except ImportError:
        pass
    return int(os.environ.get("RANK", "0"))


class Monitor:
    """Streams this process's ops and steps to its pipetop agent (see the
    module's text). rank: this process's pipeline rank (default: the
    torch.distributed rank, else $RANK); path: the socket (default
    $PIPETOP_OBSERVE/rank-<rank>.sock); wait_s: how long to wait for the
    socket to appear. A monitor that cannot connect, or whose agent goes
    away, says so once on stderr and does nothing from then on: monitoring
    never stops the training."""

    def __init__(self, rank=None, path=None, wait_s=30.0):
        self.rank = _rank_default() if rank is None else int(rank)
        self.steps = 0
        self.sock = None
        self.ops = 0
        if path is None:
            folder = os.environ.get("PIPETOP_OBSERVE")
            if not folder:
                return
            path = os.path.join(folder, f"rank-{self.rank}.sock")
        self.path = path
        deadline = time.monotonic() + wait_s
        err = None
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5.0)
                s.connect(path)
                s.sendall(HELLO.encode())
                self.sock = s
                return
            except OSError as e:
                err = e
                s.close()
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        self._gone(f"cannot connect to {path}: {err}")

    def _gone(self, why):
        print(f"pipetop_torch.Monitor (rank {self.rank}): {why}; not monitoring", file=sys.stderr)
        if self.sock:
            self.sock.close()
        self.sock = None

    def _send(self, line):
        if not self.sock:
            return
        try:
            self.sock.sendall(line.encode())
        except OSError as e:
            self._gone(f"the agent went away ({e})")

    @contextlib.contextmanager
    def op(self, kind, stage, mb):
        """Times the block as op `kind` of `stage` on micro-batch `mb`, in a
        profiler scope "PP:<stage><kind><mb>"."""
        if kind not in KINDS:
            raise ValueError(f"op kind {kind!r}: one of {', '.join(KINDS)}")
        with label(kind, stage, mb):
            t0 = time.monotonic_ns()
            try:
                yield
            finally:
                t1 = time.monotonic_ns()
                self.ops += 1
                self._send(f"op {self.steps} {int(stage)} {kind} {int(mb)} {t0} {t1}\n")

    def step(self, loss=None, samples=0):
        """Ends this iteration: its loss (a number, a 0-d tensor or None on a
        stage without one) and the samples it trained."""
        if loss is not None:
            loss = float(loss.detach()) if hasattr(loss, "detach") else float(loss)
        text = "-" if loss is None or not math.isfinite(loss) else repr(loss)
        self._send(f"step {self.steps} {text} {int(samples)} {time.monotonic_ns()}\n")
        self.steps += 1

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
