#!/bin/sh
# End-to-end: trainer.precision (TAP). A precision the towers' backend cannot
# run is refused with one line and exit 2, before anything is written: never a
# silent fp32 run.
: "${TOWERTRAIN:?}" "${TT_SRCDIR:?}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi; }

JOB=$TT_SRCDIR/jobs/fashion_mnist_mlp.cfg
# refused: one line on stderr naming the key, exit 2, no log directory
refused() {
  want=$1; shift
  out=$("$TOWERTRAIN" run "$JOB" --logdir "$T/run" --quiet "$@" 2>&1 >/dev/null); rc=$?
  [ $rc = 2 ] && [ "$(printf '%s\n' "$out" | grep -c .)" = 1 ] &&
    printf '%s' "$out" | grep -q "^towertrain: .*$want" && [ ! -e "$T/run" ]
}

refused 'trainer.precision = "fp16" runs on GPU towers only' --set 'trainer.precision="fp16"' \
  --set 'trainer.device="cpu"'
ok $? "fp16 on CPU towers: one line, exit 2, nothing written"
refused "unknown value 'fp8'" --set 'trainer.precision="fp8"'
ok $? "an unknown precision: one line, exit 2"
"$TOWERTRAIN" validate "$JOB" | grep -q 'precision = "fp32";'
ok $? "the default precision is fp32, written into the resolved job"

echo "1..$n"
exit $failed
