#!/bin/sh
# e2e_disk_full.sh - what a run does when the disk fills. A run trains into a small
# tmpfs until it fills, for a sweep of sizes, so the write that fails is in
# turn the event file, stats.json, a checkpoint and its pointer. Every time:
# exit status 1 and one error line naming the full disk; the checkpoint the
# pointer names complete (CRC-32C right); stats.json whole JSON; every event
# file whole records; no temporary file left. Then, once space is back,
# resume finishes the run. Needs root to mount, done in a private mount
# namespace (unshare -m) so nothing leaks out; SKIPs visibly otherwise. TAP.
if [ -z "${TT_DISK_FULL_INNER:-}" ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null 2>&1; then
        echo "1..0 # SKIP mounting a tmpfs needs root and unshare (uid $(id -u))"
        exit 0
    fi
    if ! unshare -m --propagation private true 2>/dev/null; then
        echo "1..0 # SKIP unshare -m is not allowed here (no private mount namespace)"
        exit 0
    fi
    TT_DISK_FULL_INNER=1 exec unshare -m --propagation private sh "$0"
fi
. "$(dirname "$0")/tt_lib.sh"
trap 'umount "$T/disk" 2>/dev/null; rm -rf "$T"' EXIT
mkdir -p "$T/disk" "$T/runs"
if ! mount -t tmpfs -o size=64k tmpfs "$T/disk" 2>"$T/mount.err"; then
    echo "1..0 # SKIP cannot mount a tmpfs: $(head -n 1 "$T/mount.err")"
    exit 0
fi
umount "$T/disk"

# A 784-8-10 MLP with Adam: about 76 KiB per checkpoint, one every epoch, all
# kept; events with histograms grow the event file every epoch.
cat >"$T/job.cfg" <<'JOB'
dataflow = { source = { type = "fake"; shape = [784]; classes = 10; size = 256; };
  batch_size = 32; prefetch = { workers = 0; }; };
model = { input = [784]; classes = 10; layers = (
  { name = "fc0"; type = "dense"; units = 8; activation = "relu"; },
  { name = "fc1"; type = "dense"; units = 10; } ); };
optimizer = { type = "adam"; learning_rate = 0.001; };
callbacks = ( { type = "model_saver"; max_to_keep = 0; } );
monitors = ( { type = "events"; every_k_steps = 1; histograms = true; }, "json" );
max_epoch = 60;
JOB

# run_full KB: trains into a KB-sized tmpfs; keeps the log directory, the
# exit status and stderr under $T/runs/KB. Leaves the tmpfs mounted.
run_full() {
    mount -t tmpfs -o "size=$1k" tmpfs "$T/disk" || return 1
    "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/disk/log" --quiet >/dev/null 2>"$T/runs/$1.err"
    echo $? >"$T/runs/$1.rc"
    cp -a "$T/disk/log" "$T/runs/$1" 2>/dev/null || mkdir -p "$T/runs/$1"
}

sizes=$(seq 4 4 344)
for kb in $sizes; do
    run_full "$kb"
    umount "$T/disk"
done

$PY - "$T/runs" $sizes >"$T/checks" 2>&1 <<'PYEOF'
import glob, json, os, re, struct, sys
from tt_tap import ok
runs, sizes = sys.argv[1], sys.argv[2:]
table = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ (0x82f63b78 if c & 1 else 0)
    table.append(c)
def crc32c(data):
    c = 0xffffffff
    for b in data:
        c = table[(c ^ b) & 0xff] ^ (c >> 8)
    return c ^ 0xffffffff
def masked(c):
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff
def checkpoint_complete(path):
    b = open(path, "rb").read()
    hlen = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + hlen])
    data = b[8 + hlen:]
    spans = sorted(v["data_offsets"] for k, v in head.items() if k != "__metadata__")
    tiled = spans[0][0] == 0 and spans[-1][1] == len(data) and \
        all(a[1] == c[0] for a, c in zip(spans, spans[1:]))
    return tiled and "%08x" % crc32c(data) == head["__metadata__"]["data_crc32c"]
def events_whole(path):
    b = open(path, "rb").read()
    i = records = 0
    while i < len(b):
        if i + 12 > len(b):
            return False, records
        ln = struct.unpack("<Q", b[i:i + 8])[0]
        if masked(crc32c(b[i:i + 8])) != struct.unpack("<I", b[i + 8:i + 12])[0] or \
                i + 16 + ln > len(b) or \
                masked(crc32c(b[i + 12:i + 12 + ln])) != struct.unpack("<I", b[i + 12 + ln:i + 16 + ln])[0]:
            return False, records
        i += 16 + ln
        records += 1
    return True, records
failing = set()
bad = {k: [] for k in ("exit", "line", "tmp", "pointer", "stats", "events")}
for kb in sizes:
    d = os.path.join(runs, kb)
    rc = int(open(d + ".rc").read())
    err = open(d + ".err").read().splitlines()
    if rc != 1:
        bad["exit"].append("%s KiB: %d" % (kb, rc))
    if len(err) != 1 or not err[0].startswith("towertrain: ") or \
            "No space left on device" not in err[0]:
        bad["line"].append("%s KiB: %r" % (kb, err[:3]))
    else:
        m = re.search(r"/log/([^:/]*?)(\.\d+)?: write failed", err[0])
        what = m.group(1) if m else "?"
        failing.add("checkpoint file" if what.startswith("model-") else
                    "event file" if what.startswith("events.") else what)
    files = os.listdir(d)
    if any(".tmp." in f for f in files):
        bad["tmp"].append("%s KiB: %s" % (kb, [f for f in files if ".tmp." in f]))
    if "checkpoint" in files:
        name = open(os.path.join(d, "checkpoint")).readline().strip()
        try:
            if not checkpoint_complete(os.path.join(d, name)):
                bad["pointer"].append("%s KiB: %s incomplete" % (kb, name))
        except Exception as e:
            bad["pointer"].append("%s KiB: %s does not load (%r)" % (kb, name, e))
    if "stats.json" in files:
        try:
            json.load(open(os.path.join(d, "stats.json")))
        except Exception as e:
            bad["stats"].append("%s KiB: %r" % (kb, e))
    for ev in glob.glob(os.path.join(d, "events.out.tfevents.*")):
        whole, records = events_whole(ev)
        if not whole:
            bad["events"].append("%s KiB: partial record after %d" % (kb, records))
span = "%d disk sizes, %s to %s KiB" % (len(sizes), sizes[0], sizes[-1])
what = {"exit": "every run exits with status 1",
        "line": "every run prints one error line naming the full disk",
        "tmp": "no run leaves a temporary file",
        "pointer": "the checkpoint the pointer names is complete (CRC-32C right)",
        "stats": "stats.json is whole JSON",
        "events": "every event file is whole records, each CRC right"}
for k in ("exit", "line", "tmp", "pointer", "stats", "events"):
    ok(not bad[k], "%s: %s%s" % (span, what[k], "; " + "; ".join(bad[k][:4]) if bad[k] else ""))
for w in ("event file", "stats.json", "checkpoint file", "checkpoint"):
    ok(w in failing, "the sweep filled the disk during a write of the %s" % w)
PYEOF
tt_tap "$T/checks" $?

# Space comes back: remount larger and resume from the pointer's checkpoint.
run_full 316
ckpt=$(head -n 1 "$T/disk/log/checkpoint" 2>/dev/null)
mount -o remount,size=64m "$T/disk"
"$TOWERTRAIN" resume "$T/disk/log" --quiet --max-epoch 10 >/dev/null 2>"$T/err"
rc=$?
ok $rc "resume from ${ckpt:-nothing} once space is back, to epoch 10"
[ $rc -eq 0 ] || sed 's/^/# /' "$T/err"
final=$(head -n 1 "$T/disk/log/checkpoint" 2>/dev/null)
ok "$([ "$final" = model-80.safetensors ]; echo $?)" "the resumed run ends at step 80 ($final)"
umount "$T/disk"
# Room for the log directory's parents but not for job.cfg (4 inodes): the
# run exits 1 naming the file, and every directory it made is gone again.
mount -t tmpfs -o size=64k,nr_inodes=4 tmpfs "$T/disk"
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/disk/a/b/log" --quiet >/dev/null 2>"$T/err"
rc=$?
left=$(ls -A "$T/disk")
umount "$T/disk"
[ $rc -eq 1 ] && grep -q "job.cfg" "$T/err" && [ -z "$left" ]
ok $? "job.cfg cannot be written: exit 1 naming it, no directory left behind (rc $rc, left '$left')"
tt_done
