#!/bin/sh
# e2e_sim_accumulate.sh - trainer.accumulate on device towers (towertrain.cfg(5),
# TRAINER accumulate), run on simulated GPUs: each micro-batch staged on its
# own, the sum kept in device memory, one all-reduce per update (packs from
# the grad-ready hooks only when the sum is final), fp16's sum unscaled once.
#
# A model without batchnorm or dropout (dense relu dense), so accumulate 4 x
# batch 8 computes the gradient of batch 32. In every trainer type (simple,
# sync_replicated on 2 sim towers with and without gradient_packing,
# sync_parameter_server with ps_device "cpu" and "gpu", async on 1 tower) the
# sim run with accumulate 4 x batch 8 must end (8 steps, momentum SGD) with the
# parameters and optimizer state of the sim run with batch 32 and of the CPU
# run with accumulate 4, within 1e-4 relative per tensor: the runs are
# deterministic (same bits every time), so there are no random false
# failures; they differ only in float32 summation order (<= 3e-7 measured), and
# a micro-batch staged twice or skipped, a sum not averaged or an update
# applied per micro-batch moves them by far more than 1e-4.
# fp16 with accumulate 2 converges near fp32, and an overflow in one
# micro-batch (TT_FAULT_GRAD) skips that whole update.
. "$(dirname "$0")/tt_lib.sh"

# learnable data: 512 normal images, labelled by the argmax of a fixed
# linear map (the fake source's random labels teach a dense model nothing)
$PY -c 'import sys, numpy as np
rng = np.random.default_rng(5)
x = rng.standard_normal((512, 1, 16, 16)).astype(np.float32)
y = np.argmax(x.reshape(512, -1) @ rng.standard_normal((256, 4)), axis=1).astype(np.int64)
np.save(sys.argv[1] + "/x.npy", x)
np.save(sys.argv[1] + "/y.npy", y)' "$T" || { echo "Bail out! numpy could not write the data"; exit 99; }
tt_job "$T/job.cfg" seed=5 lr=0.1 source="{ type = \"npy\"; images = \"$T/x.npy\"; labels = \"$T/y.npy\"; }" \
  layers='
  { name = "fc0"; type = "dense"; units = 32; activation = "relu"; },
  { name = "fc1"; type = "dense"; units = 4; }'
# (8356 parameters: gradient_packing = 4 makes 4 packs of >= 1024)
FINAL=model-8.safetensors

# train DIR DEVICE TOWER-BATCH ACCUMULATE TRAINER-SETTINGS [OVERRIDES...]
# (its variables are prefixed: shell functions share the caller's; $launch,
# empty or mpirun's command, runs towertrain)
launch=
train() {
  tr_dir=$1 tr_dev=$2 tr_batch=$3 tr_acc=$4 tr_set=$5
  shift 5
  $launch "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/$tr_dir" --set "dataflow.batch_size=$tr_batch" \
    --set "trainer={$tr_set device=\"$tr_dev\"; threads_per_tower=1; accumulate=$tr_acc;}" \
    "$@" >"$T/$tr_dir.out" 2>&1 || { sed 's/^/# /' "$T/$tr_dir.out" | tail -n 3; return 1; }
}

# ---- fp32: accumulate 4 x batch 8 on sim = batch 32 on sim = CPU accumulate 4 ----
for c in "simple|1|type=\"simple\";" \
         "rep2|2|type=\"sync_replicated\"; nr_tower=2;" \
         "rep2_packs|2|type=\"sync_replicated\"; nr_tower=2; gradient_packing=4;" \
         "ps2_cpu|2|type=\"sync_parameter_server\"; nr_tower=2; ps_device=\"cpu\";" \
         "ps2_gpu|2|type=\"sync_parameter_server\"; nr_tower=2; ps_device=\"gpu\";" \
         "async1|1|type=\"async\"; nr_tower=1;"; do
  name=${c%%|*} rest=${c#*|}
  towers=${rest%%|*} trainer=${rest#*|}
  big=$((32 / towers)) micro=$((8 / towers))
  train "sim_acc_$name" sim $micro 4 "$trainer" &&
    train "sim_big_$name" sim $big 1 "$trainer" &&
    train "cpu_acc_$name" cpu $micro 4 "$trainer"
  rc=$?
  d1=$(tt_same "$T/sim_big_$name/$FINAL" "$T/sim_acc_$name/$FINAL" 1e-4 optimizer); s1=$?
  d2=$(tt_same "$T/cpu_acc_$name/$FINAL" "$T/sim_acc_$name/$FINAL" 1e-4 optimizer); s2=$?
  ok $([ $rc = 0 ] && [ $s1 = 0 ]; echo $?) "$name: sim, accumulate 4 x batch $micro per tower ends as sim with batch $big (max rel diff $d1)"
  ok $([ $rc = 0 ] && [ $s2 = 0 ]; echo $?) "$name: sim, accumulate 4 ends as CPU towers with accumulate 4 (max rel diff $d2)"
done
grep -q 'allreduce: sim over 2 GPU(s) (1 rank(s) x 2 tower(s)), 4 pack(s)' "$T/sim_acc_rep2_packs.out"
ok $? "rep2_packs: the sim all-reduce runs in 4 packs with accumulate 4"

# ---- 2 MPI ranks x 2 sim towers with packs, accumulate 2 = the CPU towers ----
if "$TOWERTRAIN" --version | grep -q mpi && command -v mpirun >/dev/null; then
  packs='type="sync_replicated"; nr_tower=2; gradient_packing=4;'
  launch="mpirun --allow-run-as-root --oversubscribe -np 2"
  train mpi_sim sim 4 2 "$packs" && train mpi_cpu cpu 4 2 "$packs"
  rc=$?
  launch=
  d=$(tt_same "$T/mpi_cpu/$FINAL" "$T/mpi_sim/$FINAL" 1e-4 optimizer); s=$?
  ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "2 ranks x 2 sim towers, 4 packs, accumulate 2: the CPU towers' parameters (max rel diff $d)"
else
  skip "2 ranks x 2 sim towers, accumulate 2" "built without MPI or no mpirun"
fi

# ---- fp16, accumulate 2: converges near fp32 in every trainer type ----
# 3 epochs of 8 steps from the same start (deterministic: no random
# failures): the train loss falls, and each epoch's is within 1% of the fp32
# run's with accumulate 2 (tt_loss_close). A sum left scaled (by 65536), or
# unscaled twice, ends in NaN or far from fp32.
for c in "simple|1|type=\"simple\";" \
         "rep2_packs|2|type=\"sync_replicated\"; nr_tower=2; gradient_packing=4;" \
         "ps2_gpu|2|type=\"sync_parameter_server\"; nr_tower=2; ps_device=\"gpu\";" \
         "async1|1|type=\"async\"; nr_tower=1;"; do
  name=${c%%|*} rest=${c#*|}
  towers=${rest%%|*} trainer=${rest#*|}
  micro=$((16 / towers))
  for p in fp32 fp16; do
    train "${p}_$name" sim $micro 2 "$trainer precision=\"$p\";" --set max_epoch=3 \
      --set 'monitors=("json")'
    rc=$?
  done
  l=$(tt_loss_close "$T/fp32_$name/stats.json" "$T/fp16_$name/stats.json"); s=$?
  ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "fp16 $name on sim, accumulate 2 x batch $micro: train loss by epoch $l, within 1% of fp32's"
done

# ---- fp16: an overflow in one micro-batch skips the whole update ----
# TT_FAULT_GRAD=3 makes tower 0's first micro-batch of step 3 Inf/NaN; the
# other micro-batch and tower are finite. Step 3's update alone is skipped
# (one log line, the loss scale halved), and training goes on, finite.
TT_FAULT_GRAD=3 train fault sim 8 2 \
  "type=\"sync_replicated\"; nr_tower=2; gradient_packing=4; precision=\"fp16\";"
rc=$?
skipped=$(grep -c 'update skipped' "$T/fault.out")
grep -q '^global step 3: gradients hold Inf or NaN at loss scale 65536: update skipped, loss scale now 32768' "$T/fault.out"
s=$?
$PY -c 'import sys, numpy as np, tt_safetensors as st
t, _ = st.load(sys.argv[1]); assert all(np.all(np.isfinite(v)) for v in t.values())' "$T/fault/$FINAL"
f=$?
ok $([ $rc = 0 ] && [ "$skipped" = 1 ] && [ $s = 0 ] && [ $f = 0 ]; echo $?) "fp16, accumulate 2 on 2 sim towers with packs: an overflow in one micro-batch of step 3 skips that update only ($skipped skipped), the parameters stay finite"
tt_done
