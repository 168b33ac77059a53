#!/bin/sh
# End-to-end: bad data files give one line on stderr, exit 2, and no logdir (TAP).
. "$(dirname "$0")/tt_lib.sh"

# idx FILE MAGIC COUNT ROWS COLS BYTES: writes an IDX header and BYTES bytes of data
idx3() { printf "$(printf '\\%03o\\%03o\\%03o\\%03o' 0 0 8 "$2")" > "$1"
         for v in $3 $4 $5; do printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((v>>24&255)) $((v>>16&255)) $((v>>8&255)) $((v&255)))" >> "$1"; done
         head -c "$6" /dev/zero >> "$1"; }
idx1() { printf "$(printf '\\%03o\\%03o\\%03o\\%03o' 0 0 8 1)" > "$1"
         v=$2; printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((v>>24&255)) $((v>>16&255)) $((v>>8&255)) $((v&255)))" >> "$1"
         head -c "$3" /dev/zero >> "$1"; }

idx3 "$T/good-images" 3 64 4 4 1024
idx1 "$T/good-labels" 64 64
idx3 "$T/trunc-images" 3 64 4 4 1000
idx3 "$T/magic-images" 5 64 4 4 1024
idx1 "$T/short-labels" 63 63
head -c 300 "$T/good-images" | gzip -c > "$T/trunc-gz-full.gz"
gzip -c "$T/good-images" | head -c 40 > "$T/trunc-gz-images.gz"

job() { # job NAME IMAGES LABELS [EXTRA]
  cat > "$T/$1.cfg" <<CFG
dataflow = { source = { type = "idx"; images = "$2"; labels = "$3"; }; batch_size = 8; $4 };
model = { input = [16]; classes = 10; layers = ( { name = "fc"; type = "dense"; units = 10; } ); };
optimizer = { type = "sgd"; learning_rate = 0.1; };
max_epoch = 1;
CFG
}
expect() { # expect NAME TEXT
  tt_refused "$1: exit 2, one line with '$2', no logdir" "$2" "$T/log-$1" \
    "$TOWERTRAIN" run "$T/$1.cfg" --logdir "$T/log-$1"
}

job good "$T/good-images" "$T/good-labels"
"$TOWERTRAIN" run "$T/good.cfg" --logdir "$T/log-good" --quiet
ok $? "the well-formed IDX pair trains"
job truncated "$T/trunc-images" "$T/good-labels";   expect truncated "trunc-images: truncated"
job magic "$T/magic-images" "$T/good-labels";       expect magic "not an IDX image file"
job count "$T/good-images" "$T/short-labels";       expect count "has 63 labels but"
job gz "$T/trunc-gz-images.gz" "$T/good-labels";    expect gz "trunc-gz-images.gz: truncated"
job missing "$T/nothing-here" "$T/good-labels";     expect missing "dataflow.source.images: $T/nothing-here: No such file"
job limit "$T/good-images" "$T/good-labels" "limit = 4;"; expect limit "fewer than one global batch"
# with a limit only the first records are read (idx.c): a file cut after
# them trains, one cut before them is refused, naming what the limit needs
job cut_after "$T/trunc-images" "$T/good-labels" "limit = 32;"
"$TOWERTRAIN" run "$T/cut_after.cfg" --logdir "$T/log-cut_after" --quiet
ok $? "limit = 32 on 62 of 64 images: the first 32 are read and train"
job cut_before "$T/trunc-images" "$T/good-labels" "limit = 63;"
expect cut_before "trunc-images: truncated: the first 63 images of 4x4 need 1008 bytes but 1000"
job labels_as_images "$T/good-labels" "$T/good-labels"; expect labels_as_images "not an IDX image file"
# a random_resized_crop ratio whose fallback crop (ten draws missed) would be
# empty on these 4x4 images: refused at build, not trained on garbage
job rrc "$T/good-images" "$T/good-labels" "augment = ( { type = \"random_resized_crop\"; size = 4; ratio = [100.0, 200.0]; } );"
expect rrc "random_resized_crop ratio [100, 200] on a 4x4 image can leave an empty crop"

# The label rule (towertrain.cfg(5), DATAFLOW): every label below the model's classes, whatever the
# source; a label out of range names the file, the sample and the value.
$PY - "$T" <<'PYEOF'
import struct, sys
T = sys.argv[1]
def idx(path, magic, dims, data):
    open(path, "wb").write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data))
idx(T + "/four-images", 0x803, (40, 4, 4), [7] * 640)
idx(T + "/four-labels", 0x801, (40,), [i % 4 for i in range(40)])
idx(T + "/ten-labels", 0x801, (40,), [10 if i == 37 else i % 10 for i in range(40)])
rec = lambda label: bytes([label]) + bytes(3072)
open(T + "/cifar-a.bin", "wb").write(b"".join(rec(i % 4) for i in range(16)))
open(T + "/cifar-b.bin", "wb").write(b"".join(rec(12 if i == 5 else i % 4) for i in range(16)))
def npy(path, descr, shape, data):
    head = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    head += " " * (63 - (10 + len(head)) % 64) + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + data)
npy(T + "/x.npy", "|u1", "(40, 4, 4)", bytes(640))
npy(T + "/y.npy", "<i8", "(40,)", b"".join(struct.pack("<q", -1 if i == 9 else i % 4) for i in range(40)))
PYEOF
job four "$T/four-images" "$T/four-labels"
"$TOWERTRAIN" run "$T/four.cfg" --logdir "$T/log-four" --quiet --set 'model.classes=4' \
  --set 'model.layers=( { name = "fc"; type = "dense"; units = 4; } )'
ok $? "IDX labels 0-3 train a model of classes = 4 (an IDX file has no class count)"
job tenth "$T/four-images" "$T/ten-labels";  expect tenth "ten-labels: sample 37: label 10 >= classes 10"
job valid "$T/four-images" "$T/four-labels"
cat >> "$T/valid.cfg" <<CFG
callbacks = ( { type = "inference_runner"; dataflow = {
  source = { type = "idx"; images = "$T/four-images"; labels = "$T/ten-labels"; }; }; } );
CFG
expect valid "ten-labels: sample 37: label 10 >= classes 10"
cat > "$T/cifar.cfg" <<CFG
dataflow = { source = { type = "cifar10"; files = [ "$T/cifar-a.bin" ]; }; batch_size = 8; };
model = { input = [3, 32, 32]; classes = 4; layers = ( { name = "fc"; type = "dense"; units = 4; } ); };
optimizer = { type = "sgd"; learning_rate = 0.1; };
max_epoch = 1;
CFG
"$TOWERTRAIN" run "$T/cifar.cfg" --logdir "$T/log-cifar" --quiet
ok $? "CIFAR-10 records with labels 0-3 train a model of classes = 4"
tt_refused "CIFAR-10: a label out of range names the file, its record and the value" \
  "towertrain: $T/cifar-b.bin: sample 5: label 12 >= classes 4" "$T/log-cifar2" \
  "$TOWERTRAIN" run "$T/cifar.cfg" --logdir "$T/log-cifar2" \
  --set "dataflow.source.files=[\"$T/cifar-a.bin\", \"$T/cifar-b.bin\"]"
# more samples than the dataflow's 32-bit indices reach: refused, not wrapped
# (sparse .npy files of 2^32 + 8 one-byte samples)
$PY - "$T" <<'PYEOF'
import struct, sys
T, n = sys.argv[1], (1 << 32) + 8
for name, shape in (("big-x.npy", "(%d, 1, 1)" % n), ("big-y.npy", "(%d,)" % n)):
    h = "{'descr': '|u1', 'fortran_order': False, 'shape': %s, }" % shape
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    with open(T + "/" + name, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
        f.truncate(f.tell() + n)
PYEOF
tt_refused "npy of 2^32 + 8 samples: refused, naming the limit" \
  "towertrain: dataflow.source: 4294967304 samples; at most 4294967295 are read (set dataflow.limit)" \
  "$T/log-big" "$TOWERTRAIN" run "$T/cifar.cfg" --logdir "$T/log-big" \
  --set "dataflow.source={ type = \"npy\"; images = \"$T/big-x.npy\"; labels = \"$T/big-y.npy\"; }" \
  --set 'model={ input = [1, 1, 1]; classes = 4; layers = ( { name = "fc"; type = "dense"; units = 4; } ); }'
rm -f "$T/big-x.npy" "$T/big-y.npy"
mkdir "$T/cifar-dir.bin"
tt_refused "CIFAR-10: a directory in files is not a regular file" \
  "towertrain: $T/cifar-dir.bin: not a regular file" "$T/log-cifar3" \
  "$TOWERTRAIN" run "$T/cifar.cfg" --logdir "$T/log-cifar3" --set "dataflow.source.files=[\"$T/cifar-dir.bin\"]"
cat > "$T/npy.cfg" <<CFG
dataflow = { source = { type = "npy"; images = "$T/x.npy"; labels = "$T/y.npy"; }; batch_size = 8; };
model = { input = [16]; classes = 4; layers = ( { name = "fc"; type = "dense"; units = 4; } ); };
optimizer = { type = "sgd"; learning_rate = 0.1; };
max_epoch = 1;
CFG
tt_refused "npy: a negative label names the file, the sample and the value" \
  "towertrain: $T/y.npy: sample 9: label -1 < 0" "$T/log-npy" \
  "$TOWERTRAIN" run "$T/npy.cfg" --logdir "$T/log-npy"
"$TOWERTRAIN" run "$T/npy.cfg" --logdir "$T/log-npy2" --set dataflow.limit=8 --quiet
ok $? "npy: samples beyond limit are not read (their labels are not checked)"
tt_refused "fake: classes above the model's are refused" \
  "towertrain: dataflow.source: fake data with classes = 5 has labels up to 4, but the model has classes = 4" \
  "$T/log-fake" "$TOWERTRAIN" run "$T/npy.cfg" --logdir "$T/log-fake" \
  --set 'dataflow.source={type="fake"; shape=[16]; classes=5;}'

tt_done
