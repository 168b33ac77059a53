#!/bin/sh
# End-to-end: `towertrain plot` writes an SVG with one panel per scalar of
# stats.json; checked by parsing the SVG (TAP).
. "$(dirname "$0")/tt_lib.sh"
mkdir "$T/log"
cat > "$T/log/stats.json" <<'JSON'
[ {"epoch_num": 1, "global_step": 10, "train_loss": 2.0, "validation_accuracy": 0.5, "learning_rate": 0.1},
  {"epoch_num": 2, "global_step": 20, "train_loss": 1.0, "validation_accuracy": 0.7, "learning_rate": 0.1},
  {"epoch_num": 3, "global_step": 30, "train_loss": 0.5, "validation_accuracy": 0.8, "learning_rate": 0.01} ]
JSON
"$TOWERTRAIN" plot "$T/log" -o "$T/out.svg" > /dev/null
rc=$?
$PY - "$T/out.svg" $rc >"$T/checks" 2>&1 <<'PYEOF'
import sys, xml.etree.ElementTree as ET
svg, rc = sys.argv[1], int(sys.argv[2])
def ok(c, w):
    print(("ok - %s" if c else "not ok - %s") % w)
ok(rc == 0, "plot exits 0")
ns = {"s": "http://www.w3.org/2000/svg"}
root = ET.parse(svg).getroot()
panels = root.findall("s:g", ns)
names = [p.get("data-scalar") for p in panels]
ok(names == ["train_loss", "validation_accuracy", "learning_rate"], "one panel per scalar, in order: %s" % names)
titles = [p.find("s:text", ns).text for p in panels]
ok(titles == names, "each panel is titled with its scalar")
def pts(p):
    return [tuple(map(float, xy.split(","))) for xy in p.find("s:polyline", ns).get("points").split()]
loss = pts(panels[0]); acc = pts(panels[1])
ok(len(loss) == 3 and loss[0][0] < loss[1][0] < loss[2][0], "three points, epochs left to right")
ok(loss[0][1] < loss[1][1] < loss[2][1] and acc[0][1] > acc[1][1] > acc[2][1],
   "a falling loss goes down the panel, a rising accuracy goes up (SVG y grows downwards)")
PYEOF
tt_tap "$T/checks" $?
tt_refused "a log directory without stats.json: exit 2, one line" "nowhere/stats.json" "" \
  "$TOWERTRAIN" plot "$T/nowhere"
tt_done
