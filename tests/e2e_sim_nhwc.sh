#!/bin/sh
# e2e_sim_nhwc.sh - bf16 activations in NHWC on a simulated GPU (TAP): what
# a CUDA tower in bf16 keeps between layers (precision.c's prec_layout_of:
# bf16 NHWC; sim_blocked.c), through the binary. ResNet-20
# (models/resnet20.cfg) on fake data, 2 epochs of 2 steps, on sim in fp32 and
# in bf16: both finish with finite losses near each other, and the bf16
# tower's peak_device_memory_mb is at most 0.67x the fp32 tower's (measured
# 0.663 at batch 64: bf16 activations, forward-only activations sharing
# buffers (model.c), the 16-bit copies counted at 16 bits, 0.52 MB of them
# the weights' copies made once per step (0.659 before them); before this
# layout bf16 took 1.05x fp32's, its 16-bit copies on top of float32
# activations). Issue 36 asks 0.6x: the rest is the float32 gradient
# buffers (12.6 of the 88 MB) and the CPU convolutions' workspace sim
# reports (12.7 MB, in both), which 16-bit gradients would halve.
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
for p in fp32 bf16; do
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/$p" --quiet \
    --set "trainer.precision=\"$p\"" >"$T/$p.out" 2>&1 || { rc=1; cat "$T/$p.out"; }
done
ok $rc "ResNet-20 trains 2 epochs on sim in fp32 and in bf16 (NHWC bf16 activations)"

# The runs are deterministic (same seed, same bits every time), so the
# margins are not statistical: the bf16 losses measured within 2e-4 of
# fp32's, held to 2e-2 (a misread layout or a bf16 tensor read as float32
# gives nonsense or NaN); the ratio measured 0.663, held to 0.67.
$PY - "$T/fp32/stats.json" "$T/bf16/stats.json" >"$T/check" 2>&1 <<'PYEOF'
import json, math, sys
f, b = (json.load(open(p)) for p in sys.argv[1:3])
assert len(f) == len(b) == 2, (f, b)
for ef, eb in zip(f, b):
    lf, lb = ef["train_loss"], eb["train_loss"]
    assert math.isfinite(lb) and abs(lb - lf) < 2e-2 * abs(lf), (lf, lb)
pf, pb = f[-1]["peak_device_memory_mb/0"], b[-1]["peak_device_memory_mb/0"]
print("losses %s / %s; peak %.1f / %.1f MiB = %.3f" % (
    [e["train_loss"] for e in f], [e["train_loss"] for e in b], pb, pf, pb / pf))
assert pb <= 0.67 * pf, (pb, pf)
PYEOF
ok $? "bf16 on sim: losses within 2e-2 of fp32's; peak_device_memory_mb at most 0.67x fp32's ($(tail -1 "$T/check"))"
tt_done
