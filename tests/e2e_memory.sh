#!/bin/sh
# The peak memory of training jobs, against what they must hold:
#  - the LeNet job (Fashion-MNIST, batch 128, CPU) stays under 150 MB of
#    peak RSS;
#  - ResNet-20 (one tower, batch 128 of random 3x32x32 images) stays under
#    twice its activations plus parameters, counted from models/resnet20.cfg
#    by bench/tt_models.py (each layer's output of a batch, float32; a relu
#    fused into the layer before it adds none);
#  - dataflow.limit holds only the samples it uses: a CIFAR-10 file of
#    50,000 records (150 MB, a sparse file of zeros) read with limit = 256
#    peaks at least 100 MB below the same job reading it all (the records'
#    bytes, 3 KB each, are the difference; the rest of the two runs is the
#    same).
# A few steps suffice: every buffer is made before or during the first step.
. "$(dirname "$0")/tt_lib.sh"

# peak RSS in KiB of COMMAND... (its exit status must be 0)
peak_rss() {
  $PY - "$@" <<'PYEOF'
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(p.pid, 0)
print(usage.ru_maxrss if os.waitstatus_to_exitcode(status) == 0 else -1)
PYEOF
}

DATA=/usr/share/datasets/fashion-mnist
if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  kib=$(peak_rss "$TOWERTRAIN" run "$TT_SRCDIR/jobs/fashion_mnist_lenet.cfg" --logdir "$T/lenet" \
        --quiet --set max_epoch=1 --set steps_per_epoch=10 --set 'callbacks=()')
  [ "$kib" -gt 0 ] && [ "$kib" -le $((150 * 1024)) ]
  ok $? "LeNet job: peak RSS $((kib / 1024)) MB <= 150 MB"
else
  skip "LeNet job's peak RSS" "dataset-fashion-mnist not installed"
fi

bound=$($PY -c 'import sys; sys.path.insert(0, sys.argv[1] + "/bench"); import tt_models as t
c = t.model_cost(t.model_path("resnet20")); print((c["activation_bytes"] + c["param_bytes"]) // 1024)' \
  "$TT_SRCDIR")
kib=$(peak_rss "$TOWERTRAIN" run "$TT_SRCDIR/jobs/resnet20_fake.cfg" --logdir "$T/resnet" --quiet \
      --set 'trainer={ type = "simple"; nr_tower = 1; }' --set dataflow.batch_size=128 --set 'dataflow.augment=()' \
      --set dataflow.source.size=1536 --set max_epoch=1 --set steps_per_epoch=2 --set 'callbacks=()')
[ -n "$bound" ] && [ "$kib" -gt 0 ] && [ "$kib" -le $((2 * bound)) ]
ok $? "ResNet-20, 1 tower, batch 128: peak RSS $((kib / 1024)) MB <= 2 x (activations + parameters) = $((2 * bound / 1024)) MB"

truncate -s $((50000 * 3073)) "$T/cifar-big.bin"
tt_job "$T/cifar.cfg" source="{ type = \"cifar10\"; files = [ \"$T/cifar-big.bin\" ]; }" \
  shape="3, 32, 32" batch=32 steps=2 callbacks="()" layers='{ name = "fc"; type = "dense"; units = 4; }'
all=$(peak_rss "$TOWERTRAIN" run "$T/cifar.cfg" --logdir "$T/cifar-all" --quiet)
lim=$(peak_rss "$TOWERTRAIN" run "$T/cifar.cfg" --logdir "$T/cifar-lim" --quiet --set dataflow.limit=256)
[ "$all" -gt 0 ] && [ "$lim" -gt 0 ] && [ "$lim" -le $((all - 100 * 1024)) ]
ok $? "CIFAR-10 with dataflow.limit = 256: peak RSS $((lim / 1024)) MB, at least 100 MB below reading all 50,000 records ($((all / 1024)) MB)"
rm -f "$T/cifar-big.bin"

tt_done
