#!/bin/sh
# End-to-end: the timeline callback (towertrain.cfg(5), CALLBACKS) and
# `towertrain profile` (towertrain(1), PROFILE) (TAP). The trace checks are
# tests/tt_timeline.py's, the profile's tests/tt_profile.py's.
. "$(dirname "$0")/tt_lib.sh"
DATA=/usr/share/datasets/fashion-mnist
# a roof measured here, never the user's cache
XDG_CACHE_HOME="$T/cache"
export XDG_CACHE_HOME

cat > "$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/lenet.cfg";
dataflow = { source = { type = "idx"; images = "$DATA/train-images-idx3-ubyte.gz";
                        labels = "$DATA/train-labels-idx1-ubyte.gz"; };
             augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
             limit = 4096; batch_size = 64; prefetch = { workers = 1; queue = 2; }; };
optimizer = { type = "momentum"; learning_rate = 0.05; momentum = 0.9; };
trainer = { type = "simple"; device = "cpu"; };
max_epoch = 1;
steps_per_epoch = 12;
callbacks = ( { type = "timeline"; steps = [3, 10]; } );
CFG

# timeline_run NAME CHECK-ARGS... -- RUN-ARGS...: a run, then tt_timeline.py
# on its timeline-3-10.json
timeline_run() {
  name=$1
  shift
  args=""
  while [ "$1" != "--" ]; do args="$args $1"; shift; done
  shift
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/$name" --quiet "$@" >"$T/$name.out" 2>&1
  rc=$?
  ok $rc "$name: the run with a timeline callback"
  [ $rc = 0 ] || sed 's/^/# /' "$T/$name.out" | tail -n 5
  ls "$T/$name" | grep -q '\.tmp\.' && ok 1 "$name: no temporary file left"
  # shellcheck disable=SC2086
  $PY "$TT_SRCDIR/tests/tt_timeline.py" "$T/$name/timeline-3-10.json" "$name" --steps 3-10 \
    --model "$TT_SRCDIR/models/lenet.cfg" $args >"$T/$name.tap" 2>&1
  tt_tap "$T/$name.tap" $?
}

# (1) the matrix: every trainer type, 1 and 2 towers
timeline_run simple --workers --layer-sum --abut --
timeline_run packed --towers 2 --packs --work-sum -- \
  --set 'trainer={ type = "sync_replicated"; nr_tower = 2; gradient_packing = 4; }'
# without packing the one pack follows backward: the overlap check can fail
timeline_run replicated --towers 2 --no-overlap --layer-sum -- \
  --set 'trainer={ type = "sync_replicated"; nr_tower = 2; }'
timeline_run ps --towers 2 --no-overlap -- --set 'trainer={ type = "sync_parameter_server"; nr_tower = 2; }'
timeline_run async --towers 2 -- --set 'trainer={ type = "async"; nr_tower = 2; }'
# accumulate: one tower step span wraps both micro-batches
timeline_run accumulate --layer-sum -- --set trainer.accumulate=2

# (1b) device towers (sim): the tower rows' spans are measured on the device
# (events on the compute queue, read back after the window). Queued on the
# host, a layer takes microseconds while the device runs it for
# milliseconds: host-side spans would sum to a small part of the step.
# Batch 256: the device idles while the host reads each step's loss (a
# fixed gap), a small part of these steps.
timeline_run sim --layer-sum --abut --device-events -- --set trainer.device='"sim"' \
  --set dataflow.batch_size=256
# 2 sim towers with packs: each pack's all-reduce measured on the device
# too (events on the communication queue), beside backward, in the step
timeline_run sim_packed --towers 2 --device-packs --device-events -- --set dataflow.batch_size=128 \
  --set 'trainer={ type = "sync_replicated"; device = "sim"; towers = [0, 1]; gradient_packing = 4; }'

# (2) the default window: 10 steps after the first 20
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/default" --quiet --set steps_per_epoch=32 \
  --set 'callbacks=( "timeline" )' >/dev/null 2>&1
$PY "$TT_SRCDIR/tests/tt_timeline.py" "$T/default/timeline-21-30.json" default --steps 21-30 \
  >"$T/default.tap" 2>&1
tt_tap "$T/default.tap" $?

# (3) training ends inside the window: the steps it recorded, under the name asked for
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/short" --quiet \
  --set 'callbacks=( { type = "timeline"; steps = [5, 100]; } )' >"$T/short.out" 2>&1
ok $? "a window past the end of training: the run succeeds"
$PY "$TT_SRCDIR/tests/tt_timeline.py" "$T/short/timeline-5-100.json" short --steps 5-12 \
  >"$T/short.tap" 2>&1
tt_tap "$T/short.tap" $?

# (3b) a timeline that cannot be written (the disk full: the second atomic
# write, after job.cfg) is a warning; training goes on, no partial file
TT_FAULT_WRITE=2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/full" --set 'monitors=( )' \
  >"$T/full.out" 2>&1
rc=$?
ok $([ $rc = 0 ] && grep -q '^warning: timeline: .*injected by TT_FAULT_WRITE.*training goes on' \
       "$T/full.out" && [ "$(ls "$T/full")" = "job.cfg
log.log" ]; echo $?) "a full disk: a warning, training goes on, nothing half-written (exit $rc)"

# (4) bad settings: refused before anything is written
tt_refused "timeline: last before first (by the job's checks: validate refuses it too)" \
  "callbacks[0].steps[1]: must not be below the element before it (3 < 10)" \
  "$T/bad1" "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/bad1" \
  --set 'callbacks=( { type = "timeline"; steps = [10, 3]; } )'
tt_refused "timeline: step 0" "steps" "$T/bad2" "$TOWERTRAIN" run "$T/job.cfg" \
  --logdir "$T/bad2" --set 'callbacks=( { type = "timeline"; steps = [0, 3]; } )'
tt_refused "timeline: one step given" "steps" "$T/bad3" "$TOWERTRAIN" run "$T/job.cfg" \
  --logdir "$T/bad3" --set 'callbacks=( { type = "timeline"; steps = [4]; } )'

# (5) MPI: both ranks' rows in rank 0's file
if "$TOWERTRAIN" --version | grep -q mpi && command -v mpirun >/dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$TOWERTRAIN" run "$T/job.cfg" \
    --logdir "$T/mpi" --quiet \
    --set 'trainer={ type = "sync_replicated"; nr_tower = 1; threads_per_tower = 1; }' \
    >"$T/mpi.out" 2>&1
  ok $? "2 MPI ranks with a timeline callback"
  $PY "$TT_SRCDIR/tests/tt_timeline.py" "$T/mpi/timeline-3-10.json" mpi --ranks 2 --steps 3-10 \
    --no-overlap --model "$TT_SRCDIR/models/lenet.cfg" >"$T/mpi.tap" 2>&1
  tt_tap "$T/mpi.tap" $?
else
  skip "2 MPI ranks with a timeline callback" "built without MPI or no mpirun"
fi

# (6) profile: the table, --json and --trace; nothing in the log directory
"$TOWERTRAIN" profile "$T/job.cfg" --steps 6 --set "logdir=\"$T/never\"" \
  --json "$T/prof.json" --trace "$T/prof_trace.json" >"$T/prof.out" 2>&1
rc=$?
ok $rc "profile: LeNet, 6 steps"
[ $rc = 0 ] || sed 's/^/# /' "$T/prof.out" | tail -n 5
ok $([ ! -e "$T/never" ]; echo $?) "profile: nothing written into the log directory"
grep -q '^conv1 *conv2d' "$T/prof.out" && grep -q '^data wait' "$T/prof.out" &&
  grep -q 'fp32 roof [0-9.]* GFLOP/s' "$T/prof.out"
ok $? "profile: prints the table (a row per layer, data wait, the roof)"
ls "$XDG_CACHE_HOME"/towertrain/roof-fp32-*.txt >/dev/null 2>&1
ok $? "profile: the roof is cached under \$XDG_CACHE_HOME/towertrain"
# a cached roof below what a layer ran at was measured on a busy machine:
# measured again, the higher kept; one above it is used as it is
roof=$(ls "$XDG_CACHE_HOME"/towertrain/roof-fp32-*.txt | head -n 1)
echo 0.5 >"$roof"
"$TOWERTRAIN" profile "$T/job.cfg" --steps 4 --json "$T/low.json" >"$T/low.out" 2>&1 &&
  grep -q "^(the cached roof, 0.5 GFLOP/s, was below layer .*: measured again)$" "$T/low.out" &&
  $PY -c 'import json, sys; r = json.load(open(sys.argv[1]))["roof_gflops"]
v = float(open(sys.argv[2]).read()); sys.exit(0 if abs(r - v) <= 0.05 and v > 0.5 else 1)' \
    "$T/low.json" "$roof"
ok $? "profile: a cached roof below a layer's GFLOP/s is measured again and replaced ($(cat "$roof"))"
echo 100000.0 >"$roof"
"$TOWERTRAIN" profile "$T/job.cfg" --steps 4 --json "$T/high.json" >"$T/high.out" 2>&1 &&
  ! grep -q 'measured again' "$T/high.out" && [ "$(cat "$roof")" = 100000.0 ] &&
  $PY -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["roof_gflops"] != 100000)' "$T/high.json"
ok $? "profile: a cached roof above every layer is used as cached"
echo inf >"$roof"
"$TOWERTRAIN" profile "$T/job.cfg" --steps 4 --json "$T/inf.json" >"$T/inf.out" 2>&1 &&
  $PY -c 'import json, math, sys; r = json.load(open(sys.argv[1]))["roof_gflops"]
v = float(open(sys.argv[2]).read()); sys.exit(0 if math.isfinite(v) and 0 < v and abs(r - v) <= 0.05 else 1)' \
    "$T/inf.json" "$roof"
ok $? "profile: a damaged cached roof (inf) is measured again and replaced ($(cat "$roof"))"
rm -f "$roof"
$PY "$TT_SRCDIR/tests/tt_profile.py" "$T/prof.json" "$T/prof_trace.json" \
  "$TT_SRCDIR/models/lenet.cfg" 64 profile >"$T/prof.tap" 2>&1
tt_tap "$T/prof.tap" $?
$PY "$TT_SRCDIR/tests/tt_timeline.py" "$T/prof_trace.json" "profile --trace" --steps 4-9 \
  --workers --layer-sum >"$T/prof_trace.tap" 2>&1
tt_tap "$T/prof_trace.tap" $?
# a ResNet (strides, padding, batchnorm, add, fused relus) on two towers
"$TOWERTRAIN" profile "$TT_SRCDIR/jobs/resnet20_fake.cfg" --steps 1 \
  --set dataflow.batch_size=8 --set trainer.threads_per_tower=1 \
  --json "$T/res.json" --trace "$T/res_trace.json" >"$T/res.out" 2>&1
ok $? "profile: ResNet-20, 2 towers"
$PY "$TT_SRCDIR/tests/tt_profile.py" "$T/res.json" "$T/res_trace.json" \
  "$TT_SRCDIR/models/resnet20.cfg" 8 "profile resnet20" >"$T/res.tap" 2>&1
tt_tap "$T/res.tap" $?
# profile on a device tower (sim): per-layer device time, the same checks.
# Its step time runs from idle device to idle device, so it holds the last
# step's backward, which the host's step spans do not (about 0.6 of a step
# here, 0.9 on a loaded machine): tt_profile.py allows 2 device steps more
"$TOWERTRAIN" profile "$T/job.cfg" --steps 20 --set trainer.device='"sim"' \
  --set dataflow.batch_size=256 --json "$T/simprof.json" --trace "$T/simprof_trace.json" \
  >"$T/simprof.out" 2>&1
ok $? "profile: LeNet on a sim tower"
grep -q 'device time' "$T/simprof.out"
ok $? "profile: a sim tower's layer times are said to be device time"
$PY "$TT_SRCDIR/tests/tt_profile.py" "$T/simprof.json" "$T/simprof_trace.json" \
  "$TT_SRCDIR/models/lenet.cfg" 256 "profile sim" >"$T/simprof.tap" 2>&1
tt_tap "$T/simprof.tap" $?
$PY "$TT_SRCDIR/tests/tt_timeline.py" "$T/simprof_trace.json" "profile sim --trace" --steps 4-23 \
  --layer-sum >"$T/simprof_trace.tap" 2>&1
tt_tap "$T/simprof_trace.tap" $?
# 2 sim towers with packs: the all-reduce rows are the union of tower 0's
# pack spans, and the data wait leaves out what ran inside them too
"$TOWERTRAIN" profile "$T/job.cfg" --steps 40 --set dataflow.batch_size=128 \
  --set 'trainer={ type = "sync_replicated"; device = "sim"; towers = [0, 1]; gradient_packing = 4; }' \
  --json "$T/simpack.json" --trace "$T/simpack_trace.json" >"$T/simpack.out" 2>&1
ok $? "profile: LeNet on 2 sim towers with gradient packs"
$PY "$TT_SRCDIR/tests/tt_profile.py" "$T/simpack.json" "$T/simpack_trace.json" \
  "$TT_SRCDIR/models/lenet.cfg" 128 "profile sim packs" --packs >"$T/simpack.tap" 2>&1
tt_tap "$T/simpack.tap" $?
tt_refused "profile --steps 0" "--steps 0: must be an integer from 1 to 100000" "" \
  "$TOWERTRAIN" profile "$T/job.cfg" --steps 0
tt_refused "profile: a missing job file" "towertrain: " "" \
  "$TOWERTRAIN" profile "$T/missing.cfg"
tt_done
