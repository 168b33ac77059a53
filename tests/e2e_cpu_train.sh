#!/bin/sh
# e2e_cpu_train.sh - a short training run on the CPU under test (TAP): the machine's
# own in make check, an emulated AVX2-only AMD EPYC (Zen 1) in make
# check-cpus (tests/extra_checks.mk). LeNet on the first 512 Fashion-MNIST
# images, 2 epochs of 16 steps:
# - it trains (the train loss falls from epoch 1 to 2) on 1 thread, and on
#   2 threads it gives the same bits (tt_same, tolerance 0);
# - the kernel level its log names is the one the CPU under test has
#   (CPUID, tests/tt_cpuid: avx512, avx2 or plain), capped by TT_CPU_ISA;
#   SKIPs visibly while no log line names it.
# Against the float64 reference at each level: the unit tests (test_cpu_ops,
# test_tile_gemm, ...), which make check-cpus runs on the emulated CPU too.
. "$(dirname "$0")/tt_lib.sh"

DATA=${TT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
  tt_skip_all "dataset-fashion-mnist not installed" "LeNet trains on this CPU" \
    "the same bits on 1 and 2 threads" "the log names this CPU's kernel level"
fi

# the level towertrain's kernels must run at here: the CPU's (as
# backend/cpu/cpu_isa.h defines the levels), capped by TT_CPU_ISA
if tt_cpu_has avx512f && tt_cpu_has avx512bw && tt_cpu_has avx512vl && tt_cpu_has avx512dq; then
  level=avx512
elif tt_cpu_has avx2 && tt_cpu_has fma && tt_cpu_has f16c; then
  level=avx2
else
  level=plain
fi
case ${TT_CPU_ISA:-}:$level in
  plain:*|avx2:avx512) level=$TT_CPU_ISA ;;
esac
echo "# CPU under test: $($TT_RUN "$TT_BUILDDIR/tests/tt_cpuid"); kernels: $level; oneDNN: $(tt_dnnl_isa)"

# the first 512 images in IDX files of their own: under QEMU, inflating all
# 60,000 would take most of the run
$PY - "$DATA" "$T" <<'PYEOF' || { echo "Bail out! cannot write the 512 images"; exit 99; }
import gzip, struct, sys
for kind, rec in (("images-idx3", 784), ("labels-idx1", 1)):
    with gzip.open("%s/train-%s-ubyte.gz" % (sys.argv[1], kind)) as f:
        head = bytearray(f.read(16 if rec > 1 else 8))
        body = f.read(512 * rec)
    struct.pack_into(">I", head, 4, 512)
    with open("%s/%s" % (sys.argv[2], kind), "wb") as f:
        f.write(bytes(head) + body)
PYEOF
cat >"$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/lenet.cfg";
dataflow = { source = { type = "idx"; images = "$T/images-idx3"; labels = "$T/labels-idx1"; };
             augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
             shuffle = true; batch_size = 32; prefetch = { workers = 0; queue = 1; }; };
optimizer = { type = "momentum"; learning_rate = 0.02; momentum = 0.9; };
trainer = { device = "cpu"; threads_per_tower = 1; };
max_epoch = 2;
callbacks = ( { type = "model_saver"; max_to_keep = 0; } );
monitors = ( "json" );
CFG
for th in 1 2; do
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/t$th" --quiet --set trainer.threads_per_tower=$th \
    >"$T/t$th.out" 2>&1
  echo $? >"$T/t$th.rc"
done
losses=$($PY -c 'import json, sys
print(" ".join("%.4f" % e["train_loss"] for e in json.load(open(sys.argv[1]))))' \
  "$T/t1/stats.json" 2>/dev/null)
[ "$(cat "$T/t1.rc")" = 0 ] && $PY -c 'import sys; l = [float(v) for v in sys.argv[1:]]
sys.exit(0 if len(l) == 2 and l[1] < l[0] else 1)' $losses
ok $? "LeNet trains on this CPU (kernels $level): train loss by epoch $losses"
[ "$(cat "$T/t2.rc")" = 0 ] &&
  tt_same "$T/t1/model-32.safetensors" "$T/t2/model-32.safetensors" 0 >/dev/null
ok $? "the same bits on 1 and 2 threads (kernels $level)"

# the log line that names the kernels' level (TT_CPU_ISA, towertrain(1)):
# the first line that says "kernel" and a level, in any case, AVX-512 or avx512
named=$(grep -i 'kernel' "$T/t1/log.log" | tr 'A-Z' 'a-z' | sed 's/avx-512/avx512/g' |
  grep -o -w 'avx512\|avx2\|plain' | head -n 1)
if [ -z "$named" ]; then
  skip "the log names this CPU's kernel level ($level)" "no log line names the kernels' level yet"
else
  [ "$named" = "$level" ]
  ok $? "the log names this CPU's kernel level: $named (CPUID and TT_CPU_ISA: $level)"
fi
tt_done
