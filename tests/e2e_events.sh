#!/bin/sh
# End-to-end: TensorBoard event files, read back by an independent reader
# written here in Python (TFRecord framing, CRC-32C, the Event protobuf by
# hand), checked against stats.json (TAP).
. "$(dirname "$0")/tt_lib.sh"
cat > "$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/mlp.cfg";
dataflow = { source = { type = "fake"; shape = [784]; classes = 10; size = 640; }; batch_size = 32; };
optimizer = { type = "adam"; learning_rate = 0.001; };
max_epoch = 3;
callbacks = ( "throughput", "model_saver" );
monitors = ( { type = "events"; every_k_steps = 5; }, "json" );
CFG
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/log" --quiet --set max_epoch=2 \
  --set 'monitors=( { type = "events"; every_k_steps = 5; histograms = true; }, "json" )' &&
  "$TOWERTRAIN" resume "$T/log" --max-epoch 3 --quiet
rc=$?
$PY - "$T/log" $rc histograms >"$T/checks" 2>&1 <<'PYEOF'
import glob, json, struct, sys
logdir, rc = sys.argv[1], int(sys.argv[2])
from tt_tap import ok
ok(rc == 0, "run 2 epochs and resume to 3 with an events monitor")
from tt_tfrecord import crc32c, masked
def varint(b, i):
    v = s = 0
    while True:
        x = b[i]; i += 1; v |= (x & 0x7f) << s; s += 7
        if x < 0x80:
            return v, i
def fields(b):
    i, out = 0, []
    while i < len(b):
        key, i = varint(b, i); f, w = key >> 3, key & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: v = b[i:i + 8]; i += 8
        elif w == 5: v = b[i:i + 4]; i += 4
        elif w == 2: ln, i = varint(b, i); v = b[i:i + ln]; i += ln
        else: raise ValueError("wire type %d" % w)
        out.append((f, v))
    return out
files = sorted(glob.glob(logdir + "/events.out.tfevents.*"))
ok(len(files) == 2, "a resumed run writes a new event file (%d files)" % len(files))
scalars, histos, crc_ok, first_ok = {}, {}, True, True
for path in files:
    data = open(path, "rb").read()
    i, k = 0, 0
    while i < len(data):
        hdr = data[i:i + 8]; ln = struct.unpack("<Q", hdr)[0]
        crc_ok &= struct.unpack("<I", data[i + 8:i + 12])[0] == masked(crc32c(hdr))
        rec = data[i + 12:i + 12 + ln]
        crc_ok &= struct.unpack("<I", data[i + 12 + ln:i + 16 + ln])[0] == masked(crc32c(rec))
        i += 16 + ln
        ev = dict((f, v) for f, v in fields(rec) if f != 5)
        summ = [v for f, v in fields(rec) if f == 5]
        if k == 0:
            first_ok &= ev.get(3) == b"brain.Event:2" and 1 in ev
        for s in summ:
            for f, val in fields(s):
                vf = dict(fields(val))
                if 2 in vf:
                    scalars.setdefault(vf[1].decode(), {})[ev[2]] = struct.unpack("<f", vf[2])[0]
                if 5 in vf:
                    h = fields(vf[5])
                    d = lambda k: struct.unpack("<d", dict(h)[k])[0]
                    counts = struct.unpack("<%dd" % (len(dict(h)[7]) // 8), dict(h)[7])
                    histos.setdefault(vf[1].decode(), []).append((d(1), d(2), d(3), sum(counts)))
        k += 1
ok(crc_ok, "every length and data CRC-32C is valid (masked, as TFRecord)")
ok(first_ok, "the first record of each file is file_version brain.Event:2 with a wall_time")
stats = json.load(open(logdir + "/stats.json"))
tags = {"train_loss", "train_accuracy", "learning_rate", "throughput"}
ok(tags <= set(scalars), "scalars tagged %s" % sorted(scalars))
same = all(struct.unpack("<f", struct.pack("<f", e[t]))[0] == scalars[t][e["global_step"]]
           for e in stats for t in tags)
ok(same and [e["global_step"] for e in stats] == [20, 40, 60],
   "the values at every epoch end equal stats.json's (steps 20, 40, 60)")
steps = sorted(scalars["train_loss"])
ok(steps == [5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60],
   "per-step scalars every 5 steps, continuing across the resume: %s" % steps)
if len(sys.argv) > 3:
    want = {"fc0.weight": 200704, "fc0.bias": 256, "fc2.weight": 2560}
    good = all(k in histos and len(histos[k]) == 3 and
               all(lo <= hi and num == want[k] and cnt == num for lo, hi, num, cnt in histos[k])
               for k in want)
    ok(good, "histograms = true: a histogram of every parameter each epoch, counts adding up")
try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(files[0]); acc.Reload()
    ok("train_loss" in acc.Tags()["scalars"], "TensorBoard's EventAccumulator reads the file")
except ImportError:
    print("ok - TensorBoard's EventAccumulator reads the file # SKIP tensorboard not installed")
PYEOF
tt_tap "$T/checks" $?
# Names taken: an event file of this second and its .1 to .999 already exist
# (a run resumed a thousand times in one second, or files put there by hand).
# The new run takes the next free name and truncates none of them.
mkdir "$T/taken"
$PY - "$T/taken" "$(hostname)" <<'PYEOF'
import sys, time
now = int(time.time())
for t in range(now, now + 4):  # the seconds the run may start in
    for k in range(0, 1000):
        name = "%s/events.out.tfevents.%d.%s%s" % (sys.argv[1], t, sys.argv[2], "" if k == 0 else ".%d" % k)
        open(name, "w").write("keep")
PYEOF
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/taken" --quiet --set max_epoch=1 --set 'callbacks=()' \
  --set 'monitors=( "events" )' 2>"$T/taken.err"
rc=$?
kept=$(grep -l '^keep$' "$T"/taken/events.out.tfevents.* | wc -l)
new=$(grep -L '^keep$' "$T"/taken/events.out.tfevents.* | wc -l)
[ $rc = 0 ] && [ "$kept" = 4000 ] && [ "$new" = 1 ]
ok $? "1000 names of each second taken: the run writes a new event file and truncates none (rc $rc, kept $kept of 4000, new $new; $(head -c 200 "$T/taken.err"))"
tt_done
