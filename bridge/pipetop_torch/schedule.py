"""The per-rank schedule CSV of torch.distributed.pipelining, checked.

torch >= 2.4 loads a schedule with the private PipelineScheduleMulti._load_csv
(format "compute_only"): one CSV row per pipeline rank, one cell per time
step, each cell an action <stage><F|B|I|W><micro-batch> or empty (idle). It
parses cells with the private _action_regex and checks them with the private
_validate_schedule, which also infers which rank runs each stage. None of
that exists in torch 1.13, so this module states the same rules and checks a
CSV against them (`pipetop export-plan` writes such files):

- one row per rank of the pipeline group;
- every stage runs F of every micro-batch;
- per stage, as many I (input backward) as W (weight backward), and B (full
  backward) + I = the micro-batches;
- per micro-batch of a stage, F before its B or I, and I before its W;
- a stage runs on one rank only.

and one rule the lock-step runtime needs on top (a rank posts its receives at
the time step its neighbour sends): an F comes at a later step than the
previous stage's F of the same micro-batch, a B or I later than the next
stage's B or I of it.

    python3 -m pipetop_torch.schedule FILE.csv --ranks P --stages S --microbatches M
"""

import argparse
import csv
import re
import sys

# torch.distributed.pipelining.schedules._action_regex (torch 2.4 on)
ACTION_REGEX = re.compile(
    r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)")
COMPUTE = ("F", "B", "I", "W")


class ScheduleError(Exception):
    """A rule the schedule breaks; the message names rank, step and action."""


def parse_action(cell, rank, step):
    """(stage, kind, mb) of a cell, None for an empty one. torch matches a
    cell's prefix (re.match); this asks the whole cell to match."""
    cell = cell.strip()
    if not cell:
        return None
    m = ACTION_REGEX.fullmatch(cell)
    if not m:
        raise ScheduleError(f"rank {rank}, step {step}: {cell!r} is not an action "
                            "(<stage><F|I|B|W|...><micro-batch>)")
    stage, kind, mb = m.groups()
    if kind not in COMPUTE or mb == "":
        raise ScheduleError(f"rank {rank}, step {step}: {cell!r}: a compute_only schedule holds "
                            "F, B, I and W actions of one micro-batch each")
    return int(stage), kind, int(mb)


def load_csv(path):
    """{rank: [action or None per step]} as _load_csv reads it (row r = rank r)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return {r: [parse_action(c, r, t) for t, c in enumerate(row)] for r, row in enumerate(rows)}


def _seen(stage_actions, stage, kind, mb, rank, step, need, what):
    if mb not in stage_actions[stage][need]:
        raise ScheduleError(f"rank {rank}, step {step}: {stage}{kind}{mb}: {what}")


def validate(actions, ranks, stages, microbatches):
    """_validate_schedule's rules; returns {stage: rank}."""
    if len(actions) != ranks or sorted(actions) != list(range(ranks)):
        raise ScheduleError(f"{len(actions)} rows for {ranks} ranks (one row per rank)")
    seen = {s: {k: set() for k in COMPUTE} for s in range(stages)}
    owner = {}
    for rank in sorted(actions):
        for step, a in enumerate(actions[rank]):
            if a is None:
                continue
            stage, kind, mb = a
            if stage >= stages or mb >= microbatches:
                raise ScheduleError(f"rank {rank}, step {step}: {stage}{kind}{mb}: stage or "
                                    f"micro-batch out of range ({stages} stages, "
                                    f"{microbatches} micro-batches)")
            if kind in ("B", "I"):
                _seen(seen, stage, kind, mb, rank, step, "F", "backward before its forward")
            if kind == "W":
                _seen(seen, stage, kind, mb, rank, step, "I", "weight backward before its I")
            seen[stage][kind].add(mb)
            if owner.setdefault(stage, rank) != rank:
                raise ScheduleError(f"rank {rank}, step {step}: stage {stage} is also on rank "
                                    f"{owner[stage]}")
    for s in range(stages):
        f, b, i, w = (len(seen[s][k]) for k in COMPUTE)
        if f != microbatches:
            raise ScheduleError(f"stage {s}: {f} F micro-batches, expected {microbatches}")
        if i != w:
            raise ScheduleError(f"stage {s}: I and W counts differ (I={i}, W={w})")
        if b + i != microbatches:
            raise ScheduleError(f"stage {s}: B={b} + I={i} backwards, expected {microbatches}")
    return owner


def check_lockstep(actions, stages):
    """A forward after the previous stage's, a backward after the next's."""
    step_of = {}
    for rank, row in actions.items():
        for t, a in enumerate(row):
            if a:
                step_of[a] = t
    for (stage, kind, mb), t in step_of.items():
        if kind == "F" and stage > 0:
            need = [(stage - 1, "F", mb)]
        elif kind in ("B", "I") and stage < stages - 1:
            need = [(stage + 1, "B", mb), (stage + 1, "I", mb)]
        else:
            continue
        before = [step_of[n] for n in need if n in step_of]
        if not before or min(before) >= t:
            raise ScheduleError(f"step {t}: {stage}{kind}{mb} does not come after "
                                f"{need[0][0]}{need[0][1]}{mb}")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m pipetop_torch.schedule")
    p.add_argument("csv")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--stages", type=int, required=True)
    p.add_argument("--microbatches", type=int, required=True)
    a = p.parse_args(argv)
    try:
        acts = load_csv(a.csv)
        owner = validate(acts, a.ranks, a.stages, a.microbatches)
        check_lockstep(acts, a.stages)
    except ScheduleError as e:
        print(f"{a.csv}: {e}", file=sys.stderr)
        return 1
    steps = max(len(r) for r in acts.values())
    print(f"{a.csv}: valid: {a.ranks} ranks, {a.stages} stages, {a.microbatches} micro-batches, "
          f"{steps} time steps; stage -> rank {[owner[s] for s in range(a.stages)]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
