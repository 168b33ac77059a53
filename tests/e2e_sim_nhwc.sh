#!/bin/sh
# e2e_sim_nhwc.sh - bf16 activations in NHWC on a simulated GPU (TAP): what
# a CUDA tower in bf16 keeps between layers (precision.c's prec_layout_of:
# bf16 NHWC; sim_blocked.c), through the binary. ResNet-20
# (models/resnet20.cfg) on fake data, 2 epochs of 2 steps, on sim in fp32 and
# in bf16 (and in bf16 with TT_BF16_GRADS=0): all finish with finite
# losses near each other, and the bf16 tower's peak_device_memory_mb is at
# most 0.60x the fp32 tower's, issue 36's target (measured 0.574 at batch
# 64: bf16 activations and their bf16 gradients (sim_grad16.c),
# forward-only activations sharing buffers (model.c), the 16-bit copies
# counted at 16 bits, the weights' copies made once per step (0.52 MB),
# and the copies' region sized by the tower's layout (device_towers.c: a
# blocked side with bf16 gradients needs no place; 0.602 before)). With
# float32 activation gradients (TT_BF16_GRADS=0) it is 0.663, and must
# stay above the bf16-gradient run's; before the bf16 layout, bf16 took
# 1.05x fp32's, its 16-bit copies on top of float32 activations. What
# remains is mostly the CPU convolutions' workspace sim reports (12.7 MB,
# in both precisions).
. "$(dirname "$0")/tt_lib.sh"

cat >"$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/resnet20.cfg";
dataflow = { source = { type = "fake"; shape = [3, 32, 32]; classes = 10; size = 128; };
             batch_size = 64; };
optimizer = { type = "momentum"; learning_rate = 0.05; momentum = 0.9; };
trainer = { type = "simple"; device = "sim"; };
max_epoch = 2;
callbacks = ( "peak_memory" );
monitors = ( "json" );
CFG
rc=0
for p in fp32 bf16 bf16-f32grads; do
  prec=$p grads=1
  [ $p = bf16-f32grads ] && prec=bf16 grads=0
  TT_BF16_GRADS=$grads "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/$p" --quiet \
    --set "trainer.precision=\"$prec\"" >"$T/$p.out" 2>&1 || { rc=1; cat "$T/$p.out"; }
done
ok $rc "ResNet-20 trains 2 epochs on sim in fp32, in bf16 (NHWC bf16 activations and gradients) and with TT_BF16_GRADS=0"

# The runs are deterministic (same seed, same bits every time), and so is
# every allocation, so the margins are not statistical: the bf16 losses
# measured within 5e-4 of fp32's, held to 2e-2 (a misread layout or a bf16
# tensor read as float32 gives nonsense or NaN); the ratio measured 0.574,
# held to 0.60 (the issue's target; the allocations being the same every
# run), and 0.663 with float32 gradients, which must exceed it by at least
# the gradient buffers' halving (measured 0.089, held to 0.03).
$PY - "$T/fp32/stats.json" "$T/bf16/stats.json" "$T/bf16-f32grads/stats.json" >"$T/check" 2>&1 <<'PYEOF'
import json, math, sys
f, b, g = (json.load(open(p)) for p in sys.argv[1:4])
assert len(f) == len(b) == len(g) == 2, (f, b, g)
for ef, eb, eg in zip(f, b, g):
    lf = ef["train_loss"]
    for l in eb["train_loss"], eg["train_loss"]:
        assert math.isfinite(l) and abs(l - lf) < 2e-2 * abs(lf), (lf, l)
pf, pb, pg = (s[-1]["peak_device_memory_mb/0"] for s in (f, b, g))
print("losses %s / %s; peak %.1f / %.1f MiB = %.3f (float32 gradients: %.1f MiB = %.3f)" % (
    [e["train_loss"] for e in f], [e["train_loss"] for e in b], pb, pf, pb / pf, pg, pg / pf))
assert pb <= 0.60 * pf, (pb, pf)
assert pg / pf - pb / pf >= 0.03, (pg, pb, pf)
PYEOF
ok $? "bf16 on sim: losses within 2e-2 of fp32's; peak_device_memory_mb at most 0.60x fp32's, and below the float32-gradient run's ($(tail -1 "$T/check"))"
# The device switches refuse a value they do not know (it must not
# silently mean the default): one line naming the variable, exit 2, no
# log directory.
for v in TT_CUDA_LAYOUT=nhcw TT_BF16_GRADS=off TT_ACT_SHARING=no TT_CUDNN_LEGACY=yes; do
  tt_refused "$v: one line, exit 2, nothing written" "${v%%=*}=${v#*=}: use" "$T/bad" \
    env "$v" "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/bad" --quiet --set 'trainer.precision="bf16"'
done
tt_done
