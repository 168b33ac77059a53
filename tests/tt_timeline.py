"""tt_timeline.py - checks of a timeline file (towertrain.cfg(5), CALLBACKS:
timeline; SPEC 9), printed as tt_tap.py lines for tests/e2e_timeline.sh.

usage: tt_timeline.py TRACE.json WHAT [options]
  --towers N        tower rows expected on every rank
  --ranks N         process rows expected
  --steps A-B       the "step <s>" spans expected on the trainer row
  --workers         prefetch worker rows expected (decode spans)
  --packs           all-reduce pack spans expected, overlapping backward
                    (within the backward pass, between its layers' spans), each
                    inside a step span of its tower
  --device-packs    the same for device towers, whose packs run on their own
                    queue at the same time as backward: none begins before
                    the step's first backward span ends, some begins before
                    its last ends, and some overlaps a backward span
  --no-hidden       with --device-packs, not the last (one GPU: a
                    communicator of one may take no time at all)
  --no-overlap      pack spans expected, all after the step's last backward
  --layer-sum       a tower step's layer spans sum within 10% of it (the median step)
  --work-sum        the same for its layer, pack and optimizer spans
  --model FILE      the layer names of the model file (forward and backward of each)
  --abut            each forward span of a tower step after the first begins
                    where the one before it ended (trace_continue: no gap, and
                    on a device one event for both)
  --device-events   simple trainer on one device tower, no loss scaling:
                    otherData.device_events is, over its steps, F + B + 5 a
                    step (F forward and B backward spans): the step's begin
                    and end, one event a layer span and one more to begin each
                    pass, one to end the optimizer's span, which begins at the
                    step's end. With --device-packs (sync_replicated, packed):
                    F + B + 4 + 3G a step and tower, G groups of packs (their
                    distinct begins): a group's begin and its packs' one end,
                    and backward's chain begun again after each group but the
                    last (started by the first layer's gradients)
"""
import argparse
import json
import os
import sys

from tt_tap import done, ok

CATS = {"forward", "backward", "allreduce", "optimizer", "data", "trainer"}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return e


def model_layers(path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
    import tt_models
    return tt_models.libconfig_load(path)["layers"]


def in_step(e, s):
    """Span e lies inside step span s (1 ns of rounding either side)."""
    return s["ts"] - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("what")
    ap.add_argument("--towers", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--steps")
    ap.add_argument("--workers", action="store_true")
    ap.add_argument("--packs", action="store_true")
    ap.add_argument("--device-packs", action="store_true")
    ap.add_argument("--no-hidden", action="store_true")
    ap.add_argument("--no-overlap", action="store_true")
    ap.add_argument("--layer-sum", action="store_true")
    ap.add_argument("--work-sum", action="store_true")
    ap.add_argument("--model")
    ap.add_argument("--abut", action="store_true")
    ap.add_argument("--device-events", action="store_true")
    a = ap.parse_args()
    w = a.what
    doc = load(a.trace)
    if not ok(isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list),
              "%s: JSON object with a traceEvents list (%s)" % (w, type(doc).__name__)):
        done()
    evs = doc["traceEvents"]
    dropped = doc.get("otherData", {}).get("dropped_spans")
    ok(dropped == 0, "%s: no span dropped (otherData.dropped_spans %s)" % (w, dropped))
    meta = [e for e in evs if e.get("ph") == "M"]
    spans = [e for e in evs if e.get("ph") != "M"]
    bad = [e for e in spans if e.get("ph") != "X" or not isinstance(e.get("name"), str) or
           e.get("cat") not in CATS or not all(isinstance(e.get(k), (int, float))
                                               for k in ("ts", "dur", "pid", "tid"))
           or e["dur"] < 0]
    ok(spans and not bad, "%s: %d spans, every one complete (ph X) with name, cat, ts, dur, "
       "pid, tid (bad: %s)" % (w, len(spans), bad[:2]))
    pnames = {e["pid"]: e["args"]["name"] for e in meta if e.get("name") == "process_name"}
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
              if e.get("name") == "thread_name"}
    ok(sorted(pnames) == list(range(a.ranks)) and
       all(pnames[r] == "rank %d" % r for r in pnames),
       "%s: one process row per rank, named (%s)" % (w, pnames))
    unnamed = {(e["pid"], e["tid"]) for e in spans} - set(tnames)
    ok(not unnamed, "%s: every row named by thread_name metadata (unnamed: %s)" % (w, unnamed))
    for r in range(a.ranks):
        want = {"trainer"} | {"tower %d" % t for t in range(a.towers)}
        have = {tnames[k] for k in tnames if k[0] == r}
        ok(want <= have, "%s: rank %d has rows %s (has %s)" % (w, r, sorted(want), sorted(have)))
        if a.workers:
            ok(any(n.startswith("prefetch worker") for n in have),
               "%s: rank %d has a prefetch worker row" % (w, r))
            dec = [e for e in spans if e["pid"] == r and e["name"] == "decode" and
                   tnames[(r, e["tid"])].startswith("prefetch worker")]
            ok(dec, "%s: rank %d: decode spans on the prefetch workers (%d)" % (w, r, len(dec)))
    by_row = {}
    for e in spans:
        by_row.setdefault((e["pid"], e["tid"]), []).append(e)
    # Perfetto's rule for complete events: on one row, spans nest or are disjoint
    crossing = []
    for key, row in by_row.items():
        row = sorted(row, key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in row:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 1e-3:
                crossing.append((e["name"], stack[-1]["name"]))
            stack.append(e)
    ok(not crossing, "%s: spans of one row nest or are disjoint (crossing: %s)" % (w, crossing[:3]))
    if a.steps:
        lo, hi = map(int, a.steps.split("-"))
        for r in range(a.ranks):
            tr = [e for e in by_row.get((r, 0), []) if e["name"].startswith("step ")]
            got = sorted(int(e["name"].split()[1]) for e in tr)
            ok(got == list(range(lo, hi + 1)),
               "%s: rank %d trainer row holds steps %d..%d (%s)" % (w, r, lo, hi, got))
            dw = [e for e in by_row.get((r, 0), []) if e["name"] == "data wait"]
            ok(len(dw) == hi - lo + 1 and all(e["cat"] == "data" for e in dw),
               "%s: rank %d: one data wait span (cat data) a step (%d)" % (w, r, len(dw)))
    layers = model_layers(a.model) if a.model else None
    ratios = []
    device_events = 0
    for r in range(a.ranks):
        for t in range(a.towers):
            tid = [k[1] for k in tnames if k[0] == r and tnames[k] == "tower %d" % t][0]
            row = by_row.get((r, tid), [])
            steps = [e for e in row if e["name"].startswith("step ")]
            ok(steps, "%s: rank %d tower %d: step spans (%d)" % (w, r, t, len(steps)))
            if a.steps:
                # one span a step, around all its micro-batches (accumulate)
                got = sorted(int(e["name"].split()[1]) for e in steps)
                ok(got == list(range(lo, hi + 1)), "%s: rank %d tower %d: one step span a "
                   "step, %d..%d (%s)" % (w, r, t, lo, hi, got))
            lay = [e for e in row if e["cat"] in ("forward", "backward")]
            outside = [e["name"] for e in lay
                       if not any(in_step(e, s) for s in steps)]
            ok(lay and not outside, "%s: rank %d tower %d: %d layer spans, each inside a step "
               "span of its tower (outside: %s)" % (w, r, t, len(lay), outside[:3]))
            noargs = [e["name"] for e in lay if not {"input", "output", "flops"} <= set(e.get("args", {}))]
            ok(not noargs, "%s: rank %d tower %d: layer spans carry shapes and flops in args "
               "(missing: %s)" % (w, r, t, noargs[:3]))
            if layers is not None:
                names = {e["name"] for e in lay}
                # a relu may be fused into its producer (its work in that span)
                want = {l["name"] + d for l in layers if l["type"] != "relu"
                        for d in (" forward", " backward")}
                ok(want <= names, "%s: rank %d tower %d: forward and backward spans of every "
                   "layer, named as the model file names them (missing %s)"
                   % (w, r, t, sorted(want - names)[:4]))
            per_step = [[e for e in lay if in_step(e, s)] for s in steps]
            # the tower's all-reduce row: its pack spans
            ar = [k[1] for k in tnames if k[0] == r and tnames[k] == "allreduce tower %d" % t]
            packs = by_row.get((r, ar[0]), []) if ar else []
            if a.abut:
                gaps = []
                for mine in per_step:
                    fw = sorted((e for e in mine if e["cat"] == "forward"), key=lambda e: e["ts"])
                    gaps += [round(n["ts"] - (p["ts"] + p["dur"]), 3)
                             for p, n in zip(fw, fw[1:])
                             if abs(n["ts"] - (p["ts"] + p["dur"])) > 1e-3]
                ok(not gaps, "%s: rank %d tower %d: each forward span of a step begins where "
                   "the one before it ended (gaps, us: %s)" % (w, r, t, gaps[:4]))
            if a.device_events and not a.device_packs:
                device_events += sum(len(m) + 5 for m in per_step)
            if a.device_events and a.device_packs:
                for s, mine in zip(steps, per_step):
                    groups = {round(p["ts"], 3) for p in packs
                              if s["ts"] - 1e-3 <= p["ts"] <= s["ts"] + s["dur"] + 1e-3}
                    device_events += len(mine) + 4 + 3 * len(groups)
            # the tower's own work inside each of its step spans; with
            # --work-sum its packs (own row) and optimizer spans count too
            work = lay + ([e for e in row if e["cat"] == "optimizer"] + packs
                          if a.work_sum else [])
            for s in steps:
                inside = [e for e in work if in_step(e, s)]
                ratios.append(sum(e["dur"] for e in inside) / s["dur"])
            if a.packs or a.device_packs or a.no_overlap:
                ok(packs and all(e["name"].startswith("allreduce pack ") and
                                 e["cat"] == "allreduce" and "bytes" in e.get("args", {}) and
                                 "algorithm" in e.get("args", {}) for e in packs),
                   "%s: rank %d tower %d: allreduce pack spans with bytes and algorithm (%d)"
                   % (w, r, t, len(packs)))
                early = 0
                for s in steps:
                    bw = [e for e in lay if e["cat"] == "backward" and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]]
                    if not bw:
                        continue
                    b0 = min(e["ts"] for e in bw)
                    b1 = max(e["ts"] + e["dur"] for e in bw)
                    early += sum(1 for p in packs if b0 <= p["ts"] and p["ts"] + p["dur"] <= b1)
                if a.packs or a.device_packs:
                    # gradient packing: the last packs go before the tower's
                    # step ends (CPU: on its thread; device: its compute
                    # queue waits for them there)
                    out = [p["name"] for p in packs
                           if not any(in_step(p, s) for s in steps)]
                    ok(not out, "%s: rank %d tower %d: every pack span lies inside a step span "
                       "of its tower (outside: %d, %s)" % (w, r, t, len(out), out[:2]))
                if a.device_packs:
                    # on a device the packs overlap backward spans (their
                    # own queue) by more than the trace's rounding (1 ns):
                    # events on the compute queue would only touch them
                    hid = []
                    for s in steps:
                        inside = [e for e in lay if s["ts"] <= e["ts"] <= s["ts"] + s["dur"]]
                        hid += [p["name"] for p in packs
                                if s["ts"] <= p["ts"] <= s["ts"] + s["dur"] and
                                any(e["cat"] == "backward" and
                                    min(p["ts"] + p["dur"], e["ts"] + e["dur"]) -
                                    max(p["ts"], e["ts"]) > 1e-3 for e in inside)]
                    if not a.no_hidden:
                        ok(hid, "%s: rank %d tower %d: %d pack spans overlap a backward span "
                           "of their step (the all-reduce hidden behind backward)"
                           % (w, r, t, len(hid)))
                    # a pack starts once backward made its gradients: never
                    # before the step's first backward span (the last
                    # layer's) has ended
                    soon, during = [], 0
                    for s in steps:
                        bw = [e for e in lay if e["cat"] == "backward" and
                              s["ts"] <= e["ts"] <= s["ts"] + s["dur"]]
                        if bw:
                            first = min(bw, key=lambda e: e["ts"])
                            last = max(e["ts"] + e["dur"] for e in bw)
                            mine = [p for p in packs if s["ts"] <= p["ts"] <= s["ts"] + s["dur"]]
                            soon += [p["name"] for p in mine
                                     if p["ts"] < first["ts"] + first["dur"] - 1e-3]
                            during += sum(1 for p in mine if p["ts"] < last - 1e-3)
                    ok(not soon, "%s: rank %d tower %d: no pack span begins before its step's "
                       "first backward span ends (%d do: %s)" % (w, r, t, len(soon), soon[:2]))
                    ok(during > 0, "%s: rank %d tower %d: %d pack spans begin while backward "
                       "runs (before the step's last backward span ends)" % (w, r, t, during))
                elif a.packs:
                    ok(early > 0, "%s: rank %d tower %d: %d pack spans lie within the backward "
                       "pass, between its layers' spans" % (w, r, t, early))
                else:
                    ok(early == 0, "%s: rank %d tower %d: without packing no pack runs within "
                       "the backward pass (%d do)" % (w, r, t, early))
    if a.device_events:
        got = doc.get("otherData", {}).get("device_events")
        ok(got == device_events, "%s: otherData.device_events %s = %s, %d (a layer span "
           "continues the last: one event each)"
           % (w, got, "F + B + 4 + 3G a step and tower" if a.device_packs else
              "F + B + 5 a step", device_events))
    if a.layer_sum or a.work_sum:
        # The median step: on a machine shared with other jobs a thread may
        # lose the CPU between two layers (a gap no span covers, seen at 5.8
        # ms in an 8 ms step); half the steps hit that only under a load that
        # would break every timing test.
        ratios.sort()
        med = ratios[len(ratios) // 2] if ratios else 0.0
        ok(0.90 <= med <= 1.0 + 1e-6, "%s: a tower step's %s spans sum to %.3f of its span "
           "(median over %d tower steps; within 10%%)" % (w, "work" if a.work_sum else "layer",
                                                           med, len(ratios)))
    done()


main()
