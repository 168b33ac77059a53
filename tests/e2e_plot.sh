#!/bin/sh
# End-to-end: `towertrain plot` draws a figure a person reads (TAP): train and
# validation of a quantity share a panel with a legend; per-step scalars of the
# event files are smoothed as TensorBoard does, the raw series faint behind;
# y ticks at 1-2-5 steps with every label inside the picture; a constant
# series in the middle of a sensible range; x in epochs. Checked by parsing
# the SVG, and by rendering it with rsvg-convert where installed.
. "$(dirname "$0")/tt_lib.sh"

# (1) stats.json alone: large values, a constant, a schedule, no event file
mkdir "$T/stats"
cat > "$T/stats/stats.json" <<'JSON'
[ {"epoch_num": 1, "global_step": 10, "train_loss": 2.0, "train_accuracy": 0.31, "learning_rate": 0.1, "validation_loss": 2.2, "validation_accuracy": 0.5, "throughput": 123456.7, "peak_memory_mb": 42.0},
  {"epoch_num": 2, "global_step": 20, "train_loss": 1.0, "train_accuracy": 0.52, "learning_rate": 0.1, "validation_loss": 1.1, "validation_accuracy": 0.7, "throughput": 131072.0, "peak_memory_mb": 42.0},
  {"epoch_num": 3, "global_step": 30, "train_loss": 0.5, "train_accuracy": 0.75, "learning_rate": 0.01, "validation_loss": 0.9, "validation_accuracy": 0.8, "throughput": 129999.5, "peak_memory_mb": 42.0} ]
JSON
"$TOWERTRAIN" plot "$T/stats" -o "$T/stats.svg" > /dev/null
ok $? "plot of a stats.json exits 0"

# (2) a real run: per-step scalars in the event file
cat > "$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/mlp.cfg";
dataflow = { source = { type = "fake"; shape = [1, 28, 28]; classes = 10; size = 2560; }; batch_size = 64; };
optimizer = { type = "sgd"; learning_rate = 0.05; };
max_epoch = 3;
callbacks = ( { type = "inference_runner"; dataflow = { source = { type = "fake"; shape = [1, 28, 28];
                classes = 10; size = 640; }; }; } );
monitors = ( { type = "events"; every_k_steps = 2; }, "json" );
CFG
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/run" --quiet && "$TOWERTRAIN" plot "$T/run" > "$T/out"
ok $? "plot of a run's log directory exits 0 and writes LOGDIR/stats.svg ($(cat "$T/out"))"

$PY - "$T/stats.svg" "$T/run/stats.svg" > "$T/checks" 2>&1 <<'PYEOF'
import math, re, sys
import xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
from tt_tap import ok

def texts_inside(root, W, H):
    bad = []
    for t in root.iter(NS + "text"):
        size = float(t.get("font-size", 12)); s = t.text or ""
        w = len(s) * size * 0.62  # generous for sans-serif digits and letters
        x, y = float(t.get("x")), float(t.get("y"))
        a = t.get("text-anchor", "start")
        x0 = x - w if a == "end" else x - w / 2 if a == "middle" else x
        if x0 < 0 or x0 + w > W or y - size < 0 or y + 0.3 * size > H:
            bad.append(s)
    return bad

def tick_values(p, cls):
    vals = []
    for t in p.iter(NS + "text"):
        if t.get("class") == cls:
            s = t.text; mult = {"k": 1e3, "M": 1e6}.get(s[-1], 1)
            vals.append(float(s.rstrip("kM")) * mult)
    return vals

def one_two_five(vals):
    d = [b - a for a, b in zip(vals, vals[1:])]
    if len(vals) < 3 or any(abs(x - d[0]) > 1e-9 * max(1, abs(d[0])) for x in d):
        return False
    m = d[0] / 10 ** math.floor(math.log10(abs(d[0])))
    return any(abs(m - v) < 1e-6 for v in (1, 2, 5)) and d[0] > 0

def panels(root):
    return {g.get("data-quantity"): g for g in root.iter(NS + "g") if g.get("class") == "panel"}

def legend(p):
    return [t.text.split(" ")[0] for g in p.iter(NS + "g") if g.get("class") == "legend"
            for t in g.iter(NS + "text")]

def lines(p, cls):
    return {l.get("data-scalar"): [tuple(map(float, xy.split(","))) for xy in l.get("points").split()]
            for l in p.iter(NS + "polyline") if l.get("class") == cls}

for path, what in ((sys.argv[1], "stats.json"), (sys.argv[2], "run")):
    root = ET.parse(path).getroot()
    W, H = float(root.get("width")), float(root.get("height"))
    ok(root.get("viewBox") == "0 0 %g %g" % (W, H), "%s: viewBox 0 0 %g %g" % (what, W, H))
    bad = texts_inside(root, W, H)
    ok(not bad, "%s: every text lies inside the viewBox (outside: %s)" % (what, bad))
    P = panels(root)
    ok(legend(P["loss"]) == ["train_loss", "validation_loss"] and
       legend(P["accuracy"]) == ["train_accuracy", "validation_accuracy"],
       "%s: train and validation share the loss and accuracy panels, with a legend" % what)
    ok(all(legend(p) for p in P.values()), "%s: every panel has a legend" % what)
    for q, p in P.items():
        ys, xs = tick_values(p, "ytick"), tick_values(p, "xtick")
        ok(one_two_five(ys), "%s: %s: y ticks at a 1-2-5 step: %s" % (what, q, ys))
        ok(xs == [float(int(v)) for v in xs] and xs[0] <= 1 and xs[-1] == 3,
           "%s: %s: x ticks are epochs 0..3: %s" % (what, q, xs))

root = ET.parse(sys.argv[1]).getroot()
P = panels(root)
ys = tick_values(P["peak_memory_mb"], "ytick")
rect = P["peak_memory_mb"].find(NS + "rect")
top, h = float(rect.get("y")), float(rect.get("height"))
y = lines(P["peak_memory_mb"], "epoch")["peak_memory_mb"][0][1]
ok(0 <= ys[0] < 42 < ys[-1] and abs(y - (top + h / 2)) < h / 6,
   "a constant 42 is drawn mid-panel on a range around it (ticks %s)" % ys)
labels = [t.text for t in P["throughput"].iter(NS + "text") if t.get("class") == "ytick"]
ok(all(l.endswith("k") for l in labels), "throughput near 130000 is labelled in k: %s" % labels)
ys = tick_values(P["learning_rate"], "ytick")
ok(ys[0] <= 0.01 and ys[-1] >= 0.1 and ys[0] >= 0, "a learning-rate schedule 0.1 -> 0.01 fits its axis: %s" % ys)

root = ET.parse(sys.argv[2]).getroot()
P = panels(root)
raw = lines(P["loss"], "raw")["train_loss"]
sm = lines(P["loss"], "smoothed")["train_loss"]
val = lines(P["loss"], "epoch")["validation_loss"]
ok(len(raw) == len(sm) > 30 and len(val) == 3, "train_loss per step (%d points), validation_loss per epoch (%d)"
   % (len(sm), len(val)))
faint = [l.get("stroke-opacity") for l in P["loss"].iter(NS + "polyline") if l.get("class") == "raw"]
ok(faint and all(float(o) < 0.5 for o in faint), "the raw series is drawn faint (opacity %s)" % faint)
# smoothing commutes with the affine map to pixels: recompute it from the raw points
last, k, worst = 0.0, 0, 0.0
for (x, y), (x2, y2) in zip(raw, sm):
    last = last * 0.6 + 0.4 * y; k += 1
    worst = max(worst, abs(last / (1 - 0.6 ** k) - y2), abs(x - x2))
ok(worst < 0.15, "the smoothed line is TensorBoard's debiased EMA (0.6) of the raw one (max %.3f px off)" % worst)
ok(any(abs(a[1] - b[1]) > 1 for a, b in zip(raw, sm)), "smoothing changes the noisy per-step series")
PYEOF
tt_tap "$T/checks" $?

# rendering: rsvg-convert draws it, and nothing touches the picture's edges
if command -v rsvg-convert >/dev/null && $PY -c "import PIL, numpy" 2>/dev/null; then
  for f in "$T/stats.svg" "$T/run/stats.svg"; do
    rsvg-convert "$f" -o "$f.png" && $PY - "$f" "$f.png" <<'PYEOF'
import sys
import numpy as np
from PIL import Image
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
img = np.asarray(Image.open(sys.argv[2]).convert("L"))
assert img.shape == (int(float(root.get("height"))), int(float(root.get("width")))), img.shape
edge = np.concatenate([img[:3].ravel(), img[-3:].ravel(), img[:, :3].ravel(), img[:, -3:].ravel()])
assert edge.min() >= 250, "something is drawn on the picture's edge"
assert (img < 128).mean() > 0.005, "the picture is nearly blank"
PYEOF
    ok $? "rsvg-convert renders $(basename "$(dirname "$f")")/$(basename "$f"): its size, ink inside, nothing on the edges"
  done
else
  skip "render with rsvg-convert" "rsvg-convert (librsvg2-bin) or python3-pil missing"
fi

# (3) a run still writing: its event file ends with a record's length and
# CRC and none of its bytes (once read past the file's end)
mkdir "$T/live"
cp "$T/run/stats.json" "$T/run"/events.out.tfevents.* "$T/live/"
$PY - "$T/live" <<'PYEOF'
import glob, sys
from tt_tfrecord import length_header
with open(glob.glob(sys.argv[1] + "/events.out.tfevents.*")[0], "ab") as f:
    f.write(length_header(1 << 24))
PYEOF
"$TOWERTRAIN" plot "$T/live" > /dev/null 2> "$T/e" && cmp -s "$T/live/stats.svg" "$T/run/stats.svg"
ok $? "an event file cut after a record's length: the plot of the records before it ($(head -c 200 "$T/e"))"

# (3b) event files of eleven resumes in one second: events.out.tfevents.T.H,
# then .H.1 to .H.10, read in that order (".10" after ".9"); each holds the
# next step, and a later file replaces the steps from its first on, so read
# in byte order (".10" before ".2") the last step was lost
mkdir "$T/many"
$PY - "$T/many" <<'PYEOF'
import json, sys
from tt_tfrecord import scalar_event
d = sys.argv[1]
json.dump([{"epoch_num": 1, "global_step": 11, "train_loss": 1.0}], open(d + "/stats.json", "w"))
for k in range(11):
    name = "events.out.tfevents.1700000000.host" + ("" if k == 0 else ".%d" % k)
    open(d + "/" + name, "wb").write(scalar_event(k + 1, "x", float(k + 1)))
PYEOF
"$TOWERTRAIN" plot "$T/many" > /dev/null 2>&1 && $PY - "$T/many/stats.svg" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET
lines = [p for p in ET.parse(sys.argv[1]).getroot().iter("{http://www.w3.org/2000/svg}polyline")
         if p.get("class") == "raw" and p.get("data-scalar") == "x"]
n = [len(p.get("points").split()) for p in lines]
sys.exit(0 if n == [11] else "raw polyline points %s, expected [11]" % n)
PYEOF
ok $? "event files of 11 resumes in one second are read in their numbered order: 11 steps drawn"

# (4) a name longer than a series keeps (63 bytes), in two-byte characters:
# cut whole, so the SVG is still XML, and one series over both epochs
mkdir "$T/long"
$PY - "$T/long/stats.json" <<'PYEOF'
import json, sys
k = "train_" + "\u00e9" * 40
json.dump([{"epoch_num": e, "global_step": 8 * e, k: 1.0 / e} for e in (1, 2)],
          open(sys.argv[1], "w"), ensure_ascii=False)
PYEOF
"$TOWERTRAIN" plot "$T/long" > /dev/null 2>&1 && $PY - "$T/long/stats.svg" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
lines = [p for p in root.iter("{http://www.w3.org/2000/svg}polyline") if p.get("class") == "epoch"]
points = [len(p.get("points").split()) for p in lines]
sys.exit(0 if points == [2] else "polylines of %s points, expected one of 2" % points)
PYEOF
ok $? "a 86-byte UTF-8 name: a well-formed SVG with one series of 2 epochs"

tt_refused "plot -o onto a directory: exit 2, one line naming it" \
  "towertrain: $T/stats: cannot write: Is a directory" "" \
  "$TOWERTRAIN" plot "$T/stats" -o "$T/stats"
tt_refused "plot -o into a directory that is not there: exit 2, one line naming the file" \
  "towertrain: $T/nowhere/p.svg: cannot write: No such file or directory" "" \
  "$TOWERTRAIN" plot "$T/stats" -o "$T/nowhere/p.svg"
"$TOWERTRAIN" plot "$T/nowhere" > "$T/o" 2> "$T/e"; rc=$?
[ $rc = 2 ] && grep -q "^towertrain: .*nowhere/stats.json" "$T/e"
ok $? "a log directory without stats.json: exit 2 (got $rc)"

tt_done
