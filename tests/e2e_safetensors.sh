#!/bin/sh
# End-to-end: the reference safetensors library (PyPI) reads every kind of
# checkpoint towertrain writes, seeing what towertrain's own reader sees,
# and refuses the damaged files ours refuses (TAP;
# tests/safetensors_check.py). The kinds: an fp32 run with momentum's slot
# at an epoch's end; a bf16 run (where the CPU runs bf16) with Adam's two
# slots and 2 towers, saved mid-epoch, so with each replica's batchnorm
# statistics; every one with its metadata. Without PyPI the checks SKIP,
# saying why.
. "$(dirname "$0")/tt_lib.sh"
: "${TT_BUILDDIR:?}"
checks="the safetensors library reads towertrain's checkpoints as towertrain does"
tt_venv_python "safetensors library" "$checks"
cat > "$T/mlp.cfg" <<CFG
model = "$TT_SRCDIR/models/mlp.cfg";
dataflow = { source = { type = "fake"; shape = [784]; classes = 10; size = 256; }; batch_size = 32; };
optimizer = { type = "momentum"; learning_rate = 0.01; momentum = 0.9; };
max_epoch = 2;
callbacks = ( "model_saver" );
CFG
"$TOWERTRAIN" run "$T/mlp.cfg" --logdir "$T/fp32" --quiet
ok $? "an fp32 MLP run with momentum, saved at each epoch's end"
tt_bn_job "$T/bn.cfg" 'type = "adam"; learning_rate = 0.01;' 1 \
  '( { type = "model_saver"; max_to_keep = 0; },
     { type = "model_saver"; every_k_steps = 5; max_to_keep = 0; } )'
kinds="fp32/momentum=$T/fp32/model-16.safetensors"
if tt_bf16_here; then
  "$TOWERTRAIN" run "$T/bn.cfg" --logdir "$T/bf16" --quiet --set 'trainer.precision="bf16"'
  ok $? "a bf16 run with Adam and 2 towers, batchnorm, saved every 5 steps"
  kinds="$kinds bf16/adam/replicas=$T/bf16/model-5.safetensors"
else
  skip "a bf16 run with Adam and 2 towers" "this CPU runs no bf16 (towertrain --version)"
fi
"$TOWERTRAIN" run "$T/bn.cfg" --logdir "$T/f32bn" --quiet
ok $? "an fp32 run with Adam and 2 towers, batchnorm, saved every 5 steps"
kinds="$kinds fp32/adam/replicas=$T/f32bn/model-10.safetensors fp32/adam=$T/f32bn/model-16.safetensors"
mkdir "$T/work"
# shellcheck disable=SC2086 # kinds: words without spaces ($T has none)
"$vpy" "$TT_SRCDIR/tests/safetensors_check.py" "$TT_BUILDDIR/tests/tt_stdump" "$T/work" $kinds \
  >"$T/checks" 2>&1
tt_tap "$T/checks" $?
tt_done
