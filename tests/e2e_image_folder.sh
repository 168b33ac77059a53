#!/bin/sh
# End-to-end: the image_folder source (TAP). Pixels against PIL for every
# colour type, order against torchvision, corrupt files (image_folder_check.py);
# then training: different sizes need an augment that fixes the size; the same
# job gives the same bits with 0 and 3 prefetch workers (random_resized_crop,
# color_jitter, flip), with 1 and 2 towers, and across 2 MPI ranks; a file that
# does not decode stops the run naming it, or is skipped with skip_corrupt;
# dataflow.limit reads only the headers of the images it uses.
. "$(dirname "$0")/tt_lib.sh"
if ! $PY -c 'import numpy, PIL' 2>/dev/null; then
  skip "image folders against PIL" "python3-pil or python3-numpy not installed"; tt_done
fi
if [ "$("$TOWERTRAIN" --version | sed -n 's/.*images: \([a-z ]*\).*/\1/p')" != "jpeg png" ]; then
  skip "image folders" "built without libturbojpeg0-dev or libpng-dev ($("$TOWERTRAIN" --version))"; tt_done
fi
mkdir "$T/check"
$PY "$TT_SRCDIR/tests/image_folder_check.py" "$TT_BUILDDIR/tests/tt_samples" "$T/check" > "$T/checks" 2>&1
tt_tap "$T/checks" $?

# A training folder: 3 classes of 24 images, PNG and JPEG, 18 to 40 pixels a side
$PY - "$T" <<'PYEOF'
import os, sys
import numpy as np
from PIL import Image
r = np.random.default_rng(3)
for split, count in (("train", 24), ("val", 6)):
    for k, cls in enumerate(("ants", "bees", "cats")):
        d = os.path.join(sys.argv[1], split, cls)
        os.makedirs(d)
        for i in range(count):
            h, w = r.integers(18, 41, 2)
            img = np.clip(r.normal(60 + 60 * k, 40, (h, w, 3)), 0, 255).astype(np.uint8)
            ext = "png" if i % 2 else "jpg"
            Image.fromarray(img).save(os.path.join(d, "%02d.%s" % (i, ext)))
PYEOF
cat > "$T/job.cfg" <<CFG
seed = 5;
dataflow = { source = { type = "image_folder"; root = "$T/train"; };
             augment = ( { type = "random_resized_crop"; size = 16; },
                         { type = "color_jitter"; brightness = 0.4; contrast = 0.4; saturation = 0.4; },
                         { type = "flip"; },
                         { type = "normalize"; mean = [0.5, 0.5, 0.5]; std = [0.25, 0.25, 0.25]; } );
             batch_size = 8; prefetch = { workers = 0; queue = 4; }; };
model = { input = [3, 16, 16]; classes = 3;
          layers = ( { name = "conv"; type = "conv2d"; filters = 4; kernel = 3; activation = "relu"; },
                     { name = "pool"; type = "global_avgpool"; },
                     { name = "fc"; type = "dense"; units = 3; } ); };
optimizer = { type = "momentum"; learning_rate = 0.05; };
max_epoch = 2;
callbacks = ( { type = "inference_runner";
                dataflow = { source = { type = "image_folder"; root = "$T/val"; };
                             augment = ( { type = "resize"; size = 16; }, { type = "center_crop"; size = 16; },
                                         { type = "normalize"; mean = [0.5, 0.5, 0.5]; std = [0.25, 0.25, 0.25]; } );
                             batch_size = 5; }; },
              "model_saver" );
monitors = ( "json" );
CFG
FINAL=model-18.safetensors
# equal A B: every tensor bitwise equal (0) or within TOL
equal() {
  PYTHONPATH="$TT_SRCDIR/tests" $PY - "$1" "$2" "${3:-0}" <<'PYEOF'
import sys
import numpy as np
from tt_safetensors import load
a, b = load(sys.argv[1], optimizer=True)[0], load(sys.argv[2], optimizer=True)[0]
tol = float(sys.argv[3])
if tol == 0:
    sys.exit(0 if a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a) else 1)
worst = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) for k in a)
print("%.2g" % worst)
sys.exit(0 if worst <= tol else 1)
PYEOF
}

"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/w0" --quiet; rc0=$?
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/w3" --quiet --set dataflow.prefetch.workers=3; rc3=$?
[ $rc0 = 0 ] && [ $rc3 = 0 ] && equal "$T/w0/$FINAL" "$T/w3/$FINAL" &&
  cmp -s "$T/w0/stats.json" "$T/w3/stats.json"
ok $? "random_resized_crop + color_jitter + flip: 0 and 3 prefetch workers give bitwise-equal parameters and stats.json (rc $rc0, $rc3)"
$PY -c 'import json,sys; s=json.load(open(sys.argv[1])); assert len(s) == 2 and 0 <= s[-1]["validation_accuracy"] <= 1' "$T/w0/stats.json"
ok $? "the inference_runner reads a validation folder through resize + center_crop"
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/t2a" --quiet \
  --set 'trainer={type="sync_replicated"; nr_tower=2;}' --set dataflow.batch_size=4 --set dataflow.prefetch.workers=2; rca=$?
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/t2b" --quiet \
  --set 'trainer={type="sync_replicated"; nr_tower=2;}' --set dataflow.batch_size=4; rcb=$?
[ $rca = 0 ] && [ $rcb = 0 ] && equal "$T/t2a/$FINAL" "$T/t2b/$FINAL"
ok $? "2 towers: 2 and 0 prefetch workers give bitwise-equal parameters"
d=$(equal "$T/w0/$FINAL" "$T/t2b/$FINAL" 1e-5); s=$?
ok $s "2 towers of 4 equal 1 tower of 8 up to the reduction's rounding (max diff $d)"
if "$TOWERTRAIN" --version | grep -q mpi && command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/mpi" --quiet \
    --set 'trainer={type="sync_replicated"; nr_tower=1;}' --set dataflow.batch_size=4 --set dataflow.prefetch.workers=2 \
    >"$T/mpi.out" 2>&1; rc=$?
  d=$(equal "$T/t2b/$FINAL" "$T/mpi/$FINAL" 1e-5); s=$?
  ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "2 MPI ranks x 1 tower equal 1 process x 2 towers (max diff $d)"
else
  skip "image folder across MPI ranks" "built without MPI or no mpirun"
fi

# different sizes and no augment that fixes them: refused before anything is written
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/nofix" --set 'dataflow.augment=( { type = "flip"; } )' \
  >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 2 ] && [ "$(wc -l < "$T/err")" = 1 ] && grep -q "^towertrain: $T/train/ants/.* is [0-9]*x[0-9]* but .*need an augment that fixes the size" "$T/err" &&
  [ ! -e "$T/nofix" ]
ok $? "images of different sizes without resize/crop: exit 2, one line naming two files, no logdir ($(cat "$T/err"))"
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/small" --set 'dataflow.augment=( { type = "random_crop"; size = 30; } )' \
  >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "^towertrain: $T/train/.*: dataflow.augment\[0\]: random_crop size 30 is larger" "$T/err" && [ ! -e "$T/small" ]
ok $? "a random_crop larger than some image: exit 2 naming it ($(cat "$T/err"))"

# a file that does not decode, found by a prefetch worker
$PY -c '
import sys
b = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(b[:len(b) // 2])' "$T/train/bees/00.jpg" "$T/train/bees/00b.jpg"
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/cut" --set dataflow.prefetch.workers=2 >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 2 ] && [ "$(wc -l < "$T/err")" = 1 ] && grep -q "^towertrain: $T/train/bees/00b.jpg: corrupt or truncated JPEG" "$T/err"
ok $? "a truncated JPEG stops training: exit 2, one line naming it ($(cat "$T/err"))"
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/skip" --quiet --set dataflow.source.skip_corrupt=true \
  --set dataflow.prefetch.workers=2; rc=$?
[ $rc = 0 ] && [ "$(grep -c "skipping $T/train/bees/00b.jpg" "$T/skip/log.log")" = 1 ]
ok $? "skip_corrupt: trains, and log.log names the file once (rc $rc)"
printf 'GIF89a' > "$T/train/cats/zz.png"
printf 'BM' > "$T/train/cats/yy.bmp"
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/gif" --set dataflow.source.skip_corrupt=true >"$T/out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "skipped 1 file(s) that do not decode (skip_corrupt); the first: $T/train/cats/zz.png: not a JPEG or PNG file" "$T/gif/log.log"
ok $? "skip_corrupt: a file that is no image is left out at open, with a count in the log"
grep -q "image_folder $T/train: 1 .bmp/.ppm/.pgm/.tif/.tiff/.webp file(s) are not read" "$T/gif/log.log" &&
  grep -q "image_folder $T/train: 73 images in 3 classes (of different sizes)" "$T/gif/log.log"
ok $? "the log counts the images and classes, and says a .bmp torchvision would read is not read"
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/gif2" >"$T/out" 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "^towertrain: $T/train/cats/zz.png: not a JPEG or PNG file" "$T/err" && [ ! -e "$T/gif2" ]
ok $? "without skip_corrupt it is refused at open: exit 2, no logdir ($(cat "$T/err"))"
# dataflow.limit reads the headers of the images it uses only: the first 24
# (the ants) train, and cats/zz.png, past them, is never opened
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/lim" --quiet --set dataflow.limit=24 --set max_epoch=1 \
  --set 'callbacks=( )' >"$T/out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "image_folder $T/train: 24 images (dataflow.limit: the first of 74 files) in 3 classes" "$T/lim/log.log"
ok $? "dataflow.limit = 24: trains on the first 24 images, reading no header past them (rc $rc; $(grep -m1 'image_folder' "$T/lim/log.log" 2>/dev/null))"

# names with a newline in the log: escaped as err_set escapes them, one line each
cp -r "$T/train" "$T/nl"
mkdir "$T/nl/empty
class"
printf 'GIF89a' > "$T/nl/cats/bad
name.png"
rm -f "$T/nl/cats/zz.png"
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/nl-log" --set max_epoch=1 --set "dataflow.source.root=\"$T/nl\"" \
  --set dataflow.source.skip_corrupt=true --set 'callbacks=( )' >"$T/out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "keep their class index: 'empty\\\\x0aclass'$" "$T/nl-log/log.log" &&
  grep -q "the first: $T/nl/cats/bad\\\\x0aname.png: not a JPEG or PNG file$" "$T/nl-log/log.log" &&
  ! grep -q "^class\|^name.png" "$T/nl-log/log.log"
ok $? "a newline in a class folder's or file's name is escaped in the log (\\x0a), not a line break (rc $rc)"

tt_done
