#!/bin/sh
# models/resnet50.cfg is torchvision's resnet50 (TAP): a towertrain
# checkpoint of it loads into torchvision.models.resnet50() with
# load_state_dict(strict=True) (every name and shape torchvision's), and the
# two give the same eval-mode logits: Debian's torchvision 0.14, and PyPI's
# 0.29 where the bench's venv holds it (bench/torch_peer.py; else SKIP).
# jobs/imagenet_resnet50.cfg is a valid job whose learning rate follows Goyal
# et al. for its global batch, refused with one line naming the directory
# where the images are missing.
#
# To stay fast on 2 cores the model runs at 64 x 64 (the shapes of its
# tensors do not depend on the resolution; torchvision pools adaptively):
# 2 steps of momentum SGD on 8 fake images move every batchnorm's running
# statistics away from 0 / 1, so the eval-mode comparison uses them.
. "$(dirname "$0")/tt_lib.sh"
: "${TT_BUILDDIR:?}"

if ! $PY -c "import torch, torchvision" 2>/dev/null; then
  skip "resnet50 checkpoint into torchvision.models.resnet50 (strict)" "python3 torch/torchvision not installed"
  skip "jobs/imagenet_resnet50.cfg: Goyal et al.'s schedule for its global batch" "python3 torch/torchvision not installed"
  tt_done
fi

sed 's/^input = \[3, 224, 224\];$/input = [3, 64, 64];/' "$TT_SRCDIR/models/resnet50.cfg" >"$T/resnet50.cfg"
grep -q '^input = \[3, 64, 64\];$' "$T/resnet50.cfg"
ok $? "models/resnet50.cfg declares a 3 x 224 x 224 input (rewritten to 64 x 64 here)"

cat > "$T/job.cfg" <<CFG
seed = 3;
model = "$T/resnet50.cfg";
dataflow = { source = { type = "fake"; shape = [3, 64, 64]; classes = 1000; size = 8; };
             batch_size = 4; prefetch = { workers = 0; }; };
optimizer = { type = "momentum"; learning_rate = 0.01; momentum = 0.9; weight_decay = 0.0001; };
trainer = { type = "simple"; device = "cpu"; };
max_epoch = 1;
callbacks = ( "model_saver" );
monitors = ( "json" );
CFG
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/run" --quiet >"$T/run.out" 2>&1
ok $? "ResNet-50 at 64 x 64: 2 steps on fake data on the CPU, exit 0"

$PY - "$T/x.f32" <<'PYEOF'
import sys, numpy as np
np.random.default_rng(5).standard_normal((2, 3, 64, 64)).astype("<f4").tofile(sys.argv[1])
PYEOF
ckpt="$T/run/$(head -1 "$T/run/checkpoint" 2>/dev/null)"
# torchvision_check PYTHON OUT: the checkpoint into that python's
# torchvision resnet50(), strict, and its eval logits against ours
torchvision_check() {
  "$1" - "$ckpt" "$T/x.f32" "$T/ours.f32" >"$2" 2>&1 <<'PYEOF'
import sys, warnings
warnings.filterwarnings("ignore")
import numpy as np, torch, torchvision
from tt_safetensors import load
ckpt, xfile, ours = sys.argv[1:4]
v = "torch %s, torchvision %s" % (torch.__version__, torchvision.__version__)
state = {k: torch.from_numpy(v.copy()) for k, v in load(ckpt)[0].items()}
net = torchvision.models.resnet50()
want_keys = set(net.state_dict())
print("keys: %d ours, %d torchvision, %d only ours, %d only torchvision"
      % (len(state), len(want_keys), len(set(state) - want_keys), len(want_keys - set(state))))
net.load_state_dict(state, strict=True)
print("ok - %s: the checkpoint loads into torchvision.models.resnet50() with "
      "load_state_dict(strict=True)" % v)
net.eval()
x = torch.from_numpy(np.fromfile(xfile, dtype="<f4").reshape(2, 3, 64, 64))
with torch.no_grad():
    want = net(x).double().numpy()
got = np.fromfile(ours, dtype="<f4").reshape(want.shape)
err = np.max(np.abs(got - want)) / max(1.0, np.max(np.abs(want)))
moved = min(float(state[k].abs().max()) for k in state if k.endswith("running_mean"))
# float32 sums over up to 4608 terms per output, 53 layers deep: 1e-4 of the
# largest logit leaves a margin of ~100x over the rounding seen (~1e-6)
tag = "ok" if err < 1e-4 and moved > 0 else "not ok"
print("%s - %s: eval-mode logits equal torchvision's to 1e-4 (max error %.2e, logits up to "
      "%.2f, every running_mean moved: smallest max %.2e)"
      % (tag, v, err, np.max(np.abs(want)), moved))
PYEOF
}
"$TT_BUILDDIR/tests/tt_logits" "$T/job.cfg" "$ckpt" "$T/x.f32" 2 "$T/ours.f32" &&
  torchvision_check "$PY" "$T/torch"
tt_tap "$T/torch" $?
# Current torchvision (0.29, PyPI) too, from the venv bench/torch_peer.py
# makes (bench/roofline/run, bench/compare_pytorch); SKIP where it is not made
bpy=${TT_BENCH_VENV:-$HOME/.cache/towertrain-bench-venv}/bin/python
if [ -x "$bpy" ] && "$bpy" -c "import torchvision, sys; sys.exit(not torchvision.__version__.startswith('0.29'))" 2>/dev/null; then
  torchvision_check "$bpy" "$T/torch2"
  tt_tap "$T/torch2" $?
else
  skip "torchvision 0.29: the checkpoint loads into resnet50() (strict) with the same logits" \
    "no $bpy with torchvision 0.29 (bench/roofline/run makes it)"
fi

# The job: Goyal et al. (2017): lr = 0.1 x global batch / 256, reached by a
# linear warmup from 0.1 over the first 5 epochs, divided by 10 after epochs
# 30, 60 and 80 of 90; momentum 0.9, weight decay 1e-4.
"$TOWERTRAIN" validate "$TT_SRCDIR/jobs/imagenet_resnet50.cfg" >"$T/validate.out" 2>&1
ok $? "towertrain validate jobs/imagenet_resnet50.cfg: exit 0"
# without the images (copied, so that "../data" is $T/data whatever the
# source tree holds): exit 2, one line naming the directory, nothing written
mkdir -p "$T/jobs" "$T/models"
cp "$TT_SRCDIR/jobs/imagenet_resnet50.cfg" "$T/jobs/" && cp "$TT_SRCDIR/models/resnet50.cfg" "$T/models/"
tt_refused "jobs/imagenet_resnet50.cfg without ImageNet: exit 2, one line naming data/imagenet/train" \
  "data/imagenet/train: cannot open the directory" "$T/in" \
  "$TOWERTRAIN" run "$T/jobs/imagenet_resnet50.cfg" --logdir "$T/in" --set 'trainer.device="cpu"'
$PY - "$TT_SRCDIR/jobs/imagenet_resnet50.cfg" >"$T/job" 2>&1 <<'PYEOF'
import re, sys
text = re.sub(r"#.*", "", open(sys.argv[1]).read())
num = lambda key: float(re.search(r"\b%s\s*=\s*([0-9.e-]+)\s*;" % key, text).group(1))
batch, towers = num("batch_size"), num("nr_tower")
lr = 0.1 * batch * towers / 256
sched = [(int(e), float(v)) for e, v in re.findall(r"\(\s*(\d+)\s*,\s*([0-9.e-]+)\s*\)", text)]
want = [(e, 0.1 + (lr - 0.1) * e / 5) for e in range(6)] + [(30, lr / 10), (60, lr / 100), (80, lr / 1000)]
good = (len(sched) == len(want) and all(a == c and abs(b - d) < 1e-9 * lr for (a, b), (c, d) in zip(sched, want))
        and num("learning_rate") == sched[0][1] and num("momentum") == 0.9
        and num("weight_decay") == 1e-4 and num("max_epoch") == 90)
print("%s - jobs/imagenet_resnet50.cfg: global batch %d, lr %g, Goyal et al.'s warmup and steps, momentum 0.9, wd 1e-4 (%s)"
      % ("ok" if good else "not ok", batch * towers, lr, sched))
PYEOF
tt_tap "$T/job" $?
tt_done
