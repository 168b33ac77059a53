#!/bin/sh
# End-to-end mixed precision on GPU towers (TAP). Without a GPU: bf16 and
# fp16 jobs on device "gpu" are refused as fp32 ones are (exit 2, one line,
# nothing written), and every GPU check is a visible SKIP. With a GPU:
# LeNet on Fashion-MNIST in bf16 and in fp16 reaches the fp32 runs'
# validation accuracy after 3 epochs (statistically, below); the tower table says what
# runs in which precision; bf16 is bitwise repeatable (deterministic =
# true); checkpoints stay F32 and resume across precisions; an fp16 overflow
# (TT_FAULT_GRAD) is logged once, and a resumed fp16 run goes on with the
# checkpoint's loss scale: it ends on the bits and the scale of the run
# that was never stopped.
. "$(dirname "$0")/../tt_lib.sh"
# make check hides the GPUs from the CPU tests (Makefile.am); these get them back
case ${TT_GPUS-all} in
  all) unset CUDA_VISIBLE_DEVICES ;;
  *) CUDA_VISIBLE_DEVICES=$TT_GPUS; export CUDA_VISIBLE_DEVICES ;;
esac

# the number of GPUs, as the CUDA backend sees them (0 without a driver)
GPUS=$("$TOWERTRAIN" bench --device gpu -b 8 -e 8 -n 1 -w 0 2>/dev/null | grep -c '^#  rank')

# the GPU kit (tests/gpu/kit.sh) brings its own copy of the data
DATA=${TT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
cat > "$T/lenet.cfg" <<EOF
seed = 11;
dataflow = {
  source = { type = "idx"; images = "$DATA/train-images-idx3-ubyte.gz";
             labels = "$DATA/train-labels-idx1-ubyte.gz"; };
  augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
  batch_size = 64; shuffle = true;
};
model = "$TT_SRCDIR/models/lenet.cfg";
optimizer = { type = "momentum"; learning_rate = 0.05; momentum = 0.9; };
trainer = { type = "simple"; device = "gpu"; };
max_epoch = 3;
callbacks = ( { type = "model_saver"; },
              { type = "inference_runner"; dataflow = {
                  source = { type = "idx"; images = "$DATA/t10k-images-idx3-ubyte.gz";
                             labels = "$DATA/t10k-labels-idx1-ubyte.gz"; };
                  augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
                  batch_size = 500; }; } );
monitors = ( "json" );
EOF

if [ "$GPUS" = 0 ]; then
  for p in bf16 fp16; do
    tt_refused "precision $p on device gpu without a GPU: exit 2, the no-GPU line, nothing written" \
      'towertrain: trainer.device = "gpu" but no GPU is available (' "$T/no$p" \
      "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/no$p" --set "trainer.precision=\"$p\""
  done
  for what in "LeNet in bf16 reaches the fp32 runs' accuracy" \
      "LeNet in fp16 (loss scaling) reaches the fp32 runs' accuracy" \
      "the tower table says what runs in bf16 and what in fp32" \
      "bf16 with deterministic = true: two runs give the same bits" \
      "checkpoints stay F32; a bf16 run resumes in fp32 and in fp16" \
      "an fp16 overflow is logged once, the step skipped" \
      "a resumed fp16 run goes on with the checkpoint's loss scale, on the uninterrupted run's bits"; do
    skip "$what" "no GPU here"
  done
  tt_done
fi

if [ ! -f $DATA/train-images-idx3-ubyte.gz ]; then
  skip "GPU mixed-precision training runs" "dataset-fashion-mnist not installed"
  tt_done
fi

# ---- accuracy: fp32, bf16, fp16 side by side ----
for p in fp32 bf16 fp16; do
  "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/$p" --set "trainer.precision=\"$p\"" \
    > "$T/$p.out" 2>&1
  ok $? "LeNet, 3 epochs of Fashion-MNIST on one GPU in $p: exit 0"
done
# bf16 and fp16 learn as fp32 does. Statistical (tt_lib.sh, tt_not_worse):
# the shipped Fashion-MNIST job (3 epochs) on the GPU, seeds 1-3 in each
# precision, the mean validation accuracy at most 0.0131 below fp32's: a
# correct precision fails it 1 time in 1,000 at most.
seeds() {
  for s in 1 2 3; do
    printf ' %s' "$(tt_fm_lenet "$T/fm-$1-$s" $s --set 'trainer.device="gpu"' --set "trainer.precision=\"$1\"")"
  done
}
acc_fp32=$(seeds fp32)
for p in bf16 fp16; do
  tt_not_worse "LeNet in $p reaches the fp32 runs' validation accuracy (Fashion-MNIST, 3 epochs, seeds 1-3)" \
    "$acc_fp32" "$(seeds $p)" 3
done
grep -q '^precision bf16: dense, conv2d in bf16 (fp32 accumulation); batchnorm, pooling, element-wise, softmax and loss, all-reduce, optimizer in fp32$' "$T/bf16.out" &&
  grep -q '^precision fp16: dense, conv2d in fp16 .*; dynamic loss scaling$' "$T/fp16.out" &&
  ! grep -q '^precision ' "$T/fp32.out"
ok $? "the tower table says what runs in which precision"
$PY -c 'import json,sys; s = json.load(open(sys.argv[1])); sys.exit(0 if all("loss_scale" in e for e in s) else 1)' "$T/fp16/stats.json"
ok $? "fp16 reports its loss scale every epoch (stats.json)"

# ---- bits: bf16 is repeatable ----
short="--set max_epoch=1 --set dataflow.limit=4096 --set callbacks=(\"model_saver\")"
"$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/b1" --set 'trainer.precision="bf16"' $short > /dev/null 2>&1
"$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/b2" --set 'trainer.precision="bf16"' $short > /dev/null 2>&1
tt_same "$T/b1/model-64.safetensors" "$T/b2/model-64.safetensors" 0 optimizer >/dev/null
ok $? "bf16 with deterministic = true: two GPU runs give the same bits (parameters and optimizer state)"

# ---- checkpoints stay F32; resume across precisions ----
"$TOWERTRAIN" resume "$T/b1" --max-epoch 2 --set 'trainer.precision="fp32"' > /dev/null 2>&1 &&
  [ -f "$T/b1/model-128.safetensors" ] &&
  "$TOWERTRAIN" resume "$T/b2" --max-epoch 2 --set 'trainer.precision="fp16"' > /dev/null 2>&1 &&
  [ -f "$T/b2/model-128.safetensors" ] &&
  $PY - "$T/b1/model-64.safetensors" "$T/b2/model-128.safetensors" <<'PYEOF'
import json, struct, sys
for path in sys.argv[1:]:
    b = open(path, "rb").read()
    head = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
    types = {v["dtype"] for k, v in head.items() if k != "__metadata__" and not k.endswith("num_batches_tracked")}
    assert types == {"F32"}, (path, types)
PYEOF
ok $? "checkpoints stay F32; a bf16 run resumes in fp32 and in fp16"

# ---- fp16: an overflow, then resume with the checkpoint's scale ----
# A: 2 epochs straight; B: 1 epoch, then resumed for the second. Both
# overflow at step 5 (TT_FAULT_GRAD).
fp16="--set trainer.precision=\"fp16\" --set dataflow.limit=2048 --set callbacks=(\"model_saver\")"
TT_FAULT_GRAD=5 "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/hA" $fp16 --set max_epoch=2 > "$T/hA.out" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(grep -c 'global step 5: gradients hold Inf or NaN at loss scale .*: update skipped, loss scale now ' "$T/hA.out")" = 1 ]
ok $? "an fp16 overflow at step 5 is logged once, the update skipped, the run goes on (exit $rc)"
TT_FAULT_GRAD=5 "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/hB" $fp16 --set max_epoch=1 > /dev/null 2>&1 &&
  "$TOWERTRAIN" resume "$T/hB" --max-epoch 2 > "$T/hB.out" 2>&1
rc=$?
[ $rc = 0 ] && $PY - "$T/hA" "$T/hB" <<'PYEOF'
import sys
import tt_safetensors as st
a32, ma32 = st.load(sys.argv[1] + "/model-32.safetensors")
b32, mb32 = st.load(sys.argv[2] + "/model-32.safetensors")
a64, ma64 = st.load(sys.argv[1] + "/model-64.safetensors", optimizer=True)
b64, mb64 = st.load(sys.argv[2] + "/model-64.safetensors", optimizer=True)
# the first epoch overflowed at least once (step 5): the scale is below 2^16
assert float(mb32["loss_scale"]) < 65536, mb32
assert (mb32["loss_scale"], mb32["loss_scale_good_steps"]) == (ma32["loss_scale"], ma32["loss_scale_good_steps"]), (ma32, mb32)
# the resumed epoch went on from there: the same scale and count of clean steps
assert (mb64["loss_scale"], mb64["loss_scale_good_steps"]) == (ma64["loss_scale"], ma64["loss_scale_good_steps"]), (ma64, mb64)
assert int(mb64["loss_scale_good_steps"]) > int(mb32["loss_scale_good_steps"]) or float(mb64["loss_scale"]) != float(mb32["loss_scale"])
bad = [k for k in a64 if a64[k].tobytes() != b64[k].tobytes()]
assert not bad, bad
PYEOF
ok $? "a resumed fp16 run goes on with the checkpoint's loss scale and ends on the uninterrupted run's bits and scale (exit $rc)"
tt_done
