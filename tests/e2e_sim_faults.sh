#!/bin/sh
# e2e_sim_faults.sh - when a device or a peer fails (issue 27), on simulated
# GPUs with the faults TT_SIM_FAULT injects (towertrain.cfg(5)): an
# all-reduce that never completes (its communicator reports an asynchronous
# error 2 s later) ends the run with exit 1 and one line within 10 s, with
# no hang in teardown, also under mpirun (both ranks gone) and while a
# SIGTERM waits for the step; a device error in a checkpoint's download
# writes no file, leaves the pointer and every older file as they were.
# Every run is bounded by timeout(1): a hang fails its check (status 124)
# instead of hanging the suite (--foreground where the test signals it:
# else timeout sends SIGTERM to the child and to its process group, and
# towertrain's second signal exits at once, 143). Before issue 27 each check failed: the
# stalled runs hung (timeout), the checkpoint runs wrote a zero checkpoint,
# moved the pointer and deleted model-N under max_to_keep.
. "$(dirname "$0")/tt_lib.sh"

tt_job "$T/job.cfg" seed=5 shape="1, 8, 8" size=256 steps=10 \
  trainer='type = "sync_replicated"; device = "sim"; nr_tower = 2;' \
  callbacks='( { type = "model_saver"; max_to_keep = 2; } )' layers='
  { name = "fc0"; type = "dense"; units = 16; activation = "relu"; },
  { name = "fc1"; type = "dense"; units = 4; }'

now() { date +%s.%N; }
# within A B LIMIT: B - A <= LIMIT seconds
within() { awk -v a="$1" -v b="$2" -v l="$3" 'BEGIN { exit !(b - a <= l) }'; }
# one_line FILE WORDS...: FILE holds one line, "towertrain: ..." with every word
one_line() {
  f=$1
  shift
  [ "$(wc -l <"$f")" = 1 ] && grep -q '^towertrain: ' "$f" || return 1
  for w in "$@"; do grep -q -- "$w" "$f" || return 1; done
}

# ---- a stalled all-reduce: exit 1, one line, within 10 s ----
for c in "rep2|type=\"sync_replicated\"; nr_tower=2; gradient_packing=2;" \
         "rep1_fp16|type=\"sync_replicated\"; nr_tower=1; precision=\"fp16\";" \
         "rep3|type=\"sync_replicated\"; nr_tower=3;"; do
  name=${c%%|*} trainer=${c#*|}
  t0=$(now)
  TT_SIM_FAULT=stall_allreduce:4 timeout 30 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/$name" \
    --quiet --set "trainer={$trainer device=\"sim\";}" >"$T/out" 2>"$T/err"
  rc=$?
  t1=$(now)
  [ $rc = 1 ] && within "$t0" "$t1" 10 &&
    one_line "$T/err" "tower [0-9]" "sim:[0-9]" "global step 4 never completed" "aborted"
  ok $? "$name: an all-reduce stalled from step 4 ends the run with exit 1 and one line within 10 s (exit $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s: $(head -c 200 "$T/err"))"
done

# ---- the same under mpirun: both ranks gone within 10 s ----
if "$TOWERTRAIN" --version | grep -q mpi && command -v mpirun >/dev/null; then
  t0=$(now)
  TT_SIM_FAULT=stall_allreduce:4 timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
    -x TT_SIM_FAULT "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/mpi" --quiet \
    --set 'trainer={type="sync_replicated"; device="sim"; nr_tower=1;}' >"$T/out" 2>"$T/err"
  rc=$?
  t1=$(now)
  [ $rc != 0 ] && [ $rc != 124 ] && within "$t0" "$t1" 10 &&
    grep -q '^towertrain: rank [01]: tower 0: sim:0: .*global step 4 never completed' "$T/err"
  ok $? "2 ranks: a stalled all-reduce ends both ranks within 10 s (mpirun exit $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s)"
else
  skip "2 ranks: a stalled all-reduce ends both ranks within 10 s" "built without MPI or no mpirun"
fi

# ---- a peer gone silent (no asynchronous error ever): trainer.collective_timeout ----
# ends it: exit 1 within the limit + 10 s, first a line naming the collective
t0=$(now)
TT_SIM_FAULT=hang_allreduce:4 timeout 30 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/hang" \
  --quiet --set 'trainer={type="sync_replicated"; device="sim"; nr_tower=2; collective_timeout=2;}' \
  >"$T/out" 2>"$T/err"
rc=$?
t1=$(now)
[ $rc = 1 ] && within "$t0" "$t1" 12 &&
  head -1 "$T/err" | grep -q '^towertrain: rank 0 of 1: device all-reduce (NCCL) at step [0-9]* not finished after 2 s (trainer.collective_timeout)'
ok $? "a silent hang of the device all-reduce ends at trainer.collective_timeout: exit $rc in $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s: $(head -c 200 "$T/err")"
if "$TOWERTRAIN" --version | grep -q mpi && command -v mpirun >/dev/null; then
  t0=$(now)
  TT_SIM_FAULT=hang_allreduce:4 timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 \
    -x TT_SIM_FAULT "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/mpihang" --quiet \
    --set 'trainer={type="sync_replicated"; device="sim"; nr_tower=1; collective_timeout=2;}' \
    >"$T/out" 2>"$T/err"
  rc=$?
  t1=$(now)
  [ $rc = 1 ] && within "$t0" "$t1" 12 &&
    grep -q '^towertrain: rank [01] of 2: .* not finished after 2 s (trainer.collective_timeout), waiting for rank' "$T/err"
  ok $? "2 ranks: a silent hang ends both ranks at trainer.collective_timeout (mpirun exit $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s)"
else
  skip "2 ranks: a silent hang ends both ranks at trainer.collective_timeout" "built without MPI or no mpirun"
fi

# ---- SIGTERM while the collective is stalled ends the process ----
# the signal comes once the log says the stall began, well before the
# communicator's error 2 s after it
TT_SIM_FAULT=stall_allreduce:3 timeout --foreground 30 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/term" \
  --quiet --set 'steps_per_epoch=100000' >"$T/out" 2>"$T/err" &
pid=$!
i=0
while ! grep -q 'TT_SIM_FAULT: the all-reduce of global step 3 stalls' "$T/term/log.log" \
  2>/dev/null && [ $i -lt 1000 ]; do
  sleep 0.02
  i=$((i + 1))
done
sleep 0.2
t0=$(now)
kill -TERM $pid
wait $pid
rc=$?
t1=$(now)
[ $rc = 1 ] && within "$t0" "$t1" 10 && one_line "$T/err" "tower" "sim:" "never completed" &&
  [ ! -f "$T/term/checkpoint" ]
ok $? "SIGTERM during a stalled all-reduce ends the process: exit 1, no checkpoint from an inconsistent state (exit $rc: $(head -c 200 "$T/err"); $(ls "$T/term" | tr "\n" " "))"

# ---- a download error during a checkpoint: nothing written, nothing lost ----
# two epochs give model-10 and model-20 (max_to_keep 2); resuming for a
# third, the save of model-30 fails at its first download
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/ck" --quiet --set max_epoch=2 >/dev/null 2>&1
( cd "$T/ck" && ls >"$T/before" && cksum model-*.safetensors checkpoint >"$T/sums" )
TT_SIM_FAULT=download_error:checkpoint timeout 30 "$TOWERTRAIN" resume "$T/ck" --quiet \
  --max-epoch 3 >"$T/out" 2>"$T/err"
rc=$?
( cd "$T/ck" && ls | grep -v '^events\.' >"$T/after" && cksum model-*.safetensors checkpoint >"$T/sums_after" )
grep -v '^events\.' "$T/before" >"$T/before_files"
[ $rc = 1 ] && one_line "$T/err" "model-30.safetensors not written" "tower 0 (sim:0)" "download" &&
  cmp -s "$T/before_files" "$T/after" && cmp -s "$T/sums" "$T/sums_after" &&
  [ "$(head -n 1 "$T/ck/checkpoint")" = model-20.safetensors ]
ok $? "model_saver: a download error writes no model-30, keeps model-10, model-20 and the pointer (exit $rc: $(head -c 200 "$T/err"))"

# the SIGTERM checkpoint, the first save of the run
TT_SIM_FAULT=download_error:checkpoint timeout --foreground 30 "$TOWERTRAIN" run "$T/job.cfg" \
  --logdir "$T/ck_term" --quiet --set 'steps_per_epoch=100000' >"$T/out" 2>"$T/err" &
pid=$!
sleep 1
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 1 ] && one_line "$T/err" "not written" "sim:0" "download" &&
  [ ! -f "$T/ck_term/checkpoint" ] && ! ls "$T/ck_term" | grep -q safetensors
ok $? "the SIGTERM checkpoint: a download error writes no file and no pointer, exit 1 (exit $rc)"

tt_done
