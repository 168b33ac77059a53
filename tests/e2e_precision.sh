#!/bin/sh
# End-to-end: trainer.precision (TAP). A precision the towers' backend cannot
# run is refused with one line and exit 2, before anything is written: never a
# silent fp32 run.
. "$(dirname "$0")/tt_lib.sh"

JOB=$TT_SRCDIR/jobs/fashion_mnist_mlp.cfg
tt_refused "fp16 on CPU towers: one line, exit 2, nothing written" \
  'trainer.precision = "fp16" runs on GPU towers only' "$T/run" \
  "$TOWERTRAIN" run "$JOB" --logdir "$T/run" --quiet --set 'trainer.precision="fp16"' \
  --set 'trainer.device="cpu"'
tt_refused "an unknown precision: one line, exit 2" "unknown value 'fp8'" "$T/run" \
  "$TOWERTRAIN" run "$JOB" --logdir "$T/run" --quiet --set 'trainer.precision="fp8"'
"$TOWERTRAIN" validate "$JOB" | grep -q 'precision = "fp32";'
ok $? "the default precision is fp32, written into the resolved job"

tt_done
