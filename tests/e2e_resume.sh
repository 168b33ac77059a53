#!/bin/sh
# End-to-end: what `resume` says and cleans up (TAP).
# - A resume with another global batch (towers, ranks or batch_size) is
#   allowed, and the log says in one line what changed and that the run no
#   longer continues bit for bit; the same global batch says nothing.
# - Temporary files of checkpoint writers that died mid-write are removed
#   when run/resume opens the log directory, and logged; a live writer's stay.
# - A checkpoint written before optimizer_updates existed resumes with the
#   count derived, for the simple and the async trainer.
. "$(dirname "$0")/tt_lib.sh"

cat > "$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/mlp.cfg";
dataflow = { source = { type = "fake"; shape = [1, 28, 28]; classes = 10; size = 2048; };
             batch_size = 64; prefetch = { workers = 0; queue = 1; }; };
optimizer = { type = "sgd"; learning_rate = 0.05; };
max_epoch = 1;
callbacks = ( { type = "model_saver"; } );
extra_callbacks = ( );
monitors = ( "json" );
CFG

"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/a" --quiet
ok $? "1 epoch with a checkpoint"
"$TOWERTRAIN" resume "$T/a" --max-epoch 2 --quiet
ok $? "resume with the same trainer"
! grep -q "global batch is now" "$T/a/log.log"
ok $? "the same global batch: no line about it"

"$TOWERTRAIN" resume "$T/a" --max-epoch 3 --quiet --set 'trainer={type="sync_replicated"; nr_tower=2;}'
ok $? "resume with 2 towers instead of 1 is allowed"
line=$(grep "global batch is now" "$T/a/log.log")
[ "$(printf '%s\n' "$line" | grep -c .)" = 1 ] &&
  printf '%s\n' "$line" | grep -q "now 128 (batch_size 64 x 2 tower(s) x 1 rank(s)); the checkpoint was written with 64" &&
  printf '%s\n' "$line" | grep -q "no longer bit for bit"
ok $? "2 towers: one line saying the global batch went from 64 to 128 and the run is no longer bit for bit"

"$TOWERTRAIN" resume "$T/a" --max-epoch 4 --quiet --set 'trainer={type="sync_replicated"; nr_tower=2;}' \
    --set dataflow.batch_size=16
grep -q "now 32 (batch_size 16 x 2 tower(s) x 1 rank(s)); the checkpoint was written with 128" "$T/a/log.log"
ok $? "batch_size 16: the line names the new batch size"

# Debris of writers that died: a dead process's temporary files go, a live
# one's stay. A pid that has exited and been waited for is not running.
sh -c 'exit 0' & dead=$!
wait $dead
sleep 60 & live=$!
head -c 100000 /dev/zero > "$T/a/model-999.safetensors.tmp.$dead"
echo x > "$T/a/checkpoint.tmp.$dead"
echo x > "$T/a/stats.json.tmp.$live"
echo x > "$T/a/notes.tmp.txt"
"$TOWERTRAIN" resume "$T/a" --max-epoch 5 --quiet
ok $? "resume with temporary files in the log directory"
[ ! -e "$T/a/model-999.safetensors.tmp.$dead" ] && [ ! -e "$T/a/checkpoint.tmp.$dead" ]
ok $? "the dead writer's temporary files are removed"
[ -e "$T/a/stats.json.tmp.$live" ] && [ -e "$T/a/notes.tmp.txt" ]
ok $? "a live writer's temporary file and a file not of that form stay"
grep -q "removed model-999.safetensors.tmp.$dead (100000 bytes), a temporary file left by process $dead, which is no longer running" "$T/a/log.log" &&
  grep -q "removed checkpoint.tmp.$dead " "$T/a/log.log"
ok $? "the log names each removed file, its size and its writer"
kill $live 2>/dev/null

# run cleans up too (a log directory may hold only debris after a crash
# before the first checkpoint)
mkdir -p "$T/b"
echo x > "$T/b/job.cfg.tmp.$dead"
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/b" --quiet && [ ! -e "$T/b/job.cfg.tmp.$dead" ]
ok $? "run removes a dead writer's temporary file too"

# A checkpoint from before optimizer_updates (Adam's count of applied
# updates) resumes with the count derived: one update a step, one a tower a
# step under async, which the final checkpoint records. The simple run from
# the old checkpoint gives the bits of the one from the new.
strip_updates() { # CHECKPOINT: removes optimizer_updates from its metadata
  $PY - "$1" <<'PYEOF'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
del h["__metadata__"]["optimizer_updates"]
t = json.dumps(h).encode()
t += b" " * (-len(t) % 8)
open(p, "wb").write(struct.pack("<Q", len(t)) + t + b[8 + n:])
PYEOF
}
meta_updates() { # CHECKPOINT: prints optimizer_updates and global_step
  $PY - "$1" <<'PYEOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
m = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])["__metadata__"]
print(m.get("optimizer_updates", "none"), m["global_step"])
PYEOF
}
adam='optimizer={type="adam"; learning_rate=0.001;}'
for tr in 'trainer={type="simple";}' 'trainer={type="async"; nr_tower=2;}'; do
  rm -rf "$T/u" "$T/u-old"
  "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/u" --quiet --set "$tr" --set "$adam" &&
    cp -r "$T/u" "$T/u-old" && strip_updates "$T/u-old/$(cat "$T/u/checkpoint")" &&
    "$TOWERTRAIN" resume "$T/u" --max-epoch 2 --quiet &&
    "$TOWERTRAIN" resume "$T/u-old" --max-epoch 2 --quiet
  rc=$?
  new=$(meta_updates "$T/u/$(cat "$T/u/checkpoint")")
  old=$(meta_updates "$T/u-old/$(cat "$T/u-old/checkpoint")")
  case $tr in
    *async*) want="$(( $(echo "$new" | cut -d' ' -f2) * 2 )) $(echo "$new" | cut -d' ' -f2)"
             same=0 ;; # two async towers interleave as they run: not bit for bit
    *) want="$(echo "$new" | cut -d' ' -f2) $(echo "$new" | cut -d' ' -f2)"
       tt_same "$T/u/$(cat "$T/u/checkpoint")" "$T/u-old/$(cat "$T/u-old/checkpoint")" 0 \
         optimizer >/dev/null
       same=$? ;;
  esac
  [ $rc = 0 ] && [ "$new" = "$want" ] && [ "$old" = "$want" ] && [ $same = 0 ]
  ok $? "$tr, adam: a checkpoint without optimizer_updates resumes with it derived (updates, steps: new $new, old $old, want $want)"
done

# a stats.json that is there and cannot be read (here a directory) is not
# rewritten over (its epochs would be lost): refused before training
cp -r "$T/a" "$T/unreadable" && rm "$T/unreadable/stats.json" && mkdir "$T/unreadable/stats.json"
tt_refused "resume with a stats.json that cannot be read: one line, exit 2" \
  "towertrain: $T/unreadable/stats.json: read error; move it away to resume" "" \
  "$TOWERTRAIN" resume "$T/unreadable" --max-epoch 7 --quiet
[ -d "$T/unreadable/stats.json" ] && [ "$(ls "$T/unreadable"/model-*.safetensors)" = "$(ls "$T/a"/model-*.safetensors | sed "s|$T/a|$T/unreadable|")" ]
ok $? "... and nothing trained: no new checkpoint, the directory left as it was"

# a stats.json that is not an array: refused before anything is written (job.cfg
# keeps its max_epoch, no new event file)
cp -r "$T/a" "$T/notjson" && echo 'not json' > "$T/notjson/stats.json"
before=$(ls "$T/notjson" | tr '\n' ' ')
cp "$T/notjson/job.cfg" "$T/notjson.job"
tt_refused "resume with a stats.json that is not JSON: one line, exit 2" \
  "towertrain: $T/notjson/stats.json: not a JSON array; move it away to resume" "" \
  "$TOWERTRAIN" resume "$T/notjson" --max-epoch 9 --quiet --set 'monitors=( "json", "events" )'
[ "$(ls "$T/notjson" | tr '\n' ' ')" = "$before" ] && cmp -s "$T/notjson/job.cfg" "$T/notjson.job"
ok $? "... and the log directory is as it was: job.cfg not rewritten, no new file"

# whichever write fails at an epoch's end (TT_FAULT_WRITE=N: min_saver's file,
# stats.json, the checkpoint, its pointer), resuming from the checkpoint left
# ends with every epoch in stats.json and the uninterrupted run's parameters:
# the checkpoint is written after its epoch's entry, never ahead of it
cb='callbacks=( { type = "model_saver"; max_to_keep = 0; }, { type = "min_saver"; monitor = "learning_rate"; } )'
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/fault-ref" --quiet --set max_epoch=3 --set "$cb"
bad=""
for w in 1 2 3 4 5 6 7 8 9 10; do
  TT_FAULT_WRITE=$w "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/fault$w" --quiet --set max_epoch=3 \
    --set "$cb" >/dev/null 2>&1
  [ -f "$T/fault$w/checkpoint" ] || continue
  "$TOWERTRAIN" resume "$T/fault$w" --max-epoch 3 --quiet >/dev/null 2>&1 &&
    [ "$($PY -c 'import json, sys; print([e["epoch_num"] for e in json.load(open(sys.argv[1]))])' "$T/fault$w/stats.json")" = "[1, 2, 3]" ] &&
    tt_same "$T/fault-ref/model-96.safetensors" "$T/fault$w/model-96.safetensors" 0 >/dev/null ||
    bad="$bad $w"
done
[ -z "$bad" ]
ok $? "a failed write at any of the first 10, then resume: stats.json has epochs 1-3 and the parameters are the uninterrupted run's${bad:+ (not after write$bad)}"

# a --set of optimizer.learning_rate on resume is the rate used (the rate the
# checkpoint had in effect is restored only for the job it was written with)
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/lr" --quiet --set max_epoch=1 &&
  "$TOWERTRAIN" resume "$T/lr" --max-epoch 2 --quiet --set optimizer.learning_rate=0.01
rc=$?
got=$($PY -c 'import json, sys; print([e["learning_rate"] for e in json.load(open(sys.argv[1]))])' "$T/lr/stats.json")
[ $rc = 0 ] && [ "$got" = "[0.05, 0.01]" ] &&
  grep -q "resume: optimizer.learning_rate is now 0.01 (the run had 0.05 in effect): 0.01 is used" "$T/lr/log.log"
ok $? "resume --set optimizer.learning_rate=0.01: used from the resumed epoch on, and logged ($got)"

# a resume with nothing to do says so, unless --quiet (nothing on stdout)
"$TOWERTRAIN" resume "$T/lr" --max-epoch 2 > "$T/nothing.out" 2>&1 &&
  grep -q "is already at epoch 2 of max_epoch 2; nothing to do" "$T/nothing.out" &&
  "$TOWERTRAIN" resume "$T/lr" --max-epoch 2 --quiet > "$T/quiet.out" 2>&1 && [ ! -s "$T/quiet.out" ]
ok $? "resume with nothing to do: a line saying so, none with --quiet"

# resume parses its options as run does: --opt VALUE and --opt=VALUE
"$TOWERTRAIN" resume "$T/a" --max-epoch=6 --set=optimizer.learning_rate=0.01 --quiet &&
  grep -q "learning_rate = 0.01" "$T/a/job.cfg"
ok $? "resume --max-epoch=N --set=KEY=VALUE"
for args in "--max-epoch" "--max-epoch 0" "--set" "--logdir $T/x" "--bogus"; do
  # shellcheck disable=SC2086
  tt_refused "resume $args: one line, exit 2" "towertrain: " "" "$TOWERTRAIN" resume "$T/a" $args
done

# A --set that moves a callback with a saved state: the log names it by the
# key it had in the job as it was (extra_callbacks[1]), not by its index in
# callbacks and extra_callbacks together.
cat >"$T/moved.cfg" <<JOB
model = "$TT_SRCDIR/models/mlp.cfg";
dataflow = { source = { type = "fake"; shape = [784]; classes = 10; size = 128; }; batch_size = 32; };
optimizer = { type = "sgd"; learning_rate = 0.1; };
callbacks = ( "model_saver" );
extra_callbacks = ( "progress_bar", { type = "moving_average_summary"; decay = 0.9; } );
max_epoch = 1;
JOB
"$TOWERTRAIN" run "$T/moved.cfg" --logdir "$T/moved" --quiet &&
  "$TOWERTRAIN" resume "$T/moved" --quiet --max-epoch 2 \
    --set 'extra_callbacks=( { type = "moving_average_summary"; decay = 0.9; } )' &&
  grep -q "resume: extra_callbacks\[1\] (moving_average_summary) of the job as it was is not at that place" "$T/moved/log.log"
ok $? "a moved callback's note names its key in the job as it was ($(grep 'resume: ' "$T/moved/log.log" | head -n 1))"
tt_done
