#!/usr/bin/env python3
"""One run, one set of figures (tui/record/figures.h): reads what each place
printed for a run -- `pipetop run`'s summary, `status` (with and without a
path), `status --json`, `replay`'s header and plan view (tmux captures) and
`export --compare`'s SVG -- and checks that every one shows the same measured
and predicted iteration time, to the precision it prints, with the same
statistic (the steps the median is over) and the same label (calibrated or
analytic). Exits 1 naming each disagreement.

usage: figures_agree.py NAME SOURCE=FILE ...
  SOURCE: summary (run's output), status, status_nopath (text), json
  (status --json), replay (a capture of replay --view plan), svg
  (export --compare)."""
import json
import re
import sys

NUM = r"([0-9]+\.[0-9]+)"


def first(pattern, text, what):
    m = re.search(pattern, text, re.M)
    if not m:
        raise SystemExit("%s: not found: %s" % (what, pattern))
    return m


def kind_of(label):
    for k in ("calibrated", "analytic"):
        if label.startswith(k):
            return k
    return "?(" + label + ")"


def parse(source, text):
    """(measured text, measured steps, predicted text, predicted kind) as shown."""
    if source == "summary":
        m = first(r"iteration time: measured " + NUM + r" ms \(median of (?:last )?([0-9]+) steps?\), "
                  r"predicted " + NUM + r" ms \(([^)]*)\)", text, source)
        return [(m.group(1), int(m.group(2)), m.group(3), kind_of(m.group(4)))]
    if source in ("status", "status_nopath"):
        m = first(r"^measured " + NUM + r" ms/iteration \(median of (?:last )?([0-9]+) steps?\)",
                  text, source)
        p = first(r"^predicted " + NUM + r" ms/iteration \(([^)]*)\)", text, source)
        return [(m.group(1), int(m.group(2)), p.group(1), kind_of(p.group(2)))]
    if source == "json":
        j = json.loads(text.strip().splitlines()[-1])
        return [("%.3f" % j["measured_iteration_ms"], j["steps_measured"],
                 "%.3f" % j["predicted_iteration_ms"], j["predicted_kind"])]
    if source == "replay":
        m = first(r"measured +" + NUM + r" ms(?:/iteration)? \((?:median of (?:last )?|med )([0-9]+)",
                  text, source + " plan view")
        p = first(r"predicted +" + NUM + r" ms(?:/iteration)? \(([a-z]+)", text,
                  source + " plan view")
        out = [(m.group(1), int(m.group(2)), p.group(1), kind_of(p.group(2)))]
        h = re.search(r"iter " + NUM + r" ms meas, " + NUM + r" pred", text)
        if not h:
            h = first(r"\b" + NUM + r"/" + NUM + r" ?ms", text.splitlines()[0], source + " header")
        out.append((h.group(1), None, h.group(2), None))
        return out
    if source == "svg":
        p = first(r"predicted: " + NUM + r" ms/iteration \(([^)]*)\)", text, source)
        m = first(r"measured: " + NUM + r" ms/iteration \(median of (?:last )?([0-9]+) steps?\)",
                  text, source)
        return [(m.group(1), int(m.group(2)), p.group(1), kind_of(p.group(2)))]
    raise SystemExit("unknown source " + source)


def same(a, b):
    """a and b print one value: equal at the precision of the shorter."""
    da, db = len(a.split(".")[1]), len(b.split(".")[1])
    d = min(da, db)
    return round(float(a), d) == round(float(b), d) or \
        "%.*f" % (d, float(a)) == "%.*f" % (d, float(b))


def main():
    name = sys.argv[1]
    shown = []
    for arg in sys.argv[2:]:
        source, path = arg.split("=", 1)
        with open(path, encoding="utf-8", errors="replace") as f:
            for row in parse(source, f.read()):
                shown.append((source,) + row)
    ref = [r for r in shown if r[0] == "json"][0]
    bad = 0
    for source, meas, steps, pred, kind in shown:
        problems = []
        if not same(meas, ref[1]):
            problems.append("measured %s, status --json %s" % (meas, ref[1]))
        if steps is not None and steps != ref[2]:
            problems.append("median of %d steps, status --json %d" % (steps, ref[2]))
        if not same(pred, ref[3]):
            problems.append("predicted %s, status --json %s" % (pred, ref[3]))
        if kind is not None and kind != ref[4]:
            problems.append("label %s, status --json %s" % (kind, ref[4]))
        for p in problems:
            print("FAIL: %s: %s: %s" % (name, source, p))
            bad += 1
        if not problems:
            print("ok: %s: %s: measured %s (median of %s), predicted %s (%s)"
                  % (name, source, meas, steps if steps is not None else "-", pred,
                     kind or "-"))
    sys.exit(1 if bad else 0)


main()
