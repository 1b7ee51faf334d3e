"""Checks of `pipetop export-plan`'s files against torch 1.13 and the rules
of torch.distributed.pipelining (tests/bridge/export_plan_test.sh).

    export_check.py csv EXPORT.json...     the CSVs they name pass the checker
    export_check.py split M:F SHAPE TOKENS EXPORT.json...
                                           their parts, run in sequence, compute
                                           the whole module's output and grads
    export_check.py deepspeed FILE.py PLAN.json
    export_check.py torchtitan FILE.toml EXPORT.json
    export_check.py checker                the checker refuses broken CSVs
"""

import importlib.util
import json
import os
import sys
import tomllib
import types

import torch

from pipetop_torch import chain, schedule

TOL = 1e-6


def check_csvs(*paths):
    for p in paths:
        check_csv(p)


def check_csv(path):
    spec = json.load(open(path))
    csv = os.path.join(os.path.dirname(path), os.path.basename(spec["schedule_csv"]))
    acts = schedule.load_csv(csv)
    owner = schedule.validate(acts, spec["pipeline_ranks"], spec["stages"],
                              spec["n_microbatches"])
    schedule.check_lockstep(acts, spec["stages"])
    got = [owner[s] for s in range(spec["stages"])]
    assert got == spec["stage_to_rank"], f"stage -> rank {got}, the file says {spec['stage_to_rank']}"
    cells = [c for row in open(csv).read().splitlines() for c in row.split(",") if c]
    for c in cells:  # every action also parses with torch's own (prefix) use of the regex
        m = schedule.ACTION_REGEX.match(c)
        assert m and m.group(0) == c, f"{c!r} does not parse with _action_regex"
    rows = open(csv).read().splitlines()
    assert len({len(r.split(",")) for r in rows}) == 1, "rows of different lengths"
    print(f"{csv}: {len(cells)} actions on {len(rows)} ranks, valid")


def make_input(shape, tokens, batch=3):
    torch.manual_seed(1)
    if tokens:
        return torch.randint(0, tokens, (batch,) + shape)
    return torch.randn((batch,) + shape)


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def check_splits(module, shape, tokens, *paths):
    for p in paths:
        check_split(p, module, shape, tokens)


def check_split(path, module, shape, tokens):
    spec = json.load(open(path))
    parts = spec["module_fqns_per_stage"]
    model = chain.load(module).double()
    tokens = int(tokens)
    x = make_input(tuple(int(v) for v in shape.split(",")), tokens)
    if not tokens:
        x = x.double()
    whole = model(x)
    dy = torch.randn_like(whole)
    whole.backward(dy)
    g_whole = grads(model)
    model.zero_grad(set_to_none=True)
    segs = chain.split(model, parts)
    assert len(segs) == len(parts) == spec["stages"]
    out = chain.run(segs, (x,))
    out.backward(dy)
    g_parts = grads(model)
    err = (out - whole).abs().max().item()
    assert err <= TOL, f"output differs by {err}"
    assert g_parts.keys() == g_whole.keys(), "not the same parameters got gradients"
    gerr = max((g_parts[n] - g_whole[n]).abs().max().item() for n in g_whole)
    assert gerr <= TOL, f"gradients differ by {gerr}"
    n = sum(p.numel() for p in model.parameters())
    print(f"{path}: {len(segs)} parts of {module}: output within {err:.1e}, {len(g_whole)} gradients "
          f"({n} parameters) within {gerr:.1e}")


class FakeTopo:
    def __init__(self, stages, stage_id):
        self.stages, self.stage_id = stages, stage_id

    def get_dim(self, name):
        assert name == "pipe"
        return self.stages

    def get_coord(self, rank):
        return types.SimpleNamespace(pipe=self.stage_id)


class FakePipelineModule:
    """What PipetopPipelineModule's _partition_layers touches of DeepSpeed's
    PipelineModule (deepspeed/runtime/pipe/module.py)."""

    def __init__(self, layers, stages, stage_id):
        self._layer_specs = list(range(layers))
        self._topo = FakeTopo(stages, stage_id)
        self.global_rank = stage_id
        self._partition_layers(method="uniform")

    def _set_bounds(self, start, stop):
        self._local_start, self._local_stop = start, stop


def check_deepspeed(path, plan_path):
    pipe = types.ModuleType("deepspeed.pipe")
    pipe.PipelineModule = FakePipelineModule
    sys.modules["deepspeed"] = types.ModuleType("deepspeed")
    sys.modules["deepspeed.pipe"] = pipe
    spec = importlib.util.spec_from_file_location("ds_export", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    plan = json.load(open(plan_path))
    layers = plan["layers"]
    for sid, st in enumerate(plan["stages"]):
        m = mod.PipetopPipelineModule(layers, len(plan["stages"]), sid)
        assert [m._local_start, m._local_stop] == st["layers"], (sid, m._local_start, st)
    try:
        mod.PipetopPipelineModule(layers + 1, len(plan["stages"]), 0)
        raise AssertionError("a module of another layer count was accepted")
    except ValueError as e:
        assert "layers" in str(e)
    mb = plan["microbatch"]
    assert mod.GRADIENT_ACCUMULATION_STEPS == mb["count"]
    assert mod.TRAIN_BATCH_SIZE == mb["size"] * mb["count"]
    print(f"{path}: {len(plan['stages'])} stages build layers {mod.PARTS}")


def check_torchtitan(path, export_json):
    t = tomllib.load(open(path, "rb"))["parallelism"]
    spec = json.load(open(export_json))
    assert t["module_fqns_per_model_part"] == spec["module_fqns_per_stage"]
    assert t["pipeline_parallel_degree"] == spec["pipeline_ranks"]
    assert os.path.basename(t["pipeline_parallel_schedule_csv"]).endswith(".csv")
    print(f"{path}: {len(t['module_fqns_per_model_part'])} model parts")


def expect_refusal(rows, ranks, stages, mbs, words):
    acts = {r: [schedule.parse_action(c, r, t) for t, c in enumerate(row.split(","))]
            for r, row in enumerate(rows)}
    try:
        schedule.validate(acts, ranks, stages, mbs)
        schedule.check_lockstep(acts, stages)
    except schedule.ScheduleError as e:
        assert words in str(e), f"{rows}: {e!r} lacks {words!r}"
        return
    raise AssertionError(f"{rows}: accepted")


def check_checker():
    good = ["0F0,0F1,,,0B0,0B1", ",1F0,1B0,1F1,1B1,"]
    acts = {r: [schedule.parse_action(c, r, t) for t, c in enumerate(row.split(","))]
            for r, row in enumerate(good)}
    assert schedule.validate(acts, 2, 2, 2) == {0: 0, 1: 1}
    schedule.check_lockstep(acts, 2)
    expect_refusal(good[:1], 2, 2, 2, "rows for 2 ranks")
    expect_refusal(["0F0,,,,0B0,", good[1]], 2, 2, 2, "stage 0: 1 F micro-batches")
    expect_refusal(["0F0,0F1,,,0B0,0I1", good[1]], 2, 2, 2, "I and W counts differ")
    expect_refusal(["0F0,0F1,,,0B0,", good[1]], 2, 2, 2, "B=1 + I=0")
    expect_refusal(["0B0,0F0,0F1,,,0B1", good[1]], 2, 2, 2, "backward before its forward")
    expect_refusal(["0F0,0F1,,0W1,0B0,0I1", good[1]], 2, 2, 2, "weight backward before its I")
    expect_refusal(["0F0,0F1,1F0,,0B0,0B1", ",1F1,1B0,,1B1,"], 2, 2, 2, "also on rank")
    expect_refusal(["0F0,0F1,,,0B0,0B1", "1F0,,1B0,1F1,1B1,"], 2, 2, 2, "does not come after 0F0")
    expect_refusal(["0F0,0F1,0B0,,,0B1", good[1]], 2, 2, 2, "does not come after 1B0")
    for bad in ("0X1", "F0", "0F", "0SEND_F1"):
        try:
            schedule.parse_action(bad, 0, 0)
            raise AssertionError(f"{bad!r} parsed")
        except schedule.ScheduleError:
            pass
    print("the checker refuses 9 broken schedules and 4 bad cells")


def main():
    what, args = sys.argv[1], sys.argv[2:]
    {"csv": check_csvs, "split": check_splits, "deepspeed": check_deepspeed,
     "torchtitan": check_torchtitan, "checker": check_checker}[what](*args)


if __name__ == "__main__":
    main()
