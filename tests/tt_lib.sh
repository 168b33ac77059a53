# tt_lib.sh - what the end-to-end scripts share. Each sources it first:
#   . "$(dirname "$0")/tt_lib.sh"
# It gives them
#   ok STATUS DESCRIPTION, skip DESCRIPTION REASON, tt_done: TAP lines, the
#       count and the plan (the exit status says whether a check failed);
#   tt_tap FILE STATUS: the checks a python script printed (with
#       tests/tt_tap.py's ok and skip), counted in;
#   tt_refused DESCRIPTION TEXT LOGDIR COMMAND...: the check of a command
#       that must be refused as bad input is;
#   tt_same A B TOL [optimizer]: every tensor of two checkpoints within TOL
#       (max |a - b| / max |a| per tensor; TOL 0: bit for bit), the optimizer
#       state too when asked; prints the worst (tests/tt_safetensors.py);
#   $PY: the python3 to run (numpy, torch): $PYTHON3, which make check sets
#       from configure (it looks in /usr/bin first), else /usr/bin/python3;
#       its scripts can import tests/tt_safetensors.py (PYTHONPATH);
#   $T: a fresh temporary directory, removed when the script exits.
# make check exports $TOWERTRAIN (the binary), $TT_SRCDIR and $TT_BUILDDIR
# (the trees); to run a script by hand, set them as it does.

if [ -z "${TOWERTRAIN:-}" ] || [ ! -x "$TOWERTRAIN" ] || [ -z "${TT_SRCDIR:-}" ]; then
  echo "Bail out! set \$TOWERTRAIN (the towertrain binary) and \$TT_SRCDIR (the source tree), as make check does"
  exit 99
fi
PY=${PYTHON3:-/usr/bin/python3}
PYTHONPATH="$TT_SRCDIR/tests${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
T=$(mktemp -d "${TMPDIR:-/tmp}/tt_e2e.XXXXXX") || exit 99
trap 'rm -rf "$T"' EXIT
n=0
failed=0

# ok STATUS DESCRIPTION: one TAP line, "ok" when STATUS is 0.
ok() {
  n=$((n + 1))
  if [ "$1" = 0 ]; then
    echo "ok $n - $2"
  else
    echo "not ok $n - $2"
    failed=1
  fi
}

# skip DESCRIPTION REASON: a check that cannot run here, visibly.
skip() {
  n=$((n + 1))
  echo "ok $n - $1 # SKIP $2"
}

# tt_done: the plan, then exit 1 if a check failed, else 0.
tt_done() {
  echo "1..$n"
  exit $failed
}

# tt_tap FILE STATUS: FILE holds what a python check script printed (stdout
# and stderr), one "ok - WHAT" or "not ok - WHAT" line per check; they are
# numbered on here, other lines pass as diagnostics. STATUS is the script's
# exit status: a script that died fails one more check, so that the checks
# it never reached cannot pass unseen.
tt_tap() {
  while IFS= read -r tt_line; do
    case $tt_line in
      "ok - "*) ok 0 "${tt_line#ok - }" ;;
      "not ok - "*) ok 1 "${tt_line#not ok - }" ;;
      "#"*) echo "$tt_line" ;;
      *) echo "# $tt_line" ;;
    esac
  done <"$1"
  [ "$2" = 0 ] || ok 1 "the python checks ran to their end (exit status $2)"
}

# tt_refused DESCRIPTION TEXT LOGDIR COMMAND...: runs COMMAND, which must be
# refused as bad input is: exit status 2, exactly one line on stderr that
# starts "towertrain: " and holds TEXT (a fixed string; a TEXT that itself
# starts "towertrain: " must start the line), nothing on stdout, and LOGDIR
# not created ("" when there is none to check). One TAP line; what went
# wrong follows it as diagnostics.
tt_refused() {
  tt_desc=$1 tt_text=$2 tt_logdir=$3
  shift 3
  "$@" >"$T/refused.out" 2>"$T/refused.err"
  tt_rc=$?
  tt_why=""
  tt_lines=$(wc -l <"$T/refused.err")
  tt_first=$(head -n 1 "$T/refused.err")
  [ "$tt_rc" -eq 2 ] || tt_why="$tt_why exit status $tt_rc, not 2;"
  [ "$tt_lines" -eq 1 ] || tt_why="$tt_why stderr has $tt_lines lines, not 1;"
  case $tt_first in
    "towertrain: "*) ;;
    *) tt_why="$tt_why stderr does not start with 'towertrain: ';" ;;
  esac
  case $tt_text in
    "towertrain: "*) case $tt_first in "$tt_text"*) ;; *) tt_why="$tt_why stderr does not start with '$tt_text';" ;; esac ;;
    *) case $tt_first in *"$tt_text"*) ;; *) tt_why="$tt_why stderr lacks '$tt_text';" ;; esac ;;
  esac
  [ -s "$T/refused.out" ] && tt_why="$tt_why stdout is not empty;"
  [ -n "$tt_logdir" ] && [ -e "$tt_logdir" ] && tt_why="$tt_why the log directory was created;"
  if [ -z "$tt_why" ]; then
    ok 0 "$tt_desc"
  else
    ok 1 "$tt_desc"
    echo "#$tt_why"
    sed 's/^/# stderr: /' "$T/refused.err" | head -n 5
  fi
}

tt_same() {
  $PY "$TT_SRCDIR/tests/tt_safetensors.py" same "$@"
}

# tt_loss_close REF_STATS GOT_STATS: prints GOT's train loss by epoch; true
# when both runs have 3 epochs, GOT's loss falls from epoch 1 to 3 and each
# epoch's is within 1% of REF's (16-bit training against its fp32 run)
tt_loss_close() {
  $PY -c 'import json, sys
ref = [e["train_loss"] for e in json.load(open(sys.argv[1]))]
got = [e["train_loss"] for e in json.load(open(sys.argv[2]))]
print(" ".join("%.4f" % x for x in got), end="")
sys.exit(0 if len(got) == len(ref) == 3 and got[2] < got[0] and
         all(abs(g - r) <= 0.01 * r for g, r in zip(got, ref)) else 1)' "$1" "$2"
}

# tt_lenet_job FILE SEED LIMIT EPOCHS TEST_LIMIT: writes a LeNet job on
# Fashion-MNIST ($TT_FASHION_MNIST, else /usr/share/datasets/fashion-mnist;
# the GPU kit brings its own) to FILE: normalised images, the first LIMIT
# training images, batch 64, momentum SGD (lr 0.02, momentum 0.9), simple on
# device "gpu", EPOCHS epochs, every checkpoint kept, validated after each
# epoch on the first TEST_LIMIT test images (0: all), json monitor. Change
# it with --set (trainer, device, seed...).
tt_lenet_job() {
  tt_data=${TT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
  cat >"$1" <<TTEOF
seed = $2;
dataflow = {
  source = { type = "idx"; images = "$tt_data/train-images-idx3-ubyte.gz";
             labels = "$tt_data/train-labels-idx1-ubyte.gz"; };
  augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
  batch_size = 64; limit = $3; shuffle = true;
};
model = "$TT_SRCDIR/models/lenet.cfg";
optimizer = { type = "momentum"; learning_rate = 0.02; momentum = 0.9; };
trainer = { type = "simple"; device = "gpu"; };
max_epoch = $4;
callbacks = ( { type = "model_saver"; max_to_keep = 0; },
              { type = "inference_runner"; dataflow = {
                  source = { type = "idx"; images = "$tt_data/t10k-images-idx3-ubyte.gz";
                             labels = "$tt_data/t10k-labels-idx1-ubyte.gz"; };
                  augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
                  batch_size = 500; limit = $5; }; } );
monitors = ( "json" );
TTEOF
}
