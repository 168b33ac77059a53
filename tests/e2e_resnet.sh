#!/bin/sh
# End-to-end: ResNet-20 (models/resnet20.cfg, CIFAR-10) through the binary (TAP).
#  (a) jobs/cifar10_resnet20.cfg without the CIFAR files: exit 2, one line
#      saying which file and where to get it, no log directory;
#  (b) the same job on fabricated CIFAR-10 binary files trains and validates;
#  (c) ResNet-20 on fake data learns (loss falls) with 1 and with 2 towers;
#  (d) 2 epochs, 2 towers: both towers' batchnorm running statistics are equal
#      after each epoch end (TT_DUMP_TOWERS) and have moved from 0 / 1;
#  (e) a resnet20 checkpoint loads into the equivalent torch.nn module
#      (load_state_dict strict) and gives the same eval-mode logits to 1e-4
#      (skipped visibly without python3-torch).
. "$(dirname "$0")/tt_lib.sh"
: "${TT_BUILDDIR:?}"

# The shipped job and model, copied so that "../data" means $T/data whatever
# the source tree holds.
mkdir -p "$T/jobs" "$T/models"
cp "$TT_SRCDIR/jobs/cifar10_resnet20.cfg" "$T/jobs/"
cp "$TT_SRCDIR/models/resnet20.cfg" "$T/models/"

# (a) no CIFAR files
"$TOWERTRAIN" run "$T/jobs/cifar10_resnet20.cfg" --logdir "$T/none" >"$T/out" 2>"$T/err"
rc=$?
msg=$(cat "$T/err")
[ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && [ ! -e "$T/none" ] &&
  grep -q "data_batch_1.bin: no such file" "$T/err" && grep -q "cifar-10-binary.tar.gz" "$T/err"
ok $? "(a) CIFAR-10 files missing: exit 2, one line naming the file and the download ($msg)"

# (b) fabricated CIFAR-10 binary files: 5 x 64 training records, 100 test records
mkdir -p "$T/data/cifar-10-batches-bin"
$PY - "$T/data/cifar-10-batches-bin" <<'PYEOF'
import os, random, sys
random.seed(3)
def write(name, records):
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        for _ in range(records):
            f.write(bytes([random.randrange(10)]) + os.urandom(3072))
for i in range(1, 6):
    write("data_batch_%d.bin" % i, 64)
write("test_batch.bin", 100)
PYEOF
"$TOWERTRAIN" run "$T/jobs/cifar10_resnet20.cfg" --logdir "$T/cifar" --quiet --set max_epoch=1 &&
  $PY -c 'import json,sys; s=json.load(open(sys.argv[1])); e=s[-1]
assert e["global_step"] == 2 and 0 <= e["validation_accuracy"] <= 1, e' "$T/cifar/stats.json"
ok $? "(b) the CIFAR-10 job trains 2 steps of 2 x 64 on 320 fabricated records and validates"

# (c) fake data, 64 samples to memorise: the loss of the last epoch is well
# under the first's, with one tower and with two
fake() {
  cat > "$T/$1.cfg" <<CFG
model = "$TT_SRCDIR/models/resnet20.cfg";
dataflow = { source = { type = "fake"; shape = [3, 32, 32]; classes = 10; size = 64; };
             batch_size = $2; };
optimizer = { type = "momentum"; learning_rate = 0.05; momentum = 0.9; };
trainer = $3;
max_epoch = $4;
callbacks = ( "model_saver" );
monitors = ( "json" );
CFG
}
fake one 32 '{ type = "simple"; }' 8
fake two 16 '{ type = "sync_replicated"; nr_tower = 2; }' 8
for job in one two; do
  "$TOWERTRAIN" run "$T/$job.cfg" --logdir "$T/$job" --quiet &&
    $PY -c 'import json,math,sys; s=json.load(open(sys.argv[1]))
# above the floor label smoothing 0.1 puts under the loss (the entropy of its
# target over 10 classes, 0.50): the excess falls by 30%
floor = -(0.91 * math.log(0.91) + 9 * 0.01 * math.log(0.01))
first, last = s[0]["train_loss"], s[-1]["train_loss"]
assert math.isfinite(last) and last - floor < 0.7 * (first - floor), (first, last)
print(first, last)' "$T/$job/stats.json" >"$T/loss" 2>&1
  ok $? "(c) ResNet-20 on fake data learns, $job tower(s): train_loss first and last epoch $(cat "$T/loss" | tail -1)"
done

# (d) 2 epochs, 2 towers: both towers' statistics equal after each epoch end
mkdir "$T/dump"
fake stats 32 '{ type = "sync_replicated"; nr_tower = 2; }' 2
TT_DUMP_TOWERS="$T/dump" "$TOWERTRAIN" run "$T/stats.cfg" --logdir "$T/stats" --quiet &&
  $PY - "$T/dump" <<'PYEOF'
import os, sys, numpy as np
d = sys.argv[1]
steps = sorted({int(f.split("-")[1]) for f in os.listdir(d)})
assert steps == [1, 2], steps
prev = None
for s in steps:
    t0 = np.fromfile(os.path.join(d, "step-%d-tower-0.bin" % s), dtype="<f4")
    t1 = np.fromfile(os.path.join(d, "step-%d-tower-1.bin" % s), dtype="<f4")
    assert t0.size > 0 and t0.tobytes() == t1.tobytes(), "towers differ at step %d" % s
    # running means start at 0 and variances at 1: most must have moved
    moved = np.mean((t0 != 0) & (t0 != 1))
    assert moved > 0.5, moved
    assert prev is None or prev.tobytes() != t0.tobytes()
    prev = t0
PYEOF
ok $? "(d) 2 towers, 2 epochs: running statistics of both towers bitwise equal after each epoch end, and moving"
$PY - "$T/stats/model-2.safetensors" <<'PYEOF'
import json, struct, sys
import tt_safetensors as st
t, _ = st.load(sys.argv[1])
b = open(sys.argv[1], "rb").read()
head = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
counts = {k: int(v) for k, v in t.items() if k.endswith(".num_batches_tracked")}
assert len(counts) == 21 and set(counts.values()) == {2}, counts
assert all(head[k]["dtype"] == "I64" and head[k]["shape"] == [] for k in counts)
PYEOF
ok $? "(d) num_batches_tracked (counted on the backend) is the global step, 2, an I64 scalar, in every batchnorm of the checkpoint"

# (e) a checkpoint in torch
if ! $PY -c "import torch" 2>/dev/null; then
  skip "(e) resnet20 checkpoint into torch.nn, same logits to 1e-4" "python3-torch not installed"
else
  ckpt="$T/two/$(head -1 "$T/two/checkpoint")"
  fake logits 8 '{ type = "simple"; }' 1
  $PY - "$T/x.f32" <<'PYEOF'
import sys, numpy as np
np.random.default_rng(5).standard_normal((8, 3, 32, 32)).astype("<f4").tofile(sys.argv[1])
PYEOF
  "$TT_BUILDDIR/tests/tt_logits" "$T/logits.cfg" "$ckpt" "$T/x.f32" 8 "$T/ours.f32" &&
  $PY - "$TT_SRCDIR/models/resnet20.cfg" "$ckpt" "$T/x.f32" \
      "$T/ours.f32" >"$T/torch" 2>&1 <<'PYEOF'
import re, sys, warnings
warnings.filterwarnings("ignore")
import numpy as np, torch, torch.nn as nn
from tt_safetensors import load
model_file, ckpt, xfile, ours = sys.argv[1:5]
state = {k: torch.from_numpy(v.copy()) for k, v in load(ckpt)[0].items()}
# The model file's graph as torch modules of the same names.
text = re.sub(r"#.*", "", open(model_file).read())
layers = []
for body in re.findall(r"\{([^}]*)\}", text):
    kv = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', body))
    kv.update(re.findall(r"(\w+)\s*=\s*(-?\d+|true|false)\s*;", body))
    m = re.search(r"inputs\s*=\s*\[([^\]]*)\]", body)
    if m:
        kv["inputs"] = re.findall(r'"([^"]*)"', m.group(1))
    if "name" in kv:  # a layer, not the loss group
        layers.append(kv)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.graph = []
        channels = {None: 3}
        prev = None
        for l in layers:
            name, typ = l["name"], l["type"]
            ins = l.get("inputs") or [l.get("input", prev)]
            c = channels[ins[0]]
            if typ == "conv2d":
                f = int(l["filters"])
                self.add_module(name, nn.Conv2d(c, f, int(l["kernel"]), int(l.get("stride", 1)),
                                                int(l.get("padding", 0)), bias=l.get("bias", "true") != "false"))
                c = f
            elif typ == "batchnorm":
                self.add_module(name, nn.BatchNorm2d(c))
            elif typ == "dense":
                self.add_module(name, nn.Linear(c, int(l["units"])))
                c = int(l["units"])
            self.graph.append((name, typ, ins, l.get("activation") == "relu"))
            channels[name] = c
            prev = name
    def forward(self, x):
        out = {None: x}
        for name, typ, ins, relu in self.graph:
            if typ == "add":
                y = sum(out[i] for i in ins)
            elif typ == "relu":
                y = torch.relu(out[ins[0]])
            elif typ == "global_avgpool":
                y = out[ins[0]].mean(dim=(2, 3))
            else:
                y = getattr(self, name)(out[ins[0]])
            out[name] = torch.relu(y) if relu else y
        return out[name]
net = Net()
net.load_state_dict(state, strict=True)
net.eval()
x = torch.from_numpy(np.fromfile(xfile, dtype="<f4").reshape(8, 3, 32, 32))
with torch.no_grad():
    want = net(x).numpy()
got = np.fromfile(ours, dtype="<f4").reshape(want.shape)
err = np.max(np.abs(got - want)) / max(1.0, np.max(np.abs(want)))
moved = float(np.max(np.abs(state["bn0.running_mean"].numpy())))
print("max error %.2e, logits up to %.2f, |bn0.running_mean| up to %.3f" % (err, np.max(np.abs(want)), moved))
sys.exit(0 if err < 1e-4 and moved > 0 else 1)
PYEOF
  ok $? "(e) resnet20 checkpoint into torch.nn (strict): same eval-mode logits to 1e-4 ($(tail -1 "$T/torch"))"
fi

tt_done
