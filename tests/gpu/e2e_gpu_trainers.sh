#!/bin/sh
# End-to-end on ONE GPU (TAP): what a machine with a single GPU can show of
# the GPU towers beyond e2e_gpu.sh. Every trainer type with one GPU tower
# (simple, sync_replicated, sync_parameter_server with ps_device "cpu" and
# "gpu", async) trains LeNet and ends where simple does; SIGTERM mid-run
# stops a GPU run with exit status 143 and a checkpoint, which resumes to the
# end; `eval` of a GPU run's log directory gives the accuracy its
# inference_runner logged, on the GPU and on the CPU; a timeline of a GPU
# tower holds device-side layer spans (events on its stream) that nest in
# their step and sum to within 10% of it; with gradient packing (2 towers
# where there are 2 devices, else 1) the packs' spans, events on the
# communication stream, overlap backward and nest in their tower's step,
# and `profile` splits them into hidden and exposed. Without a GPU: every check a
# visible SKIP. TT_DEVICE=sim runs the same checks on a simulated GPU
# (tt_device; tests/e2e_sim_gpu_trainers.sh in make check).
. "$(dirname "$0")/../tt_lib.sh"
tt_device
TRAINERS="simple sync_replicated sync_parameter_server:cpu sync_parameter_server:gpu async"

if [ "$GPUS" = 0 ]; then
  for t in $TRAINERS; do
    skip "$t on one GPU tower trains LeNet and ends where simple does" "no GPU here"
  done
  tt_skip_all "no GPU here" "SIGTERM mid-run on a GPU: exit 143, a checkpoint; resume runs to the end" \
    "eval of a GPU run: the accuracy its inference_runner logged" \
    "eval of a GPU checkpoint on the CPU: the same accuracy within 0.005" \
    "a timeline of one GPU tower: device-side layer spans nest in their step, sum within 10%, abut, one event each" \
    "a timeline of GPU towers with gradient packing: device-side pack spans overlap backward" \
    "profile of GPU towers with gradient packing: all-reduce hidden and exposed from the pack spans"
fi

DATA=${TT_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -f "$DATA/train-images-idx3-ubyte.gz" ] ||
  tt_skip_all "dataset-fashion-mnist not installed" "GPU training runs on one GPU"
tt_lenet_job "$T/lenet.cfg" 13 2048 1 2000

# ---- every trainer type on one GPU tower: one tower of batch 64 is the
# same computation as simple's; the parameter-server and async paths reduce
# and update elsewhere (host or device), so they may round differently:
# 1e-3 of each tensor's largest value on a GPU, 1e-4 on sim (the CPU
# kernels), as e2e_gpu.sh's 2-device equivalence. Deterministic runs: no
# random failures ----
tol=1e-3
[ "$DEV" = sim ] && tol=1e-4
for t in $TRAINERS; do
  type=${t%%:*}
  case $t in
    *:*) tr="{ type = \"$type\"; device = \"$DEV\"; towers = [0]; ps_device = \"${t#*:}\"; }" ;;
    *) tr="{ type = \"$type\"; device = \"$DEV\"; towers = [0]; }" ;;
  esac
  d=$(echo "$t" | tr ':' '_')
  "$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/$d" --set "trainer=$tr" >"$T/$d.out" 2>&1
  rc=$?
  if [ "$t" = simple ]; then
    [ $rc = 0 ] && grep -q "$DEVNAME:0" "$T/$d.out" && [ -f "$T/$d/model-32.safetensors" ]
    ok $? "simple on one $DEV tower trains LeNet, 32 steps (exit status $rc)"
  else
    [ $rc = 0 ] && grep -q "$DEVNAME:0" "$T/$d.out" &&
      tt_same "$T/simple/model-32.safetensors" "$T/$d/model-32.safetensors" $tol >"$T/same" 2>&1
    ok $? "$t on one $DEV tower trains LeNet and ends where simple does, within $tol (exit status $rc; $(tail -n 1 "$T/same" 2>/dev/null))"
  fi
  [ $rc = 0 ] || sed 's/^/# /' "$T/$d.out" | tail -n 5
done

# ---- SIGTERM on a GPU run, then resume ----
"$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/term" --quiet --set max_epoch=100000 \
  --set 'callbacks=( { type = "model_saver"; max_to_keep = 0; } )' >"$T/term.out" 2>"$T/term.err" &
pid=$!
i=0
while [ ! -f "$T/term/stats.json" ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i + 1)); done
kill -TERM $pid
wait $pid
rc=$?
last=$(head -n 1 "$T/term/checkpoint" 2>/dev/null)
step=${last#model-}
step=${step%.safetensors}
[ $rc = 143 ] && [ -f "$T/term/$last" ] && [ "$step" -ge 32 ] && [ ! -s "$T/term.err" ] &&
  epochs=$((step / 32 + 1)) &&
  "$TOWERTRAIN" resume "$T/term" --quiet --max-epoch $epochs >"$T/resume.out" 2>&1 &&
  [ "$(head -n 1 "$T/term/checkpoint")" = "model-$((epochs * 32)).safetensors" ]
ok $? "SIGTERM mid-run on a $DEV: exit status 143 (got $rc), a checkpoint of the step reached ($last), resume runs to the end of the next epoch"
[ -s "$T/term.err" ] && sed 's/^/# /' "$T/term.err" | head -n 5

# ---- eval of the simple run: on the GPU, then on the CPU ----
logged=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))[-1]["validation_accuracy"])' "$T/simple/stats.json")
"$TOWERTRAIN" eval "$T/simple" --json "$T/eval_gpu.json" >"$T/eval_gpu.out" 2>&1
rc=$?
# the same model, data and batches on the same device: at most one sample
# of the 2000 may fall on the other side of a tie
[ $rc = 0 ] && $PY -c 'import json,sys; e = json.load(open(sys.argv[1]))
sys.exit(0 if e["samples"] == 2000 and abs(e["accuracy"] - float(sys.argv[2])) <= 1 / 2000 else 1)' "$T/eval_gpu.json" "$logged"
ok $? "eval of a $DEV run: the accuracy its inference_runner logged ($logged; exit status $rc)"
"$TOWERTRAIN" eval "$T/simple" --set 'trainer.device="cpu"' --json "$T/eval_cpu.json" >"$T/eval_cpu.out" 2>&1
rc=$?
# float32 on another device rounds otherwise (~1e-6 of the logits): a
# sample changes class only at a near-tie; 10 of 2000 would be a bug
[ $rc = 0 ] && $PY -c 'import json,sys; e = json.load(open(sys.argv[1]))
sys.exit(0 if abs(e["accuracy"] - float(sys.argv[2])) <= 0.005 else 1)' "$T/eval_cpu.json" "$logged"
ok $? "eval of a $DEV checkpoint on the CPU: the same accuracy within 0.005 (exit status $rc)"

# ---- a timeline of one device tower: its layer spans are device time
# (events on the tower's queue, read back after the window); batch 256, so
# that the device's idle time while the host reads each step's loss is a
# small part of the step ----
"$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/timeline" --quiet --set dataflow.batch_size=256 \
  --set dataflow.limit=4096 --set 'callbacks=( { type = "timeline"; steps = [3, 10]; } )' \
  >"$T/timeline.out" 2>&1
rc=$?
[ $rc = 0 ] && $PY "$TT_SRCDIR/tests/tt_timeline.py" "$T/timeline/timeline-3-10.json" "$DEV" \
  --steps 3-10 --layer-sum --abut --device-events --model "$TT_SRCDIR/models/lenet.cfg" \
  >"$T/timeline.tap" 2>&1
ok $? "a timeline of one $DEV tower: device-side layer spans nest in their step, sum within 10%, abut, one event each (exit status $rc)"
[ $rc = 0 ] || sed 's/^/# /' "$T/timeline.out" | tail -n 5
grep '^not ok' "$T/timeline.tap" 2>/dev/null | sed 's/^/# /'

# ---- gradient packing: each pack's all-reduce measured on the device
# (timing events on the tower's communication queue before and after its
# group, read back after the window): the spans on the all-reduce rows,
# with bytes and algorithm, overlap backward spans (the packs run beside
# backward) and nest in their tower's step (its compute queue waits for
# them there); profile's all-reduce rows are those spans, hidden and
# exposed (profile's step time, idle device to idle device, holds the last
# step's backward, which the host's step spans in the trace do not:
# tt_profile.py allows up to 2 device steps of it over the 20 steps).
# 2 towers where there are 2 devices (sim: always), else one,
# whose packs still go through the communicator (but an all-reduce among
# one may take no time: nothing need be hidden). Batch 128 a tower: the
# backward outlasts the first packs' all-reduce. ----
towers="[0, 1]" nt=2 tl_one= prof_how=--hidden overlap="overlap it, "
[ "$GPUS" -ge 2 ] || { towers="[0]"; nt=1; tl_one=--no-hidden; prof_how=--packs; overlap=; }
packed="{ type = \"sync_replicated\"; device = \"$DEV\"; towers = $towers; gradient_packing = 4; }"
"$TOWERTRAIN" run "$T/lenet.cfg" --logdir "$T/packed" --quiet --set dataflow.batch_size=128 \
  --set dataflow.limit=4096 --set "trainer=$packed" \
  --set 'callbacks=( { type = "timeline"; steps = [3, 10]; } )' >"$T/packed.out" 2>&1
rc=$?
[ $rc = 0 ] && $PY "$TT_SRCDIR/tests/tt_timeline.py" "$T/packed/timeline-3-10.json" "$DEV packed" \
  --towers $nt --steps 3-10 --device-packs $tl_one --model "$TT_SRCDIR/models/lenet.cfg" \
  >"$T/packed.tap" 2>&1 && grep -q "\"algorithm\": \"$ALLREDUCE\"" "$T/packed/timeline-3-10.json"
ok $? "a timeline of $nt $DEV tower(s) with gradient packing: device-side pack spans ($ALLREDUCE, bytes) begin during backward, ${overlap}nest in their step (exit status $rc)"
[ $rc = 0 ] || sed 's/^/# /' "$T/packed.out" | tail -n 5
grep '^not ok' "$T/packed.tap" 2>/dev/null | sed 's/^/# /'
"$TOWERTRAIN" profile "$T/lenet.cfg" --steps 20 --set dataflow.batch_size=128 \
  --set "trainer=$packed" --set 'callbacks=( )' --json "$T/packprof.json" \
  --trace "$T/packprof_trace.json" >"$T/packprof.out" 2>&1
rc=$?
[ $rc = 0 ] && $PY "$TT_SRCDIR/tests/tt_profile.py" "$T/packprof.json" "$T/packprof_trace.json" \
  "$TT_SRCDIR/models/lenet.cfg" 128 "$DEV profile" $prof_how >"$T/packprof.tap" 2>&1
ok $? "profile of $nt $DEV tower(s) with gradient packing: all-reduce hidden and exposed from the pack spans, rows sum to the step within 5% (exit status $rc)"
[ $rc = 0 ] || sed 's/^/# /' "$T/packprof.out" | tail -n 5
grep '^not ok' "$T/packprof.tap" 2>/dev/null | sed 's/^/# /'
tt_done
