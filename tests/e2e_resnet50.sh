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

# The job: He et al. (2019, "Bag of Tricks"): lr = 0.1 x global batch / 256,
# reached by a per-step linear warmup from 0 over the first 5 epochs, then a
# half cosine to 0 at epoch 120; Nesterov momentum 0.9, weight decay 1e-4
# without biases and batchnorm, label smoothing 0.1 in the model.
# without the images (copied, so that "../data" is $T/data whatever the
# source tree holds): exit 2, one line naming the job's line and key and the
# directory, nothing written; validate says the same
mkdir -p "$T/jobs" "$T/models"
cp "$TT_SRCDIR/jobs/imagenet_resnet50.cfg" "$T/jobs/" && cp "$TT_SRCDIR/models/resnet50.cfg" "$T/models/"
line=$(grep -n 'root = "../data/imagenet/train"' "$T/jobs/imagenet_resnet50.cfg" | cut -d: -f1)
tt_refused "jobs/imagenet_resnet50.cfg without ImageNet: exit 2, one line naming data/imagenet/train" \
  "imagenet_resnet50.cfg:$line: dataflow.source.root: $T/data/imagenet/train: No such file" "$T/in" \
  "$TOWERTRAIN" run "$T/jobs/imagenet_resnet50.cfg" --logdir "$T/in" --set 'trainer.device="cpu"'
tt_refused "validate jobs/imagenet_resnet50.cfg without ImageNet: the same line" \
  "imagenet_resnet50.cfg:$line: dataflow.source.root: $T/data/imagenet/train: No such file" "" \
  "$TOWERTRAIN" validate "$T/jobs/imagenet_resnet50.cfg"
mkdir -p "$T/data/imagenet/train" "$T/data/imagenet/val"
"$TOWERTRAIN" validate "$T/jobs/imagenet_resnet50.cfg" >"$T/validate.out" 2>&1
ok $? "towertrain validate jobs/imagenet_resnet50.cfg with its folders there: exit 0"
$PY - "$TT_SRCDIR/jobs/imagenet_resnet50.cfg" "$TT_SRCDIR/models/resnet50.cfg" >"$T/job" 2>&1 <<'PYEOF'
import fnmatch, re, sys
text = re.sub(r"#.*", "", open(sys.argv[1]).read())
model = re.sub(r"#.*", "", open(sys.argv[2]).read())
num = lambda key: float(re.search(r"\b%s\s*=\s*([0-9.e-]+)\s*;" % key, text).group(1))
batch, towers = num("batch_size"), num("nr_tower")
lr, spe = 0.1 * batch * towers / 256, 1281167 // int(batch * towers)  # ILSVRC-2012's train set
sched = re.findall(r"\(\s*(\d+)\s*,\s*([0-9.e-]+)\s*(?:,\s*\"(\w+)\"\s*)?\)", text)
sched = [(int(s), float(v), k) for s, v, k in sched]
want = [(0, 0.0, ""), (5 * spe, lr, ""), (120 * spe, 0.0, "cosine")]
excl = re.search(r"weight_decay_exclude\s*=\s*\[([^]]*)\]", text).group(1)
globs = re.findall(r'"([^"]+)"', excl)
names = re.findall(r'name\s*=\s*"([^"]+)";\s*type\s*=\s*"(\w+)"', model)
params = [(n + ".weight", t) for n, t in names if t in ("conv2d", "dense", "batchnorm")] + \
         [(n + ".bias", t) for n, t in names if t in ("dense", "batchnorm")]
decayed = {p for p, t in params if not any(fnmatch.fnmatch(p, g) for g in globs)}
good = (sched == want and re.search(r"step_based\s*=\s*true", text) and
        re.search(r'interp\s*=\s*"linear"', text) and num("momentum") == 0.9 and
        re.search(r"nesterov\s*=\s*true", text) and num("weight_decay") == 1e-4 and
        num("max_epoch") == 120 and
        decayed == {p for p, t in params if t in ("conv2d", "dense") and p.endswith(".weight")} and
        re.search(r"label_smoothing\s*=\s*0\.1\s*;", model))
print("%s - jobs/imagenet_resnet50.cfg: global batch %d, peak lr %g at step %d, cosine to 0 at step %d, "
      "Nesterov 0.9, wd 1e-4 on the %d conv and dense weights only, label smoothing 0.1 (%s)"
      % ("ok" if good else "not ok", batch * towers, lr, 5 * spe, 120 * spe, len(decayed), sched))
PYEOF
tt_tap "$T/job" $?
tt_done
