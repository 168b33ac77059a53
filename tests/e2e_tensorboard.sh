#!/bin/sh
# End-to-end: TensorBoard reads towertrain's log directory (TAP). A run of
# 2 epochs resumed to 3 (two event files), with validation, per-step
# grad_norm and parameter histograms; then TensorBoard's EventAccumulator and
# its own server check every scalar and histogram against stats.json and
# the checkpoint (tests/tensorboard_check.py). TensorBoard comes from PyPI
# (tests/tt_venv.sh): where PyPI is unreachable the checks SKIP, saying why.
. "$(dirname "$0")/tt_lib.sh"
checks="EventAccumulator and TensorBoard's server read the run"
tt_venv_python TensorBoard "$checks"
cat > "$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/mlp.cfg";
dataflow = { source = { type = "fake"; shape = [784]; classes = 10; size = 640; }; batch_size = 32; };
optimizer = { type = "momentum"; learning_rate = 0.01; momentum = 0.9; clip_global_norm = 5.0; };
max_epoch = 3;
callbacks = (
  { type = "inference_runner";
    dataflow = { source = { type = "fake"; shape = [784]; classes = 10; size = 96; };
                 batch_size = 32; }; },
  "throughput", "model_saver" );
monitors = ( { type = "events"; every_k_steps = 5; histograms = true; }, "json" );
CFG
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/log" --quiet --set max_epoch=2 &&
  "$TOWERTRAIN" resume "$T/log" --max-epoch 3 --quiet
ok $? "a run of 2 epochs resumed to 3, events every 5 steps with histograms"
n_files=$(ls "$T/log" | grep -c '^events\.out\.tfevents\.')
[ "$n_files" = 2 ]
ok $? "the resumed run has 2 event files ($n_files)"
"$vpy" "$TT_SRCDIR/tests/tensorboard_check.py" "$T/log" >"$T/checks" 2>&1
tt_tap "$T/checks" $?
tt_done
