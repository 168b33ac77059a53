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
job missing "$T/nothing-here" "$T/good-labels";     expect missing "nothing-here: cannot open"
job limit "$T/good-images" "$T/good-labels" "limit = 4;"; expect limit "fewer than one global batch"
job labels_as_images "$T/good-labels" "$T/good-labels"; expect labels_as_images "not an IDX image file"

tt_done
