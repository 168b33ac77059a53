#!/bin/sh
# End-to-end: `towertrain eval` (TAP). For every trainer type, one and two
# towers, one and two MPI ranks: eval of the run's checkpoint prints the loss
# and accuracy its inference_runner reported, to the last digit; the table and
# --json agree with each other (confusion matrix, per-class, top-5); the same
# checkpoint in torch.nn gives the same predictions; eval.dataflow and --job
# choose other data; the log directory is left as it was; bad input exits 2.
. "$(dirname "$0")/tt_lib.sh"
DATA=/usr/share/datasets/fashion-mnist
if [ ! -f $DATA/t10k-images-idx3-ubyte.gz ]; then
  skip "towertrain eval" "dataset-fashion-mnist not installed"; tt_done
fi

cat > "$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/lenet.cfg";
dataflow = { source = { type = "idx"; images = "$DATA/train-images-idx3-ubyte.gz";
                        labels = "$DATA/train-labels-idx1-ubyte.gz"; };
             augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
             limit = 5120; batch_size = 64; };
optimizer = { type = "momentum"; learning_rate = 0.05; };
max_epoch = 1;
callbacks = ( { type = "inference_runner";
                dataflow = { source = { type = "idx"; images = "$DATA/t10k-images-idx3-ubyte.gz";
                                        labels = "$DATA/t10k-labels-idx1-ubyte.gz"; };
                             augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
                             limit = 2000; batch_size = 150; }; },
              "model_saver" );
monitors = ( "json" );
CFG

# same_as_run LOGDIR JSON STDOUT: eval's loss and accuracy are the run's last
# validation_loss and validation_accuracy, as numbers and as printed text
same_as_run() {
  $PY - "$1/stats.json" "$2" "$3" <<'PYEOF'
import json, re, sys
stats_text = open(sys.argv[1]).read()
run = json.loads(stats_text)[-1]
ev = json.load(open(sys.argv[2]))
out = open(sys.argv[3]).read()
acc_text = re.findall(r'"validation_accuracy":\s*([0-9.e+-]+)', stats_text)[-1]
printed = re.search(r"^accuracy\s+(\S+)", out, re.M).group(1)
assert ev["loss"] == run["validation_loss"], (ev["loss"], run["validation_loss"])
assert ev["accuracy"] == run["validation_accuracy"], (ev["accuracy"], run["validation_accuracy"])
assert printed == acc_text, (printed, acc_text)
print("accuracy %s, loss %r" % (printed, ev["loss"]))
PYEOF
}

for trainer in 'type="simple";' 'type="sync_replicated"; nr_tower=2;' \
               'type="sync_parameter_server"; nr_tower=2;' 'type="async"; nr_tower=2;'; do
  name=$(echo "$trainer" | sed 's/type="\([a-z_]*\)".*nr_tower=\([0-9]\).*/\1-\2/; s/type="\([a-z_]*\)";$/\1-1/')
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/$name" --quiet --set "trainer={$trainer}"
  rc=$?
  "$TOWERTRAIN" eval "$T/$name" --json="$T/$name.json" > "$T/$name.out" 2>"$T/err"
  rc2=$?
  what=$(same_as_run "$T/$name" "$T/$name.json" "$T/$name.out" 2>&1); s=$?
  ok $([ $rc = 0 ] && [ $rc2 = 0 ] && [ $s = 0 ]; echo $?) "$name: eval prints the run's last validation_loss and validation_accuracy to the last digit ($what $(cat "$T/err"))"
done

# the table and the JSON describe one confusion matrix
$PY - "$T/simple-1.json" "$T/simple-1.out" <<'PYEOF'
import json, re, sys
ev = json.load(open(sys.argv[1]))
out = open(sys.argv[2]).read()
cm = ev["confusion_matrix"]
assert len(cm) == 10 and all(len(r) == 10 for r in cm)
assert sum(map(sum, cm)) == ev["samples"] == 2000
assert sum(cm[i][i] for i in range(10)) / 2000 == ev["accuracy"]
for i in range(10):  # cJSON prints 15 digits when they read back within an ulp
    assert abs(ev["per_class_accuracy"][i] - cm[i][i] / sum(cm[i])) <= 1e-15, i
assert ev["accuracy"] <= ev["top5_accuracy"] <= 1 and ev["global_step"] == 80
rows = re.findall(r"^\s+(\d)((?:\s+\d+){10})$", out, re.M)
assert [[int(v) for v in r[1].split()] for r in rows] == cm, rows
assert "top-5 accuracy" in out and "checkpoint" in ev and ev["checkpoint"].endswith("model-80.safetensors")
PYEOF
ok $? "the printed confusion matrix is the JSON's; its diagonal is the accuracy, its rows the per-class accuracy; top-5 >= accuracy"

# the log directory is left exactly as it was
ls -la --time-style=full-iso "$T/simple-1" > "$T/before"
"$TOWERTRAIN" eval "$T/simple-1" > /dev/null 2>&1
ls -la --time-style=full-iso "$T/simple-1" | diff - "$T/before" > /dev/null
ok $? "eval writes nothing into the log directory"
tt_refused "eval --json into a directory that is not there: exit 2, one line naming the file" \
  "towertrain: $T/nowhere/e.json: cannot write: No such file or directory" "" \
  "$TOWERTRAIN" eval "$T/simple-1" --json "$T/nowhere/e.json"

# MPI: a run over 2 ranks, evaluated over 2 ranks and in one process
if "$TOWERTRAIN" --version | grep -q mpi && command -v mpirun >/dev/null; then
  MPIRUN="mpirun --allow-run-as-root --oversubscribe -np 2"
  $MPIRUN "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/mpi" --quiet \
    --set 'trainer={type="sync_replicated"; nr_tower=1;}' --set dataflow.batch_size=32 >"$T/mpi.run" 2>&1
  rc=$?
  $MPIRUN "$TOWERTRAIN" eval "$T/mpi" --json "$T/mpi.json" > "$T/mpi.out" 2>"$T/err"; rc2=$?
  what=$(same_as_run "$T/mpi" "$T/mpi.json" "$T/mpi.out" 2>&1); s=$?
  ok $([ $rc = 0 ] && [ $rc2 = 0 ] && [ $s = 0 ]; echo $?) "2 MPI ranks: eval under mpirun -np 2 splits the batches as the inference_runner did: same numbers ($what)"
  [ "$(grep -c '^accuracy' "$T/mpi.out")" = 1 ]; ok $? "under mpirun only rank 0 prints"
  "$TOWERTRAIN" eval "$T/mpi" --json "$T/mpi1.json" > /dev/null 2>&1
  $PY - "$T/mpi.json" "$T/mpi1.json" <<'PYEOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["accuracy"] == b["accuracy"] and a["confusion_matrix"] == b["confusion_matrix"]
assert abs(a["loss"] - b["loss"]) <= 1e-12 * a["loss"], (a["loss"], b["loss"])
PYEOF
  ok $? "the same checkpoint evaluated in one process: the same counts, the loss summed in another order"
else
  skip "eval across MPI ranks" "built without MPI or no mpirun"
fi

# torch.nn loaded from the same checkpoint predicts the same classes
if $PY -c "import torch" 2>/dev/null; then
  PYTHONPATH="$TT_SRCDIR/tests" $PY - "$T/simple-1" "$T/simple-1.json" <<'PYEOF'
import gzip, json, sys, warnings
warnings.filterwarnings("ignore")
import numpy as np, torch, torch.nn as nn
from tt_safetensors import load
logdir, ev = sys.argv[1], json.load(open(sys.argv[2]))
state, meta = load(logdir + "/" + open(logdir + "/checkpoint").readline().strip())
net = nn.Sequential()
net.add_module("conv0", nn.Conv2d(1, 6, 5, padding=2)); net.add_module("r0", nn.ReLU())
net.add_module("pool0", nn.MaxPool2d(2))
net.add_module("conv1", nn.Conv2d(6, 16, 5)); net.add_module("r1", nn.ReLU())
net.add_module("pool1", nn.MaxPool2d(2)); net.add_module("flat", nn.Flatten())
net.add_module("fc0", nn.Linear(400, 120)); net.add_module("r2", nn.ReLU())
net.add_module("fc1", nn.Linear(120, 84)); net.add_module("r3", nn.ReLU())
net.add_module("fc2", nn.Linear(84, 10))
net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
def idx(p, off):
    with gzip.open(p) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=off)
D = "/usr/share/datasets/fashion-mnist"
x = idx(D + "/t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)[:2000].astype(np.float32) / 255
x = (x - np.float32(0.286)) / np.float32(0.353)
y = idx(D + "/t10k-labels-idx1-ubyte.gz", 8)[:2000].astype(np.int64)
with torch.no_grad():
    z = net(torch.from_numpy(x))
loss = torch.nn.functional.cross_entropy(z.double(), torch.from_numpy(y)).item()
pred = z.argmax(1).numpy()
cm = np.zeros((10, 10), dtype=int)
np.add.at(cm, (y, pred), 1)
top2 = torch.topk(z, 2).values
near_ties = int(((top2[:, 0] - top2[:, 1]) < 1e-4).sum())
print("# torch: accuracy %r loss %r (%d near-ties); towertrain eval: %r %r"
      % ((pred == y).mean(), loss, near_ties, ev["accuracy"], ev["loss"]))
assert (pred == y).mean() == ev["accuracy"] and cm.tolist() == ev["confusion_matrix"]
assert abs(loss - ev["loss"]) <= 1e-5 * loss
PYEOF
  ok $? "torch.nn loaded from the checkpoint: the same accuracy and confusion matrix, the loss within 1e-5"
else
  skip "eval against torch.nn" "python3-torch not installed"
fi

# eval.dataflow: the same test images as an npy array give the same numbers
if $PY -c "import numpy" 2>/dev/null; then
  $PY - "$T" <<'PYEOF'
import gzip, sys
import numpy as np
D = "/usr/share/datasets/fashion-mnist"
with gzip.open(D + "/t10k-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), dtype=np.uint8, offset=16).reshape(-1, 28, 28)[:2000]
with gzip.open(D + "/t10k-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), dtype=np.uint8, offset=8)[:2000].astype(np.int32)
np.save(sys.argv[1] + "/x.npy", x)
np.save(sys.argv[1] + "/y.npy", y)
PYEOF
  "$TOWERTRAIN" eval "$T/simple-1" --json "$T/npy.json" --set "eval.dataflow={ source = { type = \"npy\";
     images = \"$T/x.npy\"; labels = \"$T/y.npy\"; };
     augment = ( { type = \"normalize\"; mean = [0.286]; std = [0.353]; } ); batch_size = 150; }" > "$T/npy.out" 2>"$T/err"
  rc=$?
  $PY -c 'import json,sys; a,b=json.load(open(sys.argv[1])),json.load(open(sys.argv[2])); sys.exit(0 if (a["loss"],a["accuracy"],a["confusion_matrix"])==(b["loss"],b["accuracy"],b["confusion_matrix"]) else 1)' "$T/npy.json" "$T/simple-1.json" &&
    [ $rc = 0 ] && grep -q "^data *eval.dataflow: 2000 samples" "$T/npy.out"
  ok $? "--set eval.dataflow={npy of the same images}: the same loss, accuracy and matrix ($(cat "$T/err"))"
else
  skip "eval.dataflow with npy" "python3-numpy not installed"
fi

# without an inference_runner: the training data, unshuffled, without random augmentation
mkdir "$T/elsewhere"
cp "$T/simple-1/model-80.safetensors" "$T/elsewhere/model.safetensors"
"$TOWERTRAIN" eval "$T/elsewhere/model.safetensors" --job "$T/job.cfg" --set 'callbacks=( )' \
  --set 'dataflow.augment=( { type = "random_crop"; size = 28; padding = 2; }, { type = "flip"; },
                            { type = "normalize"; mean = [0.286]; std = [0.353]; } )' > "$T/train1.out" 2>"$T/err"
rc=$?
"$TOWERTRAIN" eval "$T/elsewhere/model.safetensors" --job "$T/job.cfg" --set 'callbacks=( )' > "$T/train2.out" 2>&1
grep -q "^data *the training dataflow without random augmentation: 5120 samples" "$T/train1.out" &&
  [ $rc = 0 ] && cmp -s "$T/train1.out" "$T/train2.out"
ok $? "--job without an inference_runner: the training data in order, random_crop as a center crop and no flip (the same numbers as without them) ($(cat "$T/err"))"

# bad input: one line, exit 2
expect() { # expect NAME SUBSTRING ARGS...
  what=$1 pat=$2; shift 2
  "$TOWERTRAIN" eval "$@" >"$T/out" 2>"$T/err"; rc=$?
  [ $rc = 2 ] && [ "$(wc -l < "$T/err")" = 1 ] && grep -q "^towertrain: .*$pat" "$T/err"
  ok $? "$what: exit 2, one line ($(cat "$T/err"))"
}
mkdir "$T/empty"
expect "a log directory without checkpoints" "no checkpoint" "$T/empty"
expect "a checkpoint without job.cfg beside it" "no job.cfg beside the checkpoint" "$T/elsewhere/model.safetensors"
expect "no such path" "no such log directory or checkpoint" "$T/nowhere"
expect "a checkpoint of another model" "does not match the model" "$T/simple-1" --set "model=\"$TT_SRCDIR/models/mlp.cfg\""
expect "a bad --set" "--set trainer.nr_tower=0: must be >= 1" "$T/simple-1" --set trainer.nr_tower=0
expect "an unknown option" "unknown option '--bogus'" "$T/simple-1" --bogus
expect "--json without a file" "eval: --json needs FILE" "$T/simple-1" --json

tt_done
