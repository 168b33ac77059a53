#!/bin/sh
# e2e_sim_graph.sh - the captured step (TT_CUDA_GRAPH=1, towertrain(1),
# ENVIRONMENT; src/train/step_graph.c) on a simulated GPU, through the
# binary (TAP):
# - LeNet with momentum SGD, Adam and AdamW, LeNet with dropout, and
#   ResNet-20 (batchnorm, the fused residual add) in fp32 and bf16, each
#   with a learning rate (and dropout's seed) that changes at every step:
#   the captured run ends with the eager run's parameters and optimizer
#   state bit for bit, and its log says how many steps were replayed (so it
#   cannot pass by staying eager). A graph that kept a per-step value of its
#   capture (the rate or the seed passed by value) ends elsewhere: the
#   schedule moves the rate, and the step the seed, at every step.
# - a capture that fails (TT_SIM_FAULT=capture_error) logs one line, and
#   the run goes on eagerly to the eager run's bits;
# - jobs a graph cannot serve (fp16's loss scaling, LARS, CPU towers) say
#   so in one line and train eagerly; a bad TT_CUDA_GRAPH is refused.
# The runs are deterministic: no statistical margin.
. "$(dirname "$0")/tt_lib.sh"

SCHED='callbacks = ( { type = "model_saver"; max_to_keep = 0; },
  { type = "scheduled_hyperparam"; schedule = ( (0, 0.05), (8, 0.01) ); interp = "linear"; step_based = true; } );'

# job FILE MODEL SHAPE CLASSES BATCH OPTIMIZER [MORE]
job() {
  cat >"$1" <<CFG
seed = 5;
model = "$TT_SRCDIR/models/$2.cfg";
dataflow = { source = { type = "fake"; shape = [$3]; classes = $4; size = 256; };
             batch_size = $5; };
optimizer = $6;
trainer = { type = "simple"; device = "sim"; };
max_epoch = 1;
steps_per_epoch = 7;
$SCHED
$7
CFG
}

# pair NAME [--set ...]: the job eager, then captured; true when both ran
pair() {
  name=$1
  shift
  TT_CUDA_GRAPH=0 "$TOWERTRAIN" run "$T/$name.cfg" --logdir "$T/${name}_eager" "$@" \
    >"$T/${name}_eager.out" 2>&1 &&
  TT_CUDA_GRAPH=1 "$TOWERTRAIN" run "$T/$name.cfg" --logdir "$T/${name}_graph" "$@" \
    >"$T/${name}_graph.out" 2>&1
}

# same NAME: the two runs' last checkpoints, parameters and optimizer state, bit for bit
same() {
  tt_same "$T/${1}_eager/model-7.safetensors" "$T/${1}_graph/model-7.safetensors" 0 optimizer \
    >/dev/null
}

# 7 steps: 2 eager (warm-up), 2 captured (one per staging buffer), 3 replays
REPLAYED='cuda graph: 5 step(s) replayed from 2 graph(s)'

MOM='{ type = "momentum"; learning_rate = 0.05; momentum = 0.9; }'
ADAM='{ type = "adam"; learning_rate = 0.05; }'
ADAMW='{ type = "adamw"; learning_rate = 0.05; weight_decay = 0.1; }'
job "$T/lenet_mom.cfg" lenet "1, 28, 28" 10 16 "$MOM"
job "$T/lenet_adam.cfg" lenet "1, 28, 28" 10 16 "$ADAM"
job "$T/lenet_adamw.cfg" lenet "1, 28, 28" 10 16 "$ADAMW"
job "$T/resnet.cfg" resnet20 "3, 32, 32" 10 8 "$MOM"
job "$T/resnet_adam.cfg" resnet20 "3, 32, 32" 10 8 "$ADAM"

# LeNet with a dropout layer: its mask's seed changes every step (the block)
sed 's|^model = .*|model = { input = [1, 28, 28]; classes = 10; layers = (\
  { name = "conv0"; type = "conv2d"; filters = 6; kernel = 5; padding = 2; activation = "relu"; },\
  { name = "pool0"; type = "maxpool"; kernel = 2; },\
  { name = "fc0"; type = "dense"; units = 64; activation = "relu"; },\
  { name = "drop"; type = "dropout"; rate = 0.5; },\
  { name = "fc1"; type = "dense"; units = 10; } ); };|' "$T/lenet_mom.cfg" >"$T/dropout.cfg"

for name in lenet_mom lenet_adam lenet_adamw dropout resnet resnet_adam; do
  pair "$name"
  rc=$?
  same "$name"
  s=$?
  grep -q "$REPLAYED" "$T/${name}_graph.out"
  g=$?
  [ $rc = 0 ] || cat "$T/${name}_eager.out" "$T/${name}_graph.out"
  ok $([ $rc = 0 ] && [ $s = 0 ] && [ $g = 0 ]; echo $?) \
    "$name fp32, the rate changing every step: captured = eager bit for bit; 5 steps replayed"
done

cp "$T/resnet.cfg" "$T/resnet_bf16.cfg"
pair resnet_bf16 --set 'trainer.precision="bf16"'
rc=$?
same resnet_bf16 && grep -q "$REPLAYED" "$T/resnet_bf16_graph.out"
s=$?
ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) \
  "resnet20 bf16 (NHWC bf16 activations): captured = eager bit for bit; 5 steps replayed"

grep -q 'cuda graph: the step is captured after 2 eager steps' "$T/lenet_mom_graph.out" &&
  ! grep -q 'cuda graph' "$T/lenet_mom_eager.out"
ok $? "the captured run says so in its log; the eager run (TT_CUDA_GRAPH=0) says nothing"

# ---- the timeline records steps 4-5: those run eagerly (their layers'
# spans are recorded), the others replay; the same bits ----
sed 's/^callbacks = (/callbacks = ( { type = "timeline"; steps = [4, 5]; },/' \
  "$T/lenet_mom.cfg" >"$T/timeline.cfg"
pair timeline
rc=$?
same timeline
s=$?
got=$(sed -n 's/.*cuda graph: \([0-9]*\) step(s) replayed.*/\1/p' "$T/timeline_graph.out")
ok $([ $rc = 0 ] && [ $s = 0 ] && [ -n "$got" ] && [ "$got" -ge 1 ] && [ "$got" -le 3 ] &&
     grep -q '"name": "conv0 forward"' "$T/timeline_graph/timeline"*.json; echo $?) \
  "timeline over steps 4-5: those eager with their layer spans, $got step(s) replayed, the eager bits"

# ---- a capture that fails: one line, then eager, the same bits ----
TT_SIM_FAULT=capture_error TT_CUDA_GRAPH=1 "$TOWERTRAIN" run "$T/lenet_mom.cfg" \
  --logdir "$T/fault" >"$T/fault.out" 2>&1
rc=$?
nline=$(grep -c 'cuda graph: global step 3: .*injected by TT_SIM_FAULT=capture_error; eager steps from now on' "$T/fault.out")
tt_same "$T/lenet_mom_eager/model-7.safetensors" "$T/fault/model-7.safetensors" 0 optimizer >/dev/null
s=$?
ok $([ $rc = 0 ] && [ "$nline" = 1 ] && [ $s = 0 ] && ! grep -q 'step(s) replayed' "$T/fault.out"; echo $?) \
  "a failed capture: one log line, no replay, the eager run's bits"

# ---- jobs a graph cannot serve: one line, eager ----
check_off() {
  what=$1 want=$2
  shift 2
  TT_CUDA_GRAPH=1 "$TOWERTRAIN" run "$T/lenet_mom.cfg" --logdir "$T/off_$what" "$@" \
    >"$T/off_$what.out" 2>&1
  rc=$?
  ok $([ $rc = 0 ] && [ "$(grep -c "cuda graph: off, eager steps: $want" "$T/off_$what.out")" = 1 ] &&
       ! grep -q 'step(s) replayed' "$T/off_$what.out"; echo $?) "$what: one line says the graph is off ($want)"
}
check_off fp16 'dynamic loss scaling' --set 'trainer.precision="fp16"'
check_off lars 'LARS and clip_global_norm' \
  --set 'optimizer={type="lars"; learning_rate=0.05; momentum=0.9; weight_decay=1e-4;}'
check_off cpu 'the towers are on the CPU' --set 'trainer.device="cpu"'

TT_CUDA_GRAPH=yes "$TOWERTRAIN" run "$T/lenet_mom.cfg" --logdir "$T/bad" >"$T/bad.out" 2>&1
rc=$?
ok $([ $rc = 2 ] && [ "$(wc -l <"$T/bad.out")" = 1 ] && grep -q 'TT_CUDA_GRAPH=yes' "$T/bad.out"; echo $?) \
  "TT_CUDA_GRAPH=yes: exit 2 with one line ($(head -c 120 "$T/bad.out"))"
tt_done
