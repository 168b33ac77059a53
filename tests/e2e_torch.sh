#!/bin/sh
# A towertrain checkpoint loads into the equivalent torch.nn module with
# load_state_dict(strict=True) and gives the same test-set accuracy as
# towertrain's inference_runner (TAP; skipped visibly without python3-torch).
. "$(dirname "$0")/tt_lib.sh"
DATA=/usr/share/datasets/fashion-mnist
if ! $PY -c "import torch" 2>/dev/null; then
  skip "checkpoint into torch.nn" "python3-torch not installed"
  tt_done
fi
if [ ! -f $DATA/t10k-images-idx3-ubyte.gz ]; then
  skip "checkpoint into torch.nn" "dataset-fashion-mnist not installed"
  tt_done
fi
for model in lenet mlp; do
  "$TOWERTRAIN" run "$TT_SRCDIR/jobs/fashion_mnist_$model.cfg" --logdir "$T/$model" --quiet \
    --set max_epoch=1 --set dataflow.limit=12800 \
    --set 'callbacks=( { type = "inference_runner"; dataflow = { source = { type = "idx";
       images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
       labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"; };
       augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } ); batch_size = 500; }; },
       "model_saver" )'
  out=$($PY - "$T/$model" "$TT_SRCDIR/models/$model.cfg" 2>&1 <<'PYEOF'
import gzip, json, re, sys, warnings
warnings.filterwarnings("ignore")
import numpy as np, torch, torch.nn as nn
from tt_safetensors import load
logdir, model_file = sys.argv[1], sys.argv[2]
ckpt = open(logdir + "/checkpoint").readline().strip()
state = {k: torch.from_numpy(v.copy()) for k, v in load(logdir + "/" + ckpt)[0].items()}
# The model file's layers, built as torch.nn modules with the same names.
text = open(model_file).read()
layers = re.findall(r"\{([^}]*)\}", text)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.order = []
        c = 1; flat = None
        for l in layers:
            kv = dict(re.findall(r'(\w+)\s*=\s*"?([\w.]+)"?', l))
            name, typ = kv["name"], kv["type"]
            relu = kv.get("activation") == "relu"
            if typ == "conv2d":
                m = nn.Conv2d(c, int(kv["filters"]), int(kv["kernel"]), padding=int(kv.get("padding", 0)))
                c = int(kv["filters"])
            elif typ == "maxpool":
                m = nn.MaxPool2d(int(kv["kernel"]))
            elif typ == "dense":
                m = nn.LazyLinear(int(kv["units"]))
            setattr(self, name, m)
            self.order.append((name, typ, relu))
    def forward(self, x):
        for name, typ, relu in self.order:
            if typ == "dense":
                x = x.flatten(1)
            x = getattr(self, name)(x)
            if relu:
                x = torch.relu(x)
        return x
net = Net()
with torch.no_grad():
    net(torch.zeros(1, 1, 28, 28))          # materialise the lazy layers
net.load_state_dict(state, strict=True)
def idx(p, off):
    with gzip.open(p) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=off)
D = "/usr/share/datasets/fashion-mnist"
x = idx(D + "/t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
x = (x - np.float32(0.286)) / np.float32(0.353)
y = idx(D + "/t10k-labels-idx1-ubyte.gz", 8).astype(np.int64)
with torch.no_grad():
    acc = (net(torch.from_numpy(x)).argmax(1) == torch.from_numpy(y)).double().mean().item()
ours = json.load(open(logdir + "/stats.json"))[-1]["validation_accuracy"]
print("torch %.6f towertrain %.6f" % (acc, ours))
sys.exit(0 if abs(acc - ours) <= 1e-4 else 1)
PYEOF
)
  ok $? "$model checkpoint in torch.nn (strict): $out"
done
tt_done
