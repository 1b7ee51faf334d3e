"""A PyTorch module as pipetop sees it: a chain of layers.

The layers are the module's top-level children, with nn.Sequential,
nn.ModuleList and nn.ModuleDict flattened into their own children, or a list
of fully qualified module names (FQNs) given by the caller. The module is
traced with torch.fx, each layer a leaf of the trace, and the graph is cut
before the first call of every layer: segment i runs every node from layer
i's call up to layer i+1's, so what the forward does between layers (a
flatten, a residual add, a root-level parameter) runs where the forward runs
it. What crosses a cut is every value made before it and used after it; a
parameter (get_attr) never crosses, each segment reads it itself.

split(model, parts) cuts the same way at the first layer of each part: the
parts, run in sequence, compute what the whole module computes, on the
module's own parameters (no copy).
"""

import importlib
import inspect

import torch
import torch.fx as fx
from torch import nn

CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


class ChainError(Exception):
    """A module that cannot be cut as asked; the message says why."""


def load(spec):
    """'package.module:factory' -> the nn.Module factory() builds.

    The factory is called without arguments (torchvision's builders then
    build the model with weights=None: nothing is downloaded)."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise ChainError(f"{spec!r}: expected MODULE:FACTORY, e.g. torchvision.models:resnet50")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ChainError(f"{spec}: cannot import {mod_name}: {e}") from e
    factory = mod
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise ChainError(f"{spec}: {mod_name} has no attribute {attr!r}")
        factory = getattr(factory, part)
    model = factory()
    if not isinstance(model, nn.Module):
        raise ChainError(f"{spec}: {attr}() returned a {type(model).__name__}, not an nn.Module")
    return model


def default_layers(model):
    """The top-level children, containers flattened into their children."""
    out = []

    def walk(prefix, m):
        for name, child in m.named_children():
            fqn = prefix + name
            if isinstance(child, CONTAINERS):
                walk(fqn + ".", child)
            else:
                out.append(fqn)

    walk("", model)
    if not out:
        raise ChainError("the module has no children to make layers of: give --layers")
    return out


class _Tracer(fx.Tracer):
    def __init__(self, leaves):
        super().__init__()
        self.leaves = set(leaves)

    def is_leaf_module(self, m, qualname):
        return qualname in self.leaves or super().is_leaf_module(m, qualname)


def trace(model, layers, inputs=1):
    """fx.Graph of model with every FQN of layers a leaf; the forward's
    parameters after the first `inputs` are fixed at their defaults."""
    names = dict(model.named_modules())
    for fqn in layers:
        if fqn not in names or fqn == "":
            raise ChainError(f"layer {fqn!r}: no such submodule")

    sig = inspect.signature(model.forward)
    concrete = {}
    for k, p in enumerate(sig.parameters.values()):
        if k >= inputs and p.default is not inspect.Parameter.empty:
            concrete[p.name] = p.default
    try:
        return _Tracer(layers).trace(model, concrete_args=concrete or None)
    except Exception as e:  # fx raises many kinds for untraceable code
        raise ChainError(f"torch.fx cannot trace the forward ({type(e).__name__}: {e}); "
                         "a forward with data-dependent control flow cannot be cut") from e


def _starts(graph, layers):
    """Index in the graph's node list of each layer's (only) call."""
    nodes = list(graph.nodes)
    first = {}
    for i, n in enumerate(nodes):
        if n.op == "call_module" and n.target in layers:
            if n.target in first:
                raise ChainError(f"layer {n.target}: called more than once in the forward; "
                                 "a pipeline layer runs once")
            first[n.target] = i
    for fqn in layers:
        if fqn not in first:
            raise ChainError(f"layer {fqn}: never called by the forward")
    order = [first[f] for f in layers]
    for a, b, fa, fb in zip(order, order[1:], layers, layers[1:]):
        if b < a:
            raise ChainError(f"layers: {fb} runs before {fa} in the forward; list them in "
                             "the order the forward calls them")
    return nodes, order


class Segment(nn.Module):
    """Nodes [lo, hi) of a traced forward: takes the values crossing the cut
    before it, returns those crossing the cut after it (the last: the
    module's own output)."""

    def __init__(self, gm, n_in, n_out, last):
        super().__init__()
        self.gm = gm
        self.n_in = n_in
        self.n_out = n_out
        self.last = last

    def forward(self, *vals):
        return self.gm(*vals)


def _cut(model, graph, bounds):
    """Segments of graph cut at node indices bounds (the first is where the
    first segment starts). Returns (segments, crossing values per cut)."""
    nodes = list(graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    seg_of = {}
    k = -1
    for i, n in enumerate(nodes):
        while k + 1 < len(bounds) and i >= bounds[k + 1]:
            k += 1
        seg_of[n] = max(k, 0) if n.op != "placeholder" else -1
    out_node = nodes[-1]
    nseg = len(bounds)

    def crossing(c):  # values made before cut c (segment c's start) and used at or after it
        vals = []
        for n in nodes:
            if n.op in ("get_attr", "output") or seg_of[n] >= c:
                continue
            if n in out_node.all_input_nodes or any(
                    u.op != "output" and seg_of[u] >= c for u in n.users):
                vals.append(n)
        return sorted(vals, key=index.get)

    cuts = [crossing(c) for c in range(nseg)] + [None]
    segs = []
    for s in range(nseg):
        g = fx.Graph()
        env = {}
        for n in cuts[s]:
            env[n] = g.placeholder(n.name)

        def arg(n, g=g, env=env):
            if n not in env and n.op == "get_attr":
                env[n] = g.node_copy(n, lambda m: env[m])
            return env[n]

        for n in nodes:
            if seg_of[n] != s or n.op in ("placeholder", "output"):
                continue
            if n.op == "get_attr":
                continue  # copied where used
            env[n] = g.node_copy(n, arg)
        last = s == nseg - 1
        if last:
            g.output(fx.node.map_arg(out_node.args[0], arg))
            n_out = None
        else:
            nxt = cuts[s + 1]
            g.output(tuple(arg(n) for n in nxt))
            n_out = len(nxt)
        g.lint()
        gm = fx.GraphModule(model, g)
        segs.append(Segment(gm, len(cuts[s]), n_out, last))
    return segs, cuts[:nseg]


class Chain:
    """model as a chain of layers: names, segments (nn.Modules run in
    sequence), and per layer the parameters it is charged with (a parameter
    two layers use, e.g. tied embedding weights, counts once: at the first)."""

    def __init__(self, model, layers=None, inputs=1):
        self.model = model
        self.layers = list(layers) if layers else default_layers(model)
        graph = trace(model, self.layers, inputs)
        nodes, starts = _starts(graph, self.layers)
        bounds = [0] + starts[1:]
        self.segments, self.cuts = _cut(model, graph, bounds)
        self.params = self._params(nodes, bounds)

    def _params(self, nodes, bounds):
        owned = [[] for _ in self.layers]
        seen = set()
        mods = dict(self.model.named_modules())
        pars = dict(self.model.named_parameters())

        def take(s, p):
            if id(p) not in seen:
                seen.add(id(p))
                owned[s].append(p)

        k = 0
        for i, n in enumerate(nodes):
            while k + 1 < len(bounds) and i >= bounds[k + 1]:
                k += 1
            if n.op == "call_module":
                for p in mods[n.target].parameters():
                    take(k, p)
            elif n.op == "get_attr" and n.target in pars:
                take(self._user_segment(n, nodes, bounds), pars[n.target])
        # parameters no node reads still take memory: the layer that owns them by name
        for name, p in self.model.named_parameters():
            if id(p) in seen:
                continue
            s = 0
            for j, fqn in enumerate(self.layers):
                if name.startswith(fqn + "."):
                    s = j
            take(s, p)
        return owned

    @staticmethod
    def _user_segment(n, nodes, bounds):
        index = {m: i for i, m in enumerate(nodes)}
        first_use = min((index[u] for u in n.users), default=index[n])
        k = 0
        while k + 1 < len(bounds) and first_use >= bounds[k + 1]:
            k += 1
        return k

    def param_bytes(self, i):
        return sum(p.numel() * p.element_size() for p in self.params[i])


def run(segments, inputs):
    """Runs segments in sequence on the module's inputs (a tuple)."""
    vals = tuple(inputs)
    for seg in segments:
        vals = seg(*vals)
    return vals


def split(model, parts, inputs=1):
    """model cut into len(parts) modules at the first layer of each part
    (parts: lists of layer FQNs, in order, covering the layers). Run in
    sequence on the module's inputs (run()), they compute its output."""
    layers = [f for part in parts for f in part]
    if any(not part for part in parts):
        raise ChainError("split: every part needs at least one layer")
    graph = trace(model, layers, inputs)
    nodes, starts = _starts(graph, layers)
    bounds, k = [], 0
    for part in parts:
        bounds.append(starts[k] if bounds else 0)
        k += len(part)
    segs, _ = _cut(model, graph, bounds)
    return segs
