#!/bin/sh
# End-to-end: the callbacks of towertrain.cfg(5) on a small fast job (TAP).
. "$(dirname "$0")/tt_lib.sh"
# stats KEY: the per-epoch values of KEY in a log directory's stats.json, as a python list
stats() { $PY -c 'import json,sys; print([round(e.get(sys.argv[2], -1), 7) for e in json.load(open(sys.argv[1]))])' "$1/stats.json" "$2"; }

cat > "$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/mlp.cfg";
dataflow = { source = { type = "fake"; shape = [784]; classes = 10; size = 1000; }; batch_size = 10; };
optimizer = { type = "momentum"; learning_rate = 0.5; };
max_epoch = 4;
extra_callbacks = ( );
monitors = ( "json" );
CFG
run() { dir=$1; shift; "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/$dir" --quiet "$@"; }

run none --set 'callbacks=( { type = "scheduled_hyperparam"; schedule = ( (0, 0.1), (2, 0.01), (3, 0.001) ); } )'
got=$(stats "$T/none" learning_rate)
[ "$got" = "[0.1, 0.1, 0.01, 0.001]" ]
ok $? "scheduled_hyperparam: (ep, v) sets v after epoch ep: $got"

run linear --set 'callbacks=( { type = "scheduled_hyperparam"; schedule = ( (0, 0.1), (4, 0.02) ); interp = "linear"; } )'
got=$(stats "$T/linear" learning_rate)
[ "$got" = "[0.1, 0.08, 0.06, 0.04]" ]
ok $? "scheduled_hyperparam: interp linear: $got"

run steps --set 'callbacks=( { type = "scheduled_hyperparam"; schedule = ( (0, 0.2), (150, 0.05), (250, 0.01) ); step_based = true; } )'
got=$(stats "$T/steps" learning_rate)
[ "$got" = "[0.2, 0.05, 0.01, 0.01]" ]
ok $? "scheduled_hyperparam: step_based (100 steps per epoch; the rate at each epoch end): $got"

run resumed --set max_epoch=2 --set 'callbacks=( { type = "scheduled_hyperparam"; schedule = ( (0, 0.1), (2, 0.01), (3, 0.001) ); }, "model_saver" )' &&
  "$TOWERTRAIN" resume "$T/resumed" --max-epoch 4 --quiet
got=$(stats "$T/resumed" learning_rate)
[ "$got" = "[0.1, 0.1, 0.01, 0.001]" ]
ok $? "scheduled_hyperparam: a resumed run picks the schedule up where it was: $got"

run k2a --set 'callbacks=( { type = "scheduled_hyperparam"; schedule = ( (0, 0.1), (4, 0.02) ); interp = "linear"; every_k_epochs = 2; }, "model_saver" )'
run k2b --set max_epoch=3 --set 'callbacks=( { type = "scheduled_hyperparam"; schedule = ( (0, 0.1), (4, 0.02) ); interp = "linear"; every_k_epochs = 2; }, "model_saver" )' &&
  "$TOWERTRAIN" resume "$T/k2b" --max-epoch 4 --quiet
a=$(stats "$T/k2a" learning_rate) b=$(stats "$T/k2b" learning_rate)
[ "$a" = "$b" ] && [ "$a" = "[0.1, 0.1, 0.06, 0.06]" ]
ok $? "scheduled_hyperparam every_k_epochs = 2, resumed after epoch 3: the rates of the run never stopped ($a; resumed $b)"

run early --set 'callbacks=( { type = "early_stop"; monitor = "learning_rate"; patience = 1; } )'
rc=$?
got=$(stats "$T/early" epoch_num)
[ $rc = 0 ] && [ "$got" = "[1, 2]" ] && grep -q "early_stop: learning_rate has not improved" "$T/early/log.log"
ok $? "early_stop: a statistic that stalls stops after patience epochs, exit 0 (epochs $got)"

run smp --set max_epoch=5 --set 'callbacks=( { type = "stat_monitor_param"; monitor = "learning_rate"; last_k = 2; factor = 0.5; } )'
got=$(stats "$T/smp" learning_rate)
[ "$got" = "[0.5, 0.5, 0.5, 0.25, 0.25]" ]
ok $? "stat_monitor_param: halves the rate once the statistic stalls for last_k epochs: $got"

run ksteps --set max_epoch=2 --set 'callbacks=( { type = "model_saver"; every_k_steps = 30; max_to_keep = 0; } )'
got=$(cd "$T/ksteps" && ls model-*.safetensors | sed 's/model-//; s/.safetensors//' | sort -n | tr '\n' ' ')
[ "$got" = "30 60 90 120 150 180 " ]
ok $? "every_k_steps = 30 honoured: checkpoints at steps $got"

run kepochs --set 'callbacks=( { type = "model_saver"; every_k_epochs = 2; max_to_keep = 0; } )'
got=$(cd "$T/kepochs" && ls model-*.safetensors | sed 's/model-//; s/.safetensors//' | sort -n | tr '\n' ' ')
[ "$got" = "200 400 " ]
ok $? "every_k_epochs = 2 honoured: checkpoints at steps $got"

run keep --set 'callbacks=( { type = "model_saver"; max_to_keep = 2; } )'
got=$(cd "$T/keep" && ls model-*.safetensors | tr '\n' ' ')
[ "$got" = "model-300.safetensors model-400.safetensors " ] && [ "$(head -1 "$T/keep/checkpoint")" = model-400.safetensors ]
ok $? "max_to_keep = 2 keeps the newest two: $got"
# resumed from an older checkpoint, the files of the abandoned later steps go
# first: never the one just written, which the pointer names
run keep3 --set 'callbacks=( { type = "model_saver"; max_to_keep = 3; } )' &&
  "$TOWERTRAIN" resume "$T/keep3/model-200.safetensors" --max-epoch 3 --quiet \
    --set 'callbacks=( { type = "model_saver"; max_to_keep = 1; } )' &&
  "$TOWERTRAIN" resume "$T/keep3" --max-epoch 4 --quiet
rc=$?
got=$(cd "$T/keep3" && ls model-*.safetensors | tr '\n' ' ')
[ $rc = 0 ] && [ "$got" = "model-400.safetensors " ] && [ "$(head -1 "$T/keep3/checkpoint")" = model-400.safetensors ]
ok $? "max_to_keep after a resume from an older checkpoint: the new one kept, the abandoned later ones pruned, and the run resumes: $got"

# min_saver after a resume: compared with the value the best file was written
# with (its metadata), not with +inf, so a worse epoch does not replace it;
# under every trainer (the decision must be every tower's and rank's)
meta() { $PY -c 'import sys; from tt_safetensors import load; print(load(sys.argv[1])[1].get(sys.argv[2]))' "$1" "$2"; }
best='callbacks=( { type = "scheduled_hyperparam"; schedule = ( (0, 0.05), (1, 0.01), (2, 0.04) ); }, "model_saver", { type = "min_saver"; monitor = "learning_rate"; } )'
for tr in 'type="simple";' 'type="sync_replicated"; nr_tower=2;' 'type="sync_parameter_server"; nr_tower=2;' 'type="async"; nr_tower=2;'; do
  run best-a --set max_epoch=3 --set "$best" --set "trainer={$tr}" &&
    run best-b --set max_epoch=2 --set "$best" --set "trainer={$tr}" &&
    "$TOWERTRAIN" resume "$T/best-b" --max-epoch 3 --quiet
  rc=$?
  a=$(meta "$T/best-a/min-learning_rate.safetensors" epoch_num)
  b=$(meta "$T/best-b/min-learning_rate.safetensors" epoch_num)
  note=$(meta "$T/best-b/min-learning_rate.safetensors" min_saver)
  [ $rc = 0 ] && [ "$a" = 2 ] && [ "$b" = 2 ] && [ "${note%% *}" = learning_rate ]
  ok $? "min_saver, trainer {$tr} resumed: the best file stays epoch 2's (epoch straight $a, resumed $b; '$note')"
  rm -rf "$T/best-a" "$T/best-b"
done

# a resume goes on as the run would have: the learning rate in effect
# (stat_monitor_param halved it), stat_monitor_param's history, early_stop's
# best and wait, moving_average_summary's average (callback_state in every
# checkpoint). Stopped after epoch 2, 3 or 4 of 6 (the rate halves after 3;
# early_stop, for a rate that does not rise for 4 epochs, stops after 5),
# under every trainer: stats.json and
# the last checkpoint as the run that was never stopped, bit for bit (async
# with 2 towers is not deterministic: its learning rates only).
cbs='callbacks=( { type = "stat_monitor_param"; monitor = "learning_rate"; last_k = 2; factor = 0.5; }, { type = "early_stop"; monitor = "learning_rate"; mode = "max"; patience = 4; }, { type = "model_saver"; max_to_keep = 1; } )'
keys() { $PY -c 'import json, sys; print([(e["epoch_num"], e["learning_rate"], e["train_loss"] if sys.argv[2] == "all" else 0) for e in json.load(open(sys.argv[1]))])' "$1/stats.json" "${2:-all}"; }
for tr in 'type="simple";' 'type="sync_replicated"; nr_tower=2;' 'type="sync_parameter_server"; nr_tower=2;' 'type="async"; nr_tower=2;'; do
  run st-a --set max_epoch=6 --set "$cbs" --set 'extra_callbacks=( "moving_average_summary" )' --set "trainer={$tr}"
  last=$(head -1 "$T/st-a/checkpoint")
  case $tr in *simple*) stops="2 3 4" ;; *) stops=3 ;; esac
  for k in $stops; do
    run st-b --set max_epoch=$k --set "$cbs" --set 'extra_callbacks=( "moving_average_summary" )' --set "trainer={$tr}" &&
      "$TOWERTRAIN" resume "$T/st-b" --max-epoch 6 --quiet
    rc=$?
    case $tr in
      *async*) [ $rc = 0 ] && [ "$(keys "$T/st-a" lr)" = "$(keys "$T/st-b" lr)" ] ;;
      *) [ $rc = 0 ] && [ "$(keys "$T/st-a")" = "$(keys "$T/st-b")" ] &&
           tt_same "$T/st-a/$last" "$T/st-b/$last" 0 >/dev/null ;;
    esac
    ok $? "{$tr} stopped after epoch $k and resumed: learning rates, train_loss and the last checkpoint as never stopped ($(keys "$T/st-b" lr | cut -c1-150))"
    rm -rf "$T/st-b"
  done
  rm -rf "$T/st-a"
done

# on a terminal the progress bar is drawn over in place; a line another
# callback logs clears it first (it used to run on after the bar's last draw)
if command -v script >/dev/null 2>&1; then
  script -qc "'$TOWERTRAIN' run '$T/job.cfg' --logdir '$T/tty' --set max_epoch=2 --set 'callbacks=( \"estimated_time_left\" )' --set 'extra_callbacks=( \"progress_bar\" )'" \
    /dev/null > "$T/tty.out" 2>&1
  grep -a -q "ETA [0-9:]*\] " "$T/tty.out" && grep -a -q "estimated time left" "$T/tty.out" &&
    ! grep -a -q "ETA [0-9:]*\] [^$(printf '\r')]" "$T/tty.out"
  ok $? "progress bar on a terminal: drawn, and cleared before each logged line"
else
  skip "progress bar on a terminal" "no script(1) (util-linux)"
fi

run misc --set max_epoch=2 --set 'callbacks=( "peak_memory", "estimated_time_left" )'
$PY -c 'import json,sys; s=json.load(open(sys.argv[1])); assert all(0 < e["peak_memory_mb"] < 2000 for e in s), s' "$T/misc/stats.json" &&
  grep -q "estimated time left: 0:00:0" "$T/misc/log.log"
ok $? "peak_memory reports RSS in MiB; estimated_time_left prints the time left"

"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/print" --set max_epoch=1 --set 'callbacks=( "throughput", "peak_memory" )' \
  --set 'monitors=( { type = "scalar_printer"; whitelist = [ "throughput", "learning_rate" ]; blacklist = [ "learning_rate" ]; } )' > "$T/print.out"
grep -q "^throughput: " "$T/print.out" && ! grep -q "^learning_rate: " "$T/print.out" && ! grep -q "^peak_memory_mb: " "$T/print.out"
ok $? "scalar_printer: whitelist keeps only the names listed, blacklist drops names"

# moving_average_summary publishes train_loss / train_accuracy; its decay matters
run noema --set max_epoch=1 --set 'extra_callbacks=( )'
run ema50 --set max_epoch=1 --set 'extra_callbacks=( { type = "moving_average_summary"; decay = 0.5; } )'
run ema99 --set max_epoch=1 --set 'extra_callbacks=( { type = "moving_average_summary"; decay = 0.99; } )'
[ "$(stats "$T/noema" train_loss)" = "[-1]" ] && [ "$(stats "$T/ema50" train_loss)" != "[-1]" ] &&
  [ "$(stats "$T/ema50" train_loss)" != "$(stats "$T/ema99" train_loss)" ]
ok $? "moving_average_summary: train_loss only with it, and its decay changes the average"

# the shipped job that uses every callback and monitor
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  "$TOWERTRAIN" run "$TT_SRCDIR/jobs/fashion_mnist_callbacks.cfg" --logdir "$T/all" --quiet \
    --set max_epoch=2 --set dataflow.limit=10240
  rc=$?
  [ $rc = 0 ] && [ -f "$T/all/min-validation_loss.safetensors" ] && [ -f "$T/all/max-validation_accuracy.safetensors" ] &&
    ls "$T"/all/events.out.tfevents.* >/dev/null 2>&1 &&
    $PY -c 'import json,sys; e=json.load(open(sys.argv[1]))[-1]; assert {"validation_accuracy","throughput","peak_memory_mb","train_loss"} <= set(e)' "$T/all/stats.json"
  ok $? "jobs/fashion_mnist_callbacks.cfg (every callback and monitor) runs"
else
  skip "jobs/fashion_mnist_callbacks.cfg" "dataset-fashion-mnist not installed"
fi

tt_done
