#!/bin/sh
# e2e_signals.sh - SIGINT and SIGTERM landing while threads run: two towers
# of every multi-tower trainer type (sync_replicated, sync_parameter_server,
# async) with prefetch workers. Each run stops after the step it is in, with
# exit status 130 (SIGINT) or 143 (SIGTERM) and a checkpoint of the step
# reached, and resumes from it to the end. Small and quick on purpose: make
# check-tsan runs it under ThreadSanitizer, where the signal handler, the
# stop flag the towers agree on and the prefetch workers' shutdown are seen
# by the race detector. TAP.
. "$(dirname "$0")/tt_lib.sh"

cat >"$T/job.cfg" <<'JOB'
dataflow = { source = { type = "fake"; shape = [1, 8, 8]; classes = 4; size = 256; };
  batch_size = 8; augment = ( { type = "flip"; } ); prefetch = { workers = 2; queue = 4; }; };
model = { input = [1, 8, 8]; classes = 4; layers = (
  { name = "conv"; type = "conv2d"; filters = 4; kernel = 3; padding = 1; activation = "relu"; },
  { name = "pool"; type = "maxpool"; kernel = 2; },
  { name = "fc"; type = "dense"; units = 4; } ); };
optimizer = { type = "momentum"; learning_rate = 0.05; };
trainer = { nr_tower = 2; device = "cpu"; threads_per_tower = 1; };
callbacks = ( { type = "model_saver"; max_to_keep = 0; } );
monitors = ( "json" );
max_epoch = 100000;
JOB

# after_epoch1 LOGDIR: returns once epoch 1 (16 steps of 2 x 8 samples) has
# written its stats.json (or after ~60 s).
after_epoch1() {
    i=0
    while [ ! -f "$1/stats.json" ] && [ $i -lt 3000 ]; do
        sleep 0.02
        i=$((i + 1))
    done
}

for trainer in sync_replicated sync_parameter_server async; do
    for sig in INT TERM; do
        want=$([ $sig = INT ] && echo 130 || echo 143)
        log=$T/$trainer-$sig
        "$TOWERTRAIN" run "$T/job.cfg" --logdir "$log" --quiet \
            --set "trainer.type=\"$trainer\"" >"$T/out" 2>"$T/err" &
        pid=$!
        after_epoch1 "$log"
        kill -$sig $pid
        wait $pid
        rc=$?
        last=$(head -n 1 "$log/checkpoint" 2>/dev/null)
        step=${last#model-}
        step=${step%.safetensors}
        [ $rc = "$want" ] && [ -f "$log/$last" ] && [ "$step" -ge 16 ] && [ ! -s "$T/err" ]
        ok $? "$trainer, SIG$sig mid-run: exit status $want (got $rc), a checkpoint of the step reached ($last), nothing on stderr"
        [ -s "$T/err" ] && sed 's/^/# /' "$T/err" | head -n 20
        epochs=$((step / 16 + 2))
        "$TOWERTRAIN" resume "$log" --quiet --max-epoch $epochs >"$T/out" 2>"$T/err"
        rc=$?
        [ $rc = 0 ] && [ "$(head -n 1 "$log/checkpoint")" = "model-$((epochs * 16)).safetensors" ]
        ok $? "$trainer, SIG$sig: resume runs to the end of epoch $epochs (exit status $rc)"
        [ -s "$T/err" ] && sed 's/^/# /' "$T/err" | head -n 20
    done
done
# Stopped before its first checkpoint (two signals 10 ms apart end a run at
# once): the log directory holds job.cfg and no checkpoint. `run` refuses it
# as taken, so `resume` starts the job from the beginning; it ends as a run
# that was never stopped, bit for bit.
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/whole" --quiet --set max_epoch=2 \
  --set 'trainer.type="sync_replicated"' >/dev/null 2>&1
mkdir "$T/early" && cp "$T/whole/job.cfg" "$T/early/"
last=$(head -n 1 "$T/whole/checkpoint")
echo "killed before the first step" > "$T/early/log.log"
"$TOWERTRAIN" resume "$T/early" > "$T/out" 2>"$T/err"
rc=$?
[ $rc = 0 ] && grep -q "no checkpoint yet" "$T/early/log.log" && [ -n "$last" ] &&
  $PY - "$T/whole/$last" "$T/early/$last" <<'PYEOF'
import json, struct, sys
def tensors(path):  # the data section and the tensors' header entries
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    head.pop("__metadata__")
    return head, b[8 + n:]
sys.exit(0 if tensors(sys.argv[1]) == tensors(sys.argv[2]) else 1)
PYEOF
ok $? "stopped before the first checkpoint: resume starts from the beginning and ends as the whole run, bit for bit (exit $rc)"
[ -s "$T/err" ] && sed 's/^/# /' "$T/err" | head -n 5
tt_refused "a log directory with epochs in stats.json and no checkpoint: resume refuses it" \
  "no checkpoint in it" "" sh -c 'rm "$1/checkpoint" && "$2" resume "$1"' sh "$T/early" "$TOWERTRAIN"
tt_done
