#!/bin/sh
# e2e_sim_grad16.sh - bf16 activation gradients on a simulated GPU (TAP):
# towers in bf16 keep the gradients of their bf16 NHWC activations in bf16
# (precision.h's rule, sim_grad16.c; TT_BF16_GRADS=0 keeps them float32).
# Both checks compare a run with bf16 gradients to one without, at the same
# seed, through the binary; both are statistical, each with at most 1
# false failure in 2,000, so at most 1 in 1,000 together.
#
# 1. Rounding, never truncation (paired, as tt_lib.sh's tt_grad_size): the
#    first step of ResNet-20 (models/resnet20.cfg, fake data, batch 32) from
#    the same weights and batch, with and without bf16 gradients; its
#    update w0 - w1 over every weight and bias differs only by the rounding
#    of each stored gradient, so r = |update_bf16| / |update_fp32| - 1
#    centres on 0. Over seeds 1-40 on sim (AMD EPYC Zen 5): mean m0 =
#    -0.000021, sd 0.000098; 80% upper bound of the sd on 39 degrees of
#    freedom 0.000109, standard error of m0 0.000016. Over 6 seeds the mean
#    must lie within m0 +- (3.48 x 0.000109 / sqrt(6) + 2 x 0.000016) =
#    m0 +- 0.000186 (3.48: two-sided normal, 1 in 2,000; 2 SE leaves room
#    for m0's own error). Gradients truncated instead of rounded (sim's
#    stores made to drop the low half of the float) gave -0.0213 over seeds
#    1-6, and truncated to 3 mantissa bits -0.31: far outside.
# 2. Accuracy (tt_lib.sh's tt_not_worse): a one-block residual net (below:
#    conv, batchnorm, relu, a residual block whose add is fused into its
#    batchnorm, max pooling, dense; every one of those backward passes
#    stores a bf16 gradient) trained on Fashion-MNIST as tt_fm_lenet does,
#    2 epochs of its first 12,000 images at learning rate 0.02, seed 1,
#    with and without bf16 gradients, the validation accuracies compared.
#    Measured over seeds 1-30 on sim (AMD EPYC Zen 5): each run's accuracy
#    sd 0.0075 (mean 0.842 either way), but with and without bf16 gradients
#    at the same seed the runs stay paired: their difference has mean
#    -0.0002 and sd 0.0038, 80% upper bound 0.0044 on 29 degrees of
#    freedom. tt_not_worse (whose z is 3.09) with sigma = 3.29 / 3.09 x
#    0.0044 / sqrt(2) = 0.0033 fails below 3.29 x 0.0044 = 0.0145,
#    one-sided: 1 false failure in 2,000 at most (3.29), valid for runs
#    paired so (the same job at the same seed).
. "$(dirname "$0")/tt_lib.sh"

# ---- 1. the first step's update: rounding, never truncation ----
cat >"$T/res.cfg" <<CFG
model = "$TT_SRCDIR/models/resnet20.cfg";
dataflow = { source = { type = "fake"; shape = [3, 32, 32]; classes = 10; size = 32; };
             batch_size = 32; };
optimizer = { type = "momentum"; learning_rate = 0.05; momentum = 0.9; };
trainer = { type = "simple"; device = "sim"; precision = "bf16"; };
max_epoch = 1;
CFG
why=""
step() { # DIR SEED TT_BF16_GRADS LR
  TT_BF16_GRADS=$3 "$TOWERTRAIN" run "$T/res.cfg" --logdir "$1" --quiet --set seed=$2 \
    --set steps_per_epoch=1 --set optimizer.learning_rate=$4 --set optimizer.weight_decay=0 \
    --set 'callbacks=( { type = "model_saver"; max_to_keep = 0; } )' --set 'monitors=( )' \
    >"$1.out" 2>&1 || why="$why $1 failed;"
}
for s in 1 2 3 4 5 6; do
  step "$T/g-w0-$s" $s 1 1e-30
  step "$T/g-on-$s" $s 1 0.02
  step "$T/g-off-$s" $s 0 0.02
done
size=$($PY - "$T/g" -0.000021 0.000109 0.000016 1 2 3 4 5 6 2>&1 <<'PYEOF'
import sys
import numpy as np
from tt_safetensors import load
pre = sys.argv[1]
m0, s, se = (float(v) for v in sys.argv[2:5])
def w(kind, seed):
    t = load("%s-%s-%s/model-1.safetensors" % (pre, kind, seed))[0]
    return np.concatenate([t[k].astype(np.float64).ravel() for k in sorted(t)
                           if k.endswith((".weight", ".bias"))])
r = []
for seed in sys.argv[5:]:
    w0 = w("w0", seed)
    r.append(np.linalg.norm(w0 - w("on", seed)) / np.linalg.norm(w0 - w("off", seed)) - 1)
margin = 3.48 * s / len(r) ** 0.5 + 2 * se
mean = float(np.mean(r))
print("mean %+.6f, allowed %+.6f..%+.6f; seeds %s" % (mean, m0 - margin, m0 + margin,
                                                      " ".join("%+.6f" % v for v in r)))
sys.exit(0 if abs(mean - m0) <= margin else 1)
PYEOF
) || why="$why outside;"
ok $([ -z "$why" ]; echo $?) "ResNet-20 on sim: bf16 gradients round, never truncate: step 1's update has the float32-gradient update's size (|u| / |u_fp32| - 1: $size;$why)"

# ---- 2. accuracy ----
DATA=${TT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  skip "a residual net learns with bf16 gradients as without" "dataset-fashion-mnist not installed"
  tt_done
fi
cat >"$T/resfm.cfg" <<'CFG'
input = [1, 28, 28];
classes = 10;
layers = (
  { name = "conv0"; type = "conv2d"; filters = 16; kernel = 3; stride = 2; padding = 1; bias = false; },
  { name = "bn0"; type = "batchnorm"; },
  { name = "relu0"; type = "relu"; },
  { name = "b_conv1"; type = "conv2d"; filters = 16; kernel = 3; padding = 1; bias = false; },
  { name = "b_bn1"; type = "batchnorm"; },
  { name = "b_relu1"; type = "relu"; },
  { name = "b_conv2"; type = "conv2d"; filters = 16; kernel = 3; padding = 1; bias = false; },
  { name = "b_bn2"; type = "batchnorm"; },
  { name = "b_add"; type = "add"; inputs = ["b_bn2", "relu0"]; },
  { name = "b_out"; type = "relu"; },
  { name = "pool"; type = "maxpool"; kernel = 2; },
  { name = "fc"; type = "dense"; units = 10; }
);
loss = "softmax_cross_entropy";
CFG
acc() { # TT_BF16_GRADS; a run that fails shows its last lines
  TT_BF16_GRADS=$1 tt_fm_lenet "$T/acc-$1" 1 --set 'trainer.device="sim"' \
    --set 'trainer.precision="bf16"' --set "model=\"$T/resfm.cfg\"" \
    --set optimizer.learning_rate=0.02 --set max_epoch=2 --set dataflow.limit=12000 ||
    tail -n 3 "$T/acc-$1.out" | sed 's/^/# /' >&2
}
tt_not_worse "a residual net on sim learns with bf16 gradients as with float32 ones (Fashion-MNIST, 2 epochs of 12,000 images, seed 1)" \
  "$(acc 0)" "$(acc 1)" 1 0.0033
tt_done
