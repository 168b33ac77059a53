"""tt_profile.py - checks of `towertrain profile --json` (SPEC 1) against the
model file and the --trace of the same run, as tt_tap.py lines for
tests/e2e_timeline.sh.

usage: tt_profile.py PROFILE.json TRACE.json MODEL.cfg BATCH WHAT [--hidden | --packs]
  GFLOP per layer: bench/tt_models.py's count from the model file (python,
  independent of the binary's); times: the means of tower 0's spans in the
  trace; data wait: the trainer's spans outside tower 0's layer,
  optimizer and pack spans; rows: sum to step_ms within 5%, the rest not
  negative beyond it;
  step_ms: the trace's mean step span within 5% (device towers: step_ms
  also holds up to 2 device steps of work after the host's last step).
  --hidden: a job whose packs run beside backward (device towers with
  gradient packing): the all-reduce rows are the union of tower 0's pack
  spans in the trace, split at its layer spans, and some of it is hidden;
  --packs: the same but for the last (one GPU, whose all-reduce among one
  may take no time)."""
import json
import os
import sys

from tt_tap import done, ok

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import tt_models  # noqa: E402


def union(spans):
    """[(start, end)] of spans (ts, dur in us), merged where they overlap."""
    out = []
    for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def inside(a, b, u):
    """The time of [a, b) inside the spans u (union()'s [start, end] pairs)."""
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in u)


def check_hidden(p, t, tnames, steps, w, some_hidden):
    """The all-reduce rows against tower 0's spans in the trace: the union
    of its pack spans (the packs of one device group share a span), the
    part inside its layer spans hidden, the rest exposed."""
    def row(name):
        return [e for e in t if e.get("ph") == "X" and e["pid"] == 0 and
                tnames.get((0, e["tid"])) == name]
    packs = [e for e in row("allreduce tower 0") if e["name"].startswith("allreduce pack ")]
    lay = union(e for e in row("tower 0") if e["cat"] in ("forward", "backward"))
    total = hid = 0.0
    for a, b in union(packs):
        total += b - a
        hid += inside(a, b, lay)
    total, hid = total / steps / 1e3, hid / steps / 1e3
    exp_ms, hid_ms = p["allreduce_exposed_ms"], p["allreduce_hidden_ms"]
    ok(packs and (hid_ms > 0 or not some_hidden) and exp_ms >= 0 and hid_ms >= 0,
       "%s: all-reduce hidden behind backward %.3f ms, exposed %.3f ms a step (%d pack spans)"
       % (w, hid_ms, exp_ms, len(packs)))
    # the trace rounds to 1 ns: 1e-3 of the time plus a few ns per span
    tol = 1e-3 * max(total, 1e-3) + 1e-5 * len(packs) / steps
    ok(abs(hid - hid_ms) <= tol and abs(total - hid - exp_ms) <= tol,
       "%s: hidden and exposed = the union of tower 0's pack spans in --trace inside and "
       "outside its layer spans (%.4f / %.4f vs %.4f / %.4f ms)" % (w, hid, total - hid,
                                                                   hid_ms, exp_ms))


def main():
    prof_path, trace_path, model, batch, w = sys.argv[1:6]
    hidden = "--hidden" in sys.argv[6:]
    packs = hidden or "--packs" in sys.argv[6:]
    p = json.load(open(prof_path))
    keys = {"job", "steps", "step_ms", "roof_gflops", "layers", "data_wait_ms",
            "allreduce_exposed_ms", "allreduce_hidden_ms", "optimizer_ms", "rest_ms"}
    ok(keys <= set(p), "%s: the JSON has SPEC 1's keys (missing %s)" % (w, keys - set(p)))
    order = ["job", "steps", "warmup_steps", "towers", "batch", "step_ms", "roof_gflops",
             "layers", "data_wait_ms", "allreduce_exposed_ms", "allreduce_hidden_ms",
             "optimizer_ms", "rest_ms"]  # towertrain(1)'s listing
    ok(list(p) == order, "%s: the keys in towertrain(1)'s order (%s)" % (w, list(p)))
    lkeys = {"name", "type", "shape", "forward_ms", "backward_ms", "gflop", "gflops", "share"}
    ok(all(lkeys <= set(l) for l in p["layers"]),
       "%s: every layer row has %s" % (w, sorted(lkeys)))
    ref = tt_models.layer_costs(model, int(batch))
    ok([l["name"] for l in p["layers"]] == [r["name"] for r in ref],
       "%s: one row per layer of the model file, in order" % w)
    bad = [(l["name"], l["gflop"], (r["fwd"] + r["bwd_data"] + r["bwd_weights"]) / 1e9)
           for l, r in zip(p["layers"], ref)
           if abs(l["gflop"] - (r["fwd"] + r["bwd_data"] + r["bwd_weights"]) / 1e9) >
           1e-9 * max(1.0, l["gflop"])]
    ok(not bad, "%s: GFLOP of every layer = the model file's count (bench/tt_models.py) "
       "(off: %s)" % (w, bad[:3]))
    ok(all(list(l["shape"]) == list(r["out"]) for l, r in zip(p["layers"], ref)),
       "%s: output shapes as the model file gives them" % w)
    step = p["step_ms"]
    rows = (sum(l["forward_ms"] + l["backward_ms"] for l in p["layers"]) + p["data_wait_ms"] +
            p["allreduce_exposed_ms"] + p["optimizer_ms"] + p["rest_ms"])
    ok(step > 0 and abs(rows - step) <= 0.05 * step,
       "%s: the rows sum to the step time within 5%% (%.3f vs %.3f ms)" % (w, rows, step))
    ok(p["rest_ms"] >= -0.05 * step, "%s: nothing counted twice: the rest is %.3f ms of %.3f"
       % (w, p["rest_ms"], step))
    shares = sum(l["share"] for l in p["layers"])
    lay_ms = sum(l["forward_ms"] + l["backward_ms"] for l in p["layers"])
    ok(abs(shares - lay_ms / step) < 1e-6, "%s: layer shares are their ms over the step" % w)
    # the same spans, read independently from the trace: tower 0's means
    t = json.load(open(trace_path))["traceEvents"]
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in t if e.get("name") == "thread_name"}
    tower0 = [e for e in t if e.get("ph") == "X" and tnames.get((0, e["tid"])) == "tower 0"
              and e["pid"] == 0]
    steps = p["steps"]
    off = []
    for l in p["layers"]:
        for d in ("forward", "backward"):
            mean = sum(e["dur"] for e in tower0 if e["name"] == "%s %s" % (l["name"], d)) / steps / 1e3
            if abs(mean - l[d + "_ms"]) > 1e-3 * max(mean, 1e-3) + 2e-6:
                off.append((l["name"], d, mean, l[d + "_ms"]))
    ok(not off, "%s: forward and backward ms = the means of tower 0's spans in --trace "
       "(off: %s)" % (w, off[:3]))
    # data wait: the trainer's spans less their part inside tower 0's layer,
    # optimizer and pack spans (device towers run behind the host)
    ar0 = [e for e in t if e.get("ph") == "X" and e["pid"] == 0 and
           tnames.get((0, e["tid"])) == "allreduce tower 0"]
    busy = union([e for e in tower0 if e["cat"] in ("forward", "backward", "optimizer")] + ar0)
    dw = [e for e in t if e.get("ph") == "X" and e["pid"] == 0 and e["tid"] == 0 and
          e["name"] == "data wait"]
    wait = sum(e["dur"] - inside(e["ts"], e["ts"] + e["dur"], busy) for e in dw) / steps / 1e3
    tol = 1e-3 * max(wait, 1e-3) + 1e-5 * len(dw) / steps
    ok(len(dw) == steps and abs(wait - p["data_wait_ms"]) <= tol,
       "%s: data wait = the trainer's %d data wait spans in --trace outside tower 0's layer, "
       "optimizer and pack spans (%.4f vs %.4f ms)" % (w, len(dw), wait, p["data_wait_ms"]))
    if packs:
        check_hidden(p, t, tnames, steps, w, hidden)
    trainer = [e for e in t if e.get("ph") == "X" and e["pid"] == 0 and e["tid"] == 0 and
               e["name"].startswith("step ")]
    ok(len(trainer) == steps, "%s: --trace holds the %d measured steps (%d)" % (w, steps, len(trainer)))
    span_ms = sum(e["dur"] for e in trainer) / 1e3 / max(1, len(trainer))
    # device towers (no roof measured) run behind the host: step_ms also
    # holds the device work the host's last step left queued, which the
    # host's step spans do not. The host waits for each step's loss, so
    # what is left is at most one step's backward and update: allowed up to
    # 2 of tower 0's device steps (a loaded machine gave 0.9 of one)
    dev = [e["dur"] / 1e3 for e in tower0 if e["name"].startswith("step ")]
    trail = 2 * max(dev) / steps if not p["roof_gflops"] and dev else 0.0
    ok(0.95 * span_ms <= step <= 1.05 * span_ms + trail,
       "%s: step_ms %.3f = the trace's mean step span %.3f within 5%% (+ %.3f ms of device "
       "work after the host's last step)" % (w, step, span_ms, trail))
    done()


main()
