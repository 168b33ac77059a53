#!/bin/sh
# e2e_sim.sh - GPU towers' host code on simulated GPUs (trainer.device =
# "sim", towertrain.cfg(5)): the staged input, device memory, the device
# all-reduce and its packs started from grad-ready hooks, loss scaling and
# 16-bit storage, run here without a GPU (TAP), beyond what the GPU scripts
# check on sim (tests/e2e_sim_gpu*.sh: LeNet against the CPU, every trainer
# type on 1 and 2 towers, 2 MPI ranks, SIGTERM, bad tower ids).
#
# fp32: sim towers compute with the CPU backend's kernels, so sync_replicated
# (with and without packs) and sync_parameter_server on 2 and 3 sim towers,
# with batchnorm, reach the CPU towers' parameters up to the rounding of the
# all-reduce's summation order (tolerance 1e-4 relative, per tensor, after 8
# steps; the runs are deterministic, same bits every time). fp16 and bf16
# with SGD and momentum stay near the fp32 run in every trainer type (fp16
# unscaled in each: a defect made simple's fp16 updates 65536 times too
# large). Checkpoint and resume on 2 towers with packs.
. "$(dirname "$0")/tt_lib.sh"

tt_job "$T/job.cfg" seed=11 batch=12 layers='
  { name = "conv"; type = "conv2d"; filters = 8; kernel = 3; padding = 1; activation = "relu"; },
  { name = "pool"; type = "maxpool"; kernel = 2; },
  { name = "bn"; type = "batchnorm"; },
  { name = "fc0"; type = "dense"; units = 32; activation = "relu"; },
  { name = "fc1"; type = "dense"; units = 4; }'
# (batchnorm after the relu: a conv bias right before a batchnorm has a
# gradient of ~0, whose rounding a relative tolerance cannot judge)
FINAL=model-8.safetensors

# run NAME TRAINER-SETTINGS [OVERRIDES...]: one run on the CPU and one on sim
run_pair() {
  name=$1 trainer=$2
  shift 2
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/cpu_$name" --quiet \
    --set "trainer={$trainer device=\"cpu\"; threads_per_tower=1;}" "$@" >"$T/cpu.out" 2>&1 &&
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/sim_$name" \
    --set "trainer={$trainer device=\"sim\";}" "$@" >"$T/sim_$name.out" 2>&1
}

# ---- fp32: the synchronous trainers on 2 and 3 towers equal CPU towers ----
for c in "rep2|type=\"sync_replicated\"; nr_tower=2;" \
         "rep3|type=\"sync_replicated\"; nr_tower=3;" \
         "rep3_packs|type=\"sync_replicated\"; nr_tower=3; gradient_packing=4;" \
         "ps3_gpu|type=\"sync_parameter_server\"; nr_tower=3; ps_device=\"gpu\";"; do
  name=${c%%|*} trainer=${c#*|}
  run_pair "$name" "$trainer"
  rc=$?
  d=$(tt_same "$T/cpu_$name/$FINAL" "$T/sim_$name/$FINAL" 1e-4 optimizer); s=$?
  ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "fp32 $name: sim towers end with the CPU towers' parameters and optimizer state (max rel diff $d)"
done
grep -q '^0 *sim:0 ' "$T/sim_rep3.out" && grep -q '^2 *sim:2 ' "$T/sim_rep3.out" &&
  grep -q 'allreduce: sim over 3 GPU(s) (1 rank(s) x 3 tower(s)), 4 pack(s)' "$T/sim_rep3_packs.out"
ok $? "the tower table names sim:0 .. sim:2; the all-reduce is the simulated device's, in 4 packs"

# ---- 16-bit: SGD and momentum converge in every trainer type ----
# 3 epochs of 8 steps from the same start (deterministic runs: no random
# failures). The train loss falls from epoch to epoch, and each epoch's stays
# within 1% of the fp32 run's: measured here within 0.1% (fp16 and bf16
# round the operands of dense and conv2d only). An fp16 update left scaled
# by 65536 (the defect) ends in "loss became NaN" or far from fp32.
for opt in sgd momentum; do
  oset="optimizer={type=\"$opt\"; learning_rate=0.05;}"
  for c in "simple|type=\"simple\";" \
           "rep3_packs|type=\"sync_replicated\"; nr_tower=3; gradient_packing=4;" \
           "ps2|type=\"sync_parameter_server\"; nr_tower=2;" \
           "async1|type=\"async\"; nr_tower=1;"; do
    name=${c%%|*} trainer=${c#*|}
    for p in fp32 fp16 bf16; do
      "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/${p}_${opt}_$name" --quiet --set max_epoch=3 \
        --set 'monitors=("json")' --set "$oset" \
        --set "trainer={$trainer device=\"sim\"; precision=\"$p\";}" >"$T/p.out" 2>&1
      rc=$?
      [ $p = fp32 ] && continue
      l=$(tt_loss_close "$T/fp32_${opt}_$name/stats.json" "$T/${p}_${opt}_$name/stats.json"); s=$?
      ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "$p $opt $name on sim converges: train loss by epoch $l, within 1% of fp32's"
      [ $rc = 0 ] || sed 's/^/# /' "$T/p.out" | tail -n 3
    done
  done
done

# ---- checkpoint and resume on 2 sim towers with packs ----
sim2='trainer={type="sync_replicated"; device="sim"; nr_tower=2; gradient_packing=4;}'
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/straight" --quiet --set "$sim2" --set max_epoch=2 &&
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/halves" --quiet --set "$sim2" &&
  "$TOWERTRAIN" resume "$T/halves" --quiet --max-epoch 2
rc=$?
d=$(tt_same "$T/straight/model-16.safetensors" "$T/halves/model-16.safetensors" 0 optimizer); s=$?
ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "sim: 1 epoch, a checkpoint, resume to 2 gives the bits of 2 straight epochs (max rel diff $d)"

# ---- the 16-bit scratch is sized for every layer that uses it ----
# global_avgpool runs as a dense call over [n * C, H * W], in float32 on a
# device whatever the precision (dense_forward_fp32), so it needs no 16-bit
# copies and setup reserves none for it: were it to call the 16-bit dense,
# this model's largest call, the sim would refuse the call past the
# reservation, as the CUDA backend does, and the run would fail
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/gap" --quiet --set max_epoch=1 \
  --set 'dataflow.source={type="fake"; shape=[4, 16, 16]; classes=4; size=128;}' \
  --set 'model={input=[4, 16, 16]; classes=4; layers=({name="gap"; type="global_avgpool";},
                 {name="fc"; type="dense"; units=4;});}' \
  --set 'trainer={type="simple"; device="sim"; precision="bf16";}' >"$T/gap.out" 2>&1
ok $? "bf16 on sim: global_avgpool runs as a float32 dense call, outside the 16-bit scratch"
sed 's/^/# /' "$T/gap.out" | tail -n 2

tt_done
