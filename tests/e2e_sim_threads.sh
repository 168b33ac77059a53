#!/bin/sh
# e2e_sim_threads.sh - the threads of GPU towers on simulated GPUs, short
# enough for make check-tsan: 2 sim towers whose gradient packs go to the
# device all-reduce from the grad-ready hooks during backward (fp32 and
# fp16, whose packs are unscaled before they go), and sync_parameter_server
# with its ranges on the devices, each recording a timeline; each run's
# parameters equal the CPU towers' (fp32) or stay finite and near them
# (fp16). TAP.
. "$(dirname "$0")/tt_lib.sh"

tt_job "$T/job.cfg" shape="1, 8, 8" size=128 steps=6 data='prefetch = { workers = 2; queue = 4; };' \
  layers='
  { name = "conv"; type = "conv2d"; filters = 8; kernel = 3; padding = 1; activation = "relu"; },
  { name = "fc0"; type = "dense"; units = 16; activation = "relu"; },
  { name = "fc1"; type = "dense"; units = 4; }'
F=model-6.safetensors
# the sim runs record a timeline: its spans' events on both queues of each
# device (the packs' on the communication queue), read back after the
# window, under TSan too; recording changes no parameter
tl='( { type = "model_saver"; max_to_keep = 0; }, { type = "timeline"; steps = [2, 5]; } )'

for c in "packs|type=\"sync_replicated\"; gradient_packing=4;" \
         "ps_gpu|type=\"sync_parameter_server\"; ps_device=\"gpu\";"; do
  name=${c%%|*} set=${c#*|}
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/cpu_$name" --quiet \
    --set "trainer={$set nr_tower=2; threads_per_tower=1; device=\"cpu\";}" &&
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/sim_$name" --quiet \
    --set "trainer={$set nr_tower=2; device=\"sim\";}" --set "callbacks=$tl"
  rc=$?
  d=$(tt_same "$T/cpu_$name/$F" "$T/sim_$name/$F" 1e-4 optimizer); s=$?
  ok $([ $rc = 0 ] && [ $s = 0 ] && [ -s "$T/sim_$name/timeline-2-5.json" ]; echo $?) \
    "2 sim towers, $name, a timeline recorded: the CPU towers' parameters (max rel diff $d)"
done
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/sim_fp16" --quiet \
  --set 'trainer={type="sync_replicated"; nr_tower=2; device="sim"; gradient_packing=4; precision="fp16";}'
rc=$?
d=$(tt_same "$T/cpu_packs/$F" "$T/sim_fp16/$F" 0.1); s=$?
ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "2 sim towers, fp16, 4 packs unscaled as they go: near the fp32 CPU run (max rel diff $d)"
tt_done
