#!/bin/sh
# End-to-end: the npy source (TAP). Arrays written by numpy (format 1.0, 2.0,
# 3.0; uint8 and float32 of both byte orders; [N,H,W], [N,C,H,W], [N,H,W,C];
# labels of several integer types) read back sample for sample; every
# malformed header refused with one line naming the file, exit 2 and no
# logdir; a 64 GiB (sparse) array trains, being mapped rather than read.
. "$(dirname "$0")/tt_lib.sh"
if ! $PY -c 'import numpy' 2>/dev/null; then
  skip "npy source" "python3-numpy not installed"; tt_done
fi

job() { # job FILE IMAGES LABELS [EXTRA SOURCE KEYS]
  cat > "$1" <<CFG
dataflow = { source = { type = "npy"; images = "$2"; labels = "$3"; $4 }; batch_size = 4; };
model = { input = [48]; classes = 10; layers = ( { name = "fc"; type = "dense"; units = 10; } ); };
optimizer = { type = "sgd"; learning_rate = 0.1; };
max_epoch = 1;
CFG
}

# ---- good arrays, read back exactly ----
$PY - "$T" <<'PYEOF'
import sys
import numpy as np
from numpy.lib import format as fmt
T = sys.argv[1]
r = np.random.default_rng(2)
def save(name, a, version=None):
    with open("%s/%s" % (T, name), "wb") as f:
        fmt.write_array(f, a, version=version)
x = r.integers(0, 256, (12, 3, 4, 4), dtype=np.uint8)
save("u8_nchw.npy", x)
save("u8_nhwc.npy", np.ascontiguousarray(x.transpose(0, 2, 3, 1)), (2, 0))
save("u8_nhw.npy", x.reshape(12, 6, 8)[:, :, :], (3, 0))
f = r.normal(size=(12, 3, 4, 4)).astype(np.float32)
save("f32_nchw.npy", f)
save("f32be_nhwc.npy", np.ascontiguousarray(f.transpose(0, 2, 3, 1)).astype(">f4"))
y = r.integers(0, 10, 12)
save("y_i8.npy", y.astype(np.int64))
save("y_u1.npy", y.astype(np.uint8), (2, 0))
save("y_i2be.npy", y.astype(">i2"))
save("y_u4.npy", y.astype(np.uint32))
np.save(T + "/expect_x.npy", x)
np.save(T + "/expect_f.npy", f)
np.save(T + "/expect_y.npy", y)
PYEOF
# read IMAGES LABELS EXPECT_X LAYOUT DESCRIPTION
read_back() {
  job "$T/r.cfg" "$T/$1" "$T/$2" "$4"
  "$TT_BUILDDIR/tests/tt_samples" "$T/r.cfg" > "$T/samples" 2>"$T/err"
  $PY - "$T/samples" "$T/$3" "$T/expect_y.npy" "$1" <<'PYEOF'
import struct, sys
import numpy as np
b = open(sys.argv[1], "rb").read()
want = np.load(sys.argv[2])
if want.dtype == np.uint8:
    want = want.astype(np.float32) / np.float32(255)
if sys.argv[4] == "u8_nhw.npy":
    want = want.reshape(12, 1, 6, 8)
y = np.load(sys.argv[3])
o, i = 0, 0
while o < len(b):
    label, c, h, w = struct.unpack("4i", b[o:o + 16]); o += 16
    got = np.frombuffer(b[o:o + 4 * c * h * w], dtype=np.float32).reshape(c, h, w); o += 4 * c * h * w
    assert label == y[i], (i, label, y[i])
    assert got.tobytes() == want[i].astype(np.float32).tobytes(), (i, got, want[i])
    i += 1
assert i == 12, i
PYEOF
  ok $? "$5"
}
read_back u8_nchw.npy y_i8.npy expect_x.npy "" "uint8 [N, C, H, W], format 1.0, int64 labels: samples are the array / 255, labels as written"
read_back u8_nhwc.npy y_u1.npy expect_x.npy 'layout = "nhwc";' "uint8 [N, H, W, C] with layout = nhwc, format 2.0, uint8 labels: the same C x H x W samples"
read_back u8_nhw.npy y_i2be.npy expect_x.npy "" "uint8 [N, H, W], format 3.0, big-endian int16 labels: one channel"
read_back f32_nchw.npy y_u4.npy expect_f.npy "" "float32 [N, C, H, W], uint32 labels: taken as is, bit for bit"
read_back f32be_nhwc.npy y_i8.npy expect_f.npy 'layout = "nhwc";' "big-endian float32 [N, H, W, C]: the same samples"

job "$T/train.cfg" "$T/u8_nhwc.npy" "$T/y_i8.npy" 'layout = "nhwc";'
"$TOWERTRAIN" run "$T/train.cfg" --logdir "$T/log-train" --quiet --set dataflow.prefetch.workers=3
ok $? "a job trains on npy arrays"

# ---- malformed headers: one line naming the file, exit 2, nothing written ----
$PY - "$T" <<'PYEOF'
import struct, sys
import numpy as np
T = sys.argv[1]
def raw(name, header, data=b"", magic=b"\x93NUMPY", version=(1, 0)):
    if version[0] == 1:
        head = magic + bytes(version) + struct.pack("<H", len(header))
    else:
        head = magic + bytes(version) + struct.pack("<I", len(header))
    open("%s/%s" % (T, name), "wb").write(head + header.encode() + data)
def h(descr="'|u1'", order="False", shape="(12, 4, 4)"):
    s = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, order, shape)
    return s + " " * (63 - (10 + len(s)) % 64) + "\n"
good = bytes(12 * 16)
raw("bad_magic.npy", h(), good, magic=b"\x93NUMPZ")
raw("fortran.npy", h(order="True"), good)
raw("f64.npy", h(descr="'<f8'"), bytes(12 * 16 * 8))
raw("i16.npy", h(descr="'<i2'"), bytes(12 * 16 * 2))
raw("structured.npy", h(descr="[('a', '<f4')]"), good)
raw("short.npy", h(), bytes(12 * 16 - 1))
raw("long.npy", h(), bytes(12 * 16 + 1))
raw("rank2.npy", h(shape="(12, 16)"), good)
raw("version4.npy", h(), good, version=(4, 0))
raw("no_shape.npy", "{'descr': '|u1', 'fortran_order': False, }\n", good)
raw("extra_key.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (12, 4, 4), 'x': 1, }\n", good)
raw("garbage.npy", "this is not a dict\n", good)
raw("cut_header.npy", h())
with open(T + "/cut_header.npy", "r+b") as f:
    f.truncate(30)
raw("huge_shape.npy", h(shape="(1099511627776, 1099511627776, 4)"), good)
raw("zero_dim.npy", h(shape="(12, 0, 4)"))
open(T + "/empty.npy", "wb").close()
raw("labels_n.npy", h(descr="'<i8'", shape="(11,)"), bytes(11 * 8))
raw("labels_2d.npy", h(descr="'<i8'", shape="(12, 1)"), bytes(12 * 8))
raw("labels_float.npy", h(descr="'<f4'", shape="(12,)"), bytes(12 * 4))
raw("good_x.npy", h(), good)
raw("good_y.npy", h(descr="'<i8'", shape="(12,)"), bytes(12 * 8))
PYEOF
refuse() { # refuse IMAGES LABELS SUBSTRING
  job "$T/bad.cfg" "$T/$1" "$T/$2"
  "$TOWERTRAIN" run "$T/bad.cfg" --logdir "$T/log-bad" >"$T/out" 2>"$T/err"; rc=$?
  bad=$1; [ "$1" = good_x.npy ] && bad=$2
  [ $rc = 2 ] && [ "$(wc -l < "$T/err")" = 1 ] && grep -q "^towertrain: $T/$bad: .*$3" "$T/err" &&
    [ ! -e "$T/log-bad" ]
  ok $? "$bad: exit 2, one line naming it: $(sed 's/^towertrain: [^ ]*: //' "$T/err")"
}
refuse bad_magic.npy good_y.npy "not a .npy file (bad magic)"
refuse fortran.npy good_y.npy "fortran_order is True"
refuse f64.npy good_y.npy "unsupported dtype for images"
refuse i16.npy good_y.npy "unsupported dtype for images"
refuse structured.npy good_y.npy "unsupported dtype"
refuse short.npy good_y.npy "shape does not match the file size"
refuse long.npy good_y.npy "shape does not match the file size"
refuse rank2.npy good_y.npy "images must be \[N, H, W\]"
refuse version4.npy good_y.npy "unsupported .npy format version 4.0"
refuse no_shape.npy good_y.npy "lacks 'shape'"
refuse extra_key.npy good_y.npy "unexpected key 'x'"
refuse garbage.npy good_y.npy "malformed header"
refuse cut_header.npy good_y.npy "truncated header"
refuse huge_shape.npy good_y.npy "shape does not match the file size"
refuse zero_dim.npy good_y.npy "every dimension must be 1 to"
refuse empty.npy good_y.npy "not a .npy file (empty)"
refuse good_x.npy labels_n.npy "11 labels but the images have N = 12"
refuse good_x.npy labels_2d.npy "labels must have shape (N,)"
refuse good_x.npy labels_float.npy "unsupported dtype for labels"

# ---- mapped, not read: a 64 GiB array (sparse on disk) trains on its first samples ----
$PY - "$T" <<'PYEOF'
import struct, sys
T = sys.argv[1]
N = (64 << 30) // 48
def sparse(name, descr, shape, nbytes):
    s = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    s += " " * (63 - (10 + len(s)) % 64) + "\n"
    with open("%s/%s" % (T, name), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(s)) + s.encode())
        f.truncate(10 + len(s) + nbytes)
sparse("big_x.npy", "|u1", "(%d, 3, 4, 4)" % N, N * 48)
sparse("big_y.npy", "|u1", "(%d,)" % N, N)
PYEOF
job "$T/big.cfg" "$T/big_x.npy" "$T/big_y.npy" ""
$PY - "$TOWERTRAIN" "$T/big.cfg" "$T/log-big" > "$T/big.out" 2>&1 <<'PYEOF'
import resource, subprocess, sys
rc = subprocess.run([sys.argv[1], "run", sys.argv[2], "--logdir", sys.argv[3], "--quiet",
                     "--set", "dataflow.limit=4096"]).returncode
print("RC", rc, "MAXRSS_KB", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PYEOF
rss=$(sed -n 's/^RC 0 MAXRSS_KB //p' "$T/big.out")
[ -n "$rss" ] && [ "$rss" -lt 204800 ]
ok $? "a 64 GiB npy array (sparse) trains with limit = 4096 in $rss KiB peak RSS: mapped, not read ($(cat "$T/big.out"))"

tt_done
