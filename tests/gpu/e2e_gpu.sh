#!/bin/sh
# End-to-end GPU towers (TAP). Without a GPU: what a user sees then (exit 2
# and one line), and every GPU check reported as SKIP. With GPUs: a LeNet
# run reaching the CPU run's accuracy, bitwise repeatability with
# deterministic = true, fp32 in float32 NHWC (TT_CUDA_LAYOUT=nhwc) reaching
# the NCHW run's accuracy, checkpoints resumed across devices, towertrain.cfg(5) TRAINER's
# equivalence on 2 GPU towers (sync_replicated with NCCL,
# sync_parameter_server with both ps_device) and over 2 MPI ranks, async,
# NCCL's all-reduce correct at every size of the bench table (and over 2 MPI
# ranks), and the error for a tower id that does not exist.
# TT_DEVICE=sim runs the same checks on simulated GPUs (tt_device;
# tests/e2e_sim_gpu.sh in make check): there every multi-device check runs.
. "$(dirname "$0")/../tt_lib.sh"
tt_device

built=$("$TOWERTRAIN" --version | sed -n 's/^cuda: //p')
if [ "$DEV" = sim ]; then
  "$TOWERTRAIN" --version | grep -q '^towertrain .*(backends: cpu sim[ ;)]'
  ok $? "--version lists sim beside cpu"
elif "$TOWERTRAIN" --version | grep -q 'backends: .*cuda'; then
  echo "$built" | grep -q '^sm_80 sm_90 +ptx (CUDA [0-9.]*, cuDNN 9\.[0-9.]*, NCCL 2\.[0-9.]*)$'
  ok $? "--version names the GPU architectures and the CUDA, cuDNN and NCCL versions ($built)"
else
  skip "--version names the GPU architectures" "built without CUDA"
fi

# a small job: LeNet on 4096 Fashion-MNIST samples, 2 epochs, deterministic
# the GPU kit (tests/gpu/kit.sh) brings its own copy of the data
DATA=${TT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tt_lenet_job "$T/lenet.cfg" 7 4096 2 2000

if [ "$GPUS" = 0 ]; then
  # the reason: CUDA's (no driver, no device), or the build's
  why='CUDA: '
  [ -n "$built" ] || why='towertrain was built without CUDA'
  tt_refused "device = gpu without a GPU: exit 2, one line with the reason ($why...), nothing written" \
    "towertrain: trainer.device = \"gpu\" but no GPU is available ($why" "$T/nogpu" \
    "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/nogpu"
  tt_refused "bench --device gpu without a GPU: exit 2, one line with the reason ($why...)" \
    "towertrain: bench: --device gpu: no GPU is available ($why" "" "$TOWERTRAIN" bench --device gpu
  "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/auto" --set 'trainer.device="auto"' \
    --set max_epoch=1 --set 'callbacks=()' >"$T/out" 2>"$T/err"
  [ $? = 0 ] && [ "$(grep -c 'trainer.device = "auto": no GPU' "$T/out")" = 1 ] &&
    grep -q 'training on the CPU' "$T/auto/log.log" && grep -q '^0 *cpu:0' "$T/out"
  ok $? "device = auto without a GPU: trains on the CPU, one log line says why"
  tt_skip_all "no GPU here" "LeNet on a GPU reaches the CPU run's accuracy" \
    "deterministic = true: two GPU runs give the same bits" \
    "TT_CUDA_GRAPH=1: a step replayed from a graph gives the eager bits" \
    "TT_CUDA_LAYOUT=nhwc: fp32 LeNet in float32 NHWC reaches the NCHW run's accuracy" \
    "TT_CUDA_LAYOUT=nhwc, deterministic = true: two runs give the same bits" \
    "a GPU checkpoint resumes on the CPU and a CPU one on the GPU" \
    "2 GPU towers: sync_replicated (NCCL), sync_parameter_server (ps_device cpu, gpu) equal simple" \
    "async on 2 GPU towers" "NCCL all-reduce correct at every bench size" \
    "2 MPI ranks of GPU towers equal simple" "NCCL over 2 MPI ranks" \
    "a tower id that does not exist: exit 2"
fi
[ -f "$DATA/train-images-idx3-ubyte.gz" ] ||
  tt_skip_all "dataset-fashion-mnist not installed" "GPU training runs"

# ---- LeNet on the GPU against the CPU ----
"$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/gpu1" > "$T/gpu1.out" 2>&1
ok $? "LeNet on one $DEV tower exits 0"
grep -q "^0 *$DEVNAME:0 .* [0-9]*\.[0-9] .* GiB" "$T/gpu1.out"
ok $? "the tower table names the $DEV, its capability and memory"
"$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/cpu1" --set 'trainer.device="cpu"' > /dev/null 2>&1

# ---- accuracy: LeNet on a GPU against the same job on the CPU ----
acc() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))[-1]["validation_accuracy"])' "$1"; }
if [ "$DEV" = sim ]; then
  # sim's fp32 arithmetic is the CPU kernels', so towertrain.cfg(5)'s
  # equivalence holds: the sim run ends on the CPU run's parameters up to
  # float rounding (1e-4 relative per tensor; measured: the same bits, one
  # tower has no reduction whose order could differ), so on its accuracy.
  # Deterministic runs: no random false failure, no statistics. A sim tower
  # that trains on anything but its staged batch misses by far.
  d=$(tt_same "$T/cpu1/model-128.safetensors" "$T/gpu1/model-128.safetensors" 1e-4 optimizer)
  ok $? "LeNet on sim ends on the CPU run's parameters and optimizer state, so at its accuracy (max rel diff $d; sim $(acc "$T/gpu1/stats.json"), CPU $(acc "$T/cpu1/stats.json"))"
else
  # 3 epochs on 12,000 normalised training images, validated on all 10,000
  # test images. The GPU run starts from the CPU run's parameters and batches
  # (same seed) but rounds otherwise, and SGD soon forgets which: at worst its
  # final accuracy is another draw from the spread over seeds. Measured on
  # the CPU over seeds 1-20: mean 0.839, sd 0.0062 (95% upper bound 0.0086).
  # The difference of two draws then has sd <= sqrt(2) x 0.0086 = 0.0122; a
  # one-sided false-failure rate of 1 in 1,000 (z = 3.09) gives the margin
  # 0.038, rounded to 0.04. So a GPU run 4 points below the CPU fails; the
  # floor 0.75 (14 sd under the mean) catches a GPU that learns nothing.
  tt_lenet_job "$T/acc.cfg" 7 12000 3 0
  "$TOWERTRAIN" run "$T/acc.cfg" --logdir "$T/acc_gpu" > /dev/null 2>&1
  "$TOWERTRAIN" run "$T/acc.cfg" --logdir "$T/acc_cpu" --set 'trainer.device="cpu"' > /dev/null 2>&1
  ga=$(acc "$T/acc_gpu/stats.json"); ca=$(acc "$T/acc_cpu/stats.json")
  $PY -c 'import sys; g, c = map(float, sys.argv[1:]); sys.exit(0 if g >= c - 0.04 and g > 0.75 else 1)' "$ga" "$ca"
  ok $? "LeNet on a GPU reaches the CPU run's accuracy within 0.04, 10,000 test images (GPU $ga, CPU $ca)"
fi

# ---- bitwise repeatability ----
"$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/gpu2" > /dev/null 2>&1
tt_same "$T/gpu1/model-128.safetensors" "$T/gpu2/model-128.safetensors" 0 optimizer >/dev/null
ok $? "deterministic = true: two $DEV runs give the same bits (parameters and optimizer state)"

# ---- the step captured in a CUDA graph (TT_CUDA_GRAPH=1): the eager bits ----
# (the graph replays the eager step's kernels with the same arguments; the
# learning rate and the first update's flag come from device memory)
TT_CUDA_GRAPH=1 "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/graph" > "$T/graph.out" 2>&1 &&
  grep -q 'cuda graph: [0-9]* step(s) replayed' "$T/graph.out" &&
  tt_same "$T/gpu1/model-128.safetensors" "$T/graph/model-128.safetensors" 0 optimizer >/dev/null
ok $? "TT_CUDA_GRAPH=1: LeNet's step captured in a graph and replayed on the $DEV gives the eager run's bits ($(grep 'cuda graph' "$T/graph.out" | tail -1))"

# ---- float32 NHWC (TT_CUDA_LAYOUT=nhwc): fp32 learns as in NCHW ----
# The same network up to rounding: every activation and gradient float32
# NHWC, convolutions reading a float32 KRSC copy of the filters
# (cuda_conv.c). It rounds otherwise than NCHW (another summation order in
# the convolutions and the bias gradient), and SGD soon forgets where it
# started from: at worst its final accuracy is another draw from the spread
# over seeds, as for the GPU-against-CPU check above, so the same margin:
# 0.04 for a one-sided false-failure rate of 1 in 1,000. On sim both runs
# are deterministic (no false failure at all). The log's layout line shows
# that the run was NHWC; deterministic = true gives it the same bits twice.
tt_lenet_job "$T/acc.cfg" 7 12000 3 0
[ -f "$T/acc_gpu/stats.json" ] ||
  "$TOWERTRAIN" run "$T/acc.cfg" --logdir "$T/acc_gpu" > /dev/null 2>&1
TT_CUDA_LAYOUT=nhwc "$TOWERTRAIN" run "$T/acc.cfg" --logdir "$T/acc_nhwc" > "$T/nhwc.out" 2>&1
na=$(acc "$T/acc_nhwc/stats.json"); ga=$(acc "$T/acc_gpu/stats.json")
grep -q '^activations between layers: float32 NHWC$' "$T/nhwc.out" &&
  $PY -c 'import sys; n, g = map(float, sys.argv[1:]); sys.exit(0 if n >= g - 0.04 and n > 0.75 else 1)' "$na" "$ga"
ok $? "TT_CUDA_LAYOUT=nhwc: LeNet in fp32 keeps float32 NHWC on the $DEV and reaches the NCHW run's accuracy within 0.04, 10,000 test images (NHWC $na, NCHW $ga)"
TT_CUDA_LAYOUT=nhwc "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/nhwc1" > /dev/null 2>&1 &&
  TT_CUDA_LAYOUT=nhwc "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/nhwc2" > /dev/null 2>&1 &&
  tt_same "$T/nhwc1/model-128.safetensors" "$T/nhwc2/model-128.safetensors" 0 optimizer >/dev/null
ok $? "TT_CUDA_LAYOUT=nhwc, deterministic = true: two fp32 $DEV runs in float32 NHWC give the same bits"

# ---- checkpoints across devices ----
"$TOWERTRAIN" resume "$T/gpu1" --max-epoch 3 --set 'trainer.device="cpu"' > "$T/r1.out" 2>&1 &&
  [ -f "$T/gpu1/model-192.safetensors" ] &&
  "$TOWERTRAIN" resume "$T/cpu1" --max-epoch 3 --set "trainer.device=\"$DEV\"" > "$T/r2.out" 2>&1 &&
  [ -f "$T/cpu1/model-192.safetensors" ] && grep -q "$DEVNAME:0" "$T/r2.out"
ok $? "a $DEV checkpoint resumes on the CPU and a CPU one on the $DEV"

# ---- the trainers' equivalence (towertrain.cfg(5), TRAINER) on 2 devices ----
# the same 32 steps of batch 128 in each; GPUs round otherwise in each
# (cuDNN's algorithms, NCCL's order): 1e-3 of each tensor's largest value;
# sim towers compute with the CPU kernels and differ in the all-reduce's
# summation order alone: 1e-4. Deterministic runs: no random failures.
tol=1e-3
[ "$DEV" = sim ] && tol=1e-4
MPI=
"$TOWERTRAIN" --version | grep -q mpi && command -v mpirun >/dev/null 2>&1 &&
  MPI="mpirun --allow-run-as-root --oversubscribe -np 2"
if [ "$GPUS" -ge 2 ]; then
  common="--set max_epoch=1 --set callbacks=(\"model_saver\") --set dataflow.shuffle=false"
  "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/eq_simple" $common --set dataflow.batch_size=128 >/dev/null 2>&1
  "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/eq_rep" $common \
    --set "trainer={type=\"sync_replicated\"; device=\"$DEV\"; towers=[0,1]; gradient_packing=4;}" > "$T/rep.out" 2>&1
  "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/eq_psc" $common \
    --set "trainer={type=\"sync_parameter_server\"; device=\"$DEV\"; towers=[0,1]; ps_device=\"cpu\";}" >/dev/null 2>&1
  "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/eq_psg" $common \
    --set "trainer={type=\"sync_parameter_server\"; device=\"$DEV\"; towers=[0,1]; ps_device=\"gpu\";}" >/dev/null 2>&1
  d=
  for r in eq_rep eq_psc eq_psg; do
    d="$d $(tt_same "$T/eq_simple/model-32.safetensors" "$T/$r/model-32.safetensors" $tol)" || d="$d $r differs"
  done
  case $d in *differs*) false ;; esac
  ok $? "2 $DEV towers: sync_replicated ($ALLREDUCE, 4 packs), sync_parameter_server (ps_device cpu, gpu) equal simple with the double batch within $tol (max rel diff$d)"
  grep -q "allreduce: $ALLREDUCE over 2 GPU(s) (1 rank(s) x 2 tower(s)), 4 pack(s)" "$T/rep.out"
  ok $? "sync_replicated on 2 $DEV towers says it all-reduces with $ALLREDUCE, in 4 packs"
  "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/async" --set max_epoch=1 \
    --set "trainer={type=\"async\"; device=\"$DEV\"; towers=[0,1];}" > /dev/null 2>&1 &&
    $PY -c 'import sys, numpy as np, tt_safetensors as st
t, _ = st.load(sys.argv[1]); assert all(np.all(np.isfinite(v)) for v in t.values())' "$T/async/model-32.safetensors"
  ok $? "async on 2 $DEV towers trains, its parameters finite (the order of its updates is timing's: no equality)"
  # 2 ranks (2 towers each where there are 4 devices): one communicator
  # over every device of every rank, each rank its slices of the batch
  if [ -n "$MPI" ]; then
    per=$((GPUS >= 4 ? 2 : 1))
    steps=$((32 / per))
    ref=$T/eq_simple
    if [ $per = 2 ]; then
      ref=$T/eq_simple4
      "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$ref" $common --set dataflow.batch_size=256 >/dev/null 2>&1
    fi
    d=
    $MPI "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/eq_mpi" $common \
      --set "trainer={type=\"sync_replicated\"; device=\"$DEV\"; nr_tower=$per; gradient_packing=4;}" > "$T/mpi.out" 2>&1 &&
      grep -q "allreduce: $ALLREDUCE over $((2 * per)) GPU(s) (2 rank(s) x $per tower(s)), 4 pack(s)" "$T/mpi.out" &&
      d=$(tt_same "$ref/model-$steps.safetensors" "$T/eq_mpi/model-$steps.safetensors" $tol)
    ok $? "2 MPI ranks x $per $DEV tower(s), 4 packs: one $ALLREDUCE all-reduce over $((2 * per)), equal simple with the batch of all within $tol (max rel diff $d)"
  else
    skip "2 MPI ranks of $DEV towers equal simple" "needs mpirun and an MPI build"
  fi
else
  skip "2 GPU towers: sync_replicated (NCCL), sync_parameter_server equal simple" "one GPU"
  skip "async on 2 GPU towers" "one GPU"
  skip "2 MPI ranks of GPU towers equal simple" "one GPU"
fi

# ---- NCCL at every size of the bench table ----
if [ "$DEV" = sim ]; then
  skip "the device all-reduce at every bench size" "bench has no sim device (the trainings above check the sim all-reduce)"
else
  "$TOWERTRAIN" bench --device gpu -b 8 -e 128M -f 2 -n 2 -w 1 --json "$T/nccl.json" > "$T/nccl.out" 2>&1
  rc=$?
  $PY - "$T/nccl.json" $rc <<'PYEOF'
import json, sys
rows = json.load(open(sys.argv[1]))
assert int(sys.argv[2]) == 0
assert len(rows) == 25, len(rows)   # 8 B .. 128 MiB by 2
assert all(r["out_of_place"]["wrong"] == 0 and r["in_place"]["wrong"] == 0 for r in rows)
PYEOF
  ok $? "NCCL all-reduce correct at every bench size, 8 B to 128 MiB, out-of-place and in-place"
  if [ "$GPUS" -ge 2 ] && [ -n "$MPI" ]; then
    $MPI "$TOWERTRAIN" bench --device gpu --towers 1 \
      -b 1K -e 16M -f 4 -n 2 -w 1 > "$T/mpib.out" 2>&1 &&
      grep -q '# Out of bounds values : 0 OK' "$T/mpib.out" && grep -q '2 rank(s) x 1 GPU' "$T/mpib.out"
    ok $? "NCCL over 2 MPI ranks: one communicator, no wrong element"
  else
    skip "NCCL over 2 MPI ranks" "needs 2 GPUs, mpirun and an MPI build"
  fi
fi

# ---- errors ----
tt_refused "a tower id that does not exist: exit 2, one line, nothing written" \
  "towertrain: trainer.towers[0]: $DEVNAME:$GPUS: no such" "$T/badtower" \
  "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/badtower" --set "trainer.towers=[$GPUS]"
tt_done
