#!/bin/sh
# End-to-end: training and bench across MPI ranks (towertrain(1), RUNNING UNDER MPI; bench) (TAP).
# Runs mpirun --allow-run-as-root --oversubscribe -np 2 on this machine; skips
# visibly when the binary was built without MPI or mpirun is missing.
. "$(dirname "$0")/tt_lib.sh"
if ! "$TOWERTRAIN" --version | grep -q mpi || ! command -v mpirun >/dev/null; then
  skip "training across MPI ranks" "built without MPI or no mpirun (apt-get install openmpi-bin libopenmpi-dev)"
  tt_done
fi
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
DATA=/usr/share/datasets/fashion-mnist


cat > "$T/job.cfg" <<CFG
model = "$TT_SRCDIR/models/mlp.cfg";
dataflow = { source = { type = "idx"; images = "$DATA/train-images-idx3-ubyte.gz";
                        labels = "$DATA/train-labels-idx1-ubyte.gz"; };
             augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
             limit = 2560; batch_size = 32; };
optimizer = { type = "momentum"; learning_rate = 0.05; momentum = 0.9; };
trainer = { type = "sync_replicated"; nr_tower = 1; threads_per_tower = 1; };
max_epoch = 2;
steps_per_epoch = 8;
callbacks = ( { type = "inference_runner";
                dataflow = { source = { type = "idx"; images = "$DATA/t10k-images-idx3-ubyte.gz";
                                        labels = "$DATA/t10k-labels-idx1-ubyte.gz"; };
                             augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } );
                             limit = 1000; batch_size = 100; }; },
              "model_saver" );
monitors = ( "json" );
CFG
# Short runs: the equivalences hold step by step up to the rounding of the
# reduction order, and a relu whose input sits within that rounding of 0
# flips its mask and sends the trajectories apart (in 80 steps of this job
# that happened for some seeds whatever the GEMM: rel diff 1e-4 .. 0.46)
FINAL=model-16.safetensors

# the reference: simple with the global batch of 64
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/simple" --quiet \
  --set 'trainer={ type = "simple"; }' --set dataflow.batch_size=64
ok $? "reference: simple trainer, batch 64"

# (1) 2 ranks x 1 tower and 2 ranks x 2 towers
$MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/r2t1" >"$T/out21" 2>&1
rc=$?
d=$(tt_same "$T/simple/$FINAL" "$T/r2t1/$FINAL" 1e-5 optimizer); s=$?
ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "2 ranks x 1 tower equal simple with the global batch (max rel diff $d)"
$MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/r2t2" --quiet \
  --set trainer.nr_tower=2 --set dataflow.batch_size=16
rc=$?
d=$(tt_same "$T/simple/$FINAL" "$T/r2t2/$FINAL" 1e-5 optimizer); s=$?
ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "2 ranks x 2 towers equal simple with the global batch (max rel diff $d)"

# (1b) dropout draws its masks by the tower's global index: 2 ranks x 1 tower
# equal one process of 2 towers (the same masks for the same slices)
cat > "$T/mlp_dropout.cfg" <<CFG
input = [784];
classes = 10;
layers = ( { name = "fc0"; type = "dense"; units = 256; activation = "relu"; },
           { name = "drop"; type = "dropout"; rate = 0.5; },
           { name = "fc1"; type = "dense"; units = 10; } );
loss = "softmax_cross_entropy";
CFG
"$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/drop_t2" --quiet \
  --set "model=\"$T/mlp_dropout.cfg\"" --set trainer.nr_tower=2
rc1=$?
$MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/drop_r2" --quiet \
  --set "model=\"$T/mlp_dropout.cfg\""
rc=$?
d=$(tt_same "$T/drop_t2/$FINAL" "$T/drop_r2/$FINAL" 1e-5 optimizer); s=$?
ok $([ $rc1 = 0 ] && [ $rc = 0 ] && [ $s = 0 ]; echo $?) "with dropout, 2 ranks x 1 tower equal 1 process x 2 towers (max rel diff $d)"

# (2) validation is split over the ranks and reduced: the same figures.
# Not two samples of training noise but one computation up to the reduction
# order (the parameters agree within 1e-5, check (1)): the logits differ by
# about that, and an image changes its class only on such a near-tie, so 2
# of the 1000 validation images may, and the losses agree within 1e-4.
$PY -c 'import json,sys
a = json.load(open(sys.argv[1]))[-1]; b = json.load(open(sys.argv[2]))[-1]
assert abs(a["validation_loss"] - b["validation_loss"]) < 1e-4 * a["validation_loss"], (a, b)
assert abs(a["validation_accuracy"] - b["validation_accuracy"]) <= 0.002, (a, b)
assert abs(a["train_loss"] - b["train_loss"]) < 1e-4 * a["train_loss"], (a, b)' \
  "$T/simple/stats.json" "$T/r2t1/stats.json"
ok $? "validation over 2 ranks and the global train_loss match the single process"

# (3) one rank prints; rank 0 alone writes the log directory
[ "$(grep -c 'training finished' "$T/out21")" = 1 ]
ok $? "one 'training finished' line for 2 ranks (rank 0 prints)"
mkdir -p "$T/w0" "$T/w1"
$MPIRUN -np 1 --wdir "$T/w0" "$TOWERTRAIN" run "$T/job.cfg" --logdir log --quiet --set max_epoch=1 : \
        -np 1 --wdir "$T/w1" "$TOWERTRAIN" run "$T/job.cfg" --logdir log --quiet --set max_epoch=1
rc=$?
[ $rc = 0 ] && [ -f "$T/w0/log/stats.json" ] && [ -f "$T/w0/log/model-8.safetensors" ] && [ ! -e "$T/w1/log" ]
ok $? "rank 0 wrote its log directory, rank 1 (another working directory) wrote nothing"

# (4) resume under mpirun from rank 0's checkpoint equals the uninterrupted run
$MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/res" --quiet --set max_epoch=1 &&
  $MPIRUN -np 2 "$TOWERTRAIN" resume "$T/res" --max-epoch 2 --quiet
rc=$?
d=$(tt_same "$T/r2t1/$FINAL" "$T/res/$FINAL" 0 optimizer); s=$?
ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "resume under mpirun: bitwise equal to the uninterrupted 2-rank run (max diff $d)"

# (4b) min_saver resumed under mpirun: rank 0 reads the best value on record
# and tells rank 1, so both skip the worse epoch 3 (saving is collective)
best='callbacks=( { type = "scheduled_hyperparam"; schedule = ( (0, 0.05), (1, 0.01), (2, 0.04) ); }, "model_saver", { type = "min_saver"; monitor = "learning_rate"; } )'
$MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/best" --quiet --set "$best" &&
  $MPIRUN -np 2 "$TOWERTRAIN" resume "$T/best" --max-epoch 3 --quiet
rc=$?
e=$($PY -c 'import sys; from tt_safetensors import load; print(load(sys.argv[1])[1]["epoch_num"])' "$T/best/min-learning_rate.safetensors")
ok $([ $rc = 0 ] && [ "$e" = 2 ]; echo $?) "min_saver resumed under mpirun: the best file stays epoch 2's (epoch $e)"

# (4b') a batchnorm model resumed under mpirun from a mid-epoch checkpoint:
# each rank's statistics were gathered into it and come back to that rank
bn='model={ input = [1, 28, 28]; classes = 10; layers = ( { name = "c"; type = "conv2d"; filters = 4; kernel = 3; bias = false; }, { name = "bn"; type = "batchnorm"; }, { name = "r"; type = "relu"; }, { name = "p"; type = "global_avgpool"; }, { name = "fc"; type = "dense"; units = 10; } ); }'
saves='callbacks=( { type = "model_saver"; every_k_steps = 3; max_to_keep = 0; } )'
$MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/bn" --quiet --set "$bn" --set "$saves" &&
  cp -r "$T/bn" "$T/bn-res" &&
  $MPIRUN -np 2 "$TOWERTRAIN" resume "$T/bn-res/model-3.safetensors" --max-epoch 2 --quiet
rc=$?
d=$(tt_same "$T/bn/model-15.safetensors" "$T/bn-res/model-15.safetensors" 0); s=$?
ok $([ $rc = 0 ] && [ $s = 0 ]; echo $?) "batchnorm, 2 ranks, resumed from step 3 of 8: bit for bit (max diff $d)"

# (4c) statistics-watching callbacks decide on rank 0's value, on every rank:
# throughput differs between ranks, and a rate halved (or a stop taken) by
# one rank alone parted the replicas (or hung the next all-reduce). The
# replicas stay one: the run's last validation_loss (each rank evaluating its
# share with its own parameters) is eval's of rank 0's checkpoint, up to the
# order of the sums; and a stop on throughput ends both ranks (timeout 120 s).
smp='callbacks=( "throughput", { type = "stat_monitor_param"; monitor = "throughput"; reverse = true; last_k = 1; factor = 0.5; }, { type = "inference_runner"; dataflow = { source = { type = "idx"; images = "'$DATA'/t10k-images-idx3-ubyte.gz"; labels = "'$DATA'/t10k-labels-idx1-ubyte.gz"; }; augment = ( { type = "normalize"; mean = [0.286]; std = [0.353]; } ); limit = 1000; batch_size = 100; }; }, "model_saver" )'
timeout 120 $MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/smp" --quiet --set max_epoch=6 --set "$smp" &&
  "$TOWERTRAIN" eval "$T/smp" --json "$T/smp-eval.json" >/dev/null
rc=$?
$PY - "$T/smp/stats.json" "$T/smp-eval.json" <<'PYEOF'
import json, sys
run = json.load(open(sys.argv[1]))[-1]["validation_loss"]
ev = json.load(open(sys.argv[2]))["loss"]
sys.exit(0 if abs(run - ev) <= 1e-5 * ev else "run %r eval %r" % (run, ev))
PYEOF
same=$?
ok $([ $rc = 0 ] && [ $same = 0 ]; echo $?) "stat_monitor_param on throughput under mpirun: the replicas stay one (validation_loss is eval's of rank 0's checkpoint)"
timeout 120 $MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/es" --quiet --set max_epoch=8 \
  --set 'callbacks=( "throughput", { type = "early_stop"; monitor = "throughput"; mode = "max"; patience = 0; } )'
ok $? "early_stop on throughput under mpirun: both ranks stop together (exit 0 within 120 s)"

# (5) a rank failing on bad data ends the whole job, quickly, with its message
head -c 5000 /dev/urandom | gzip > "$T/bad-images.gz"
sed "s#$DATA/train-images-idx3-ubyte.gz#$T/bad-images.gz#" "$T/job.cfg" > "$T/bad.cfg"
start=$(date +%s)
timeout 60 $MPIRUN -np 1 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/f" --quiet : \
                   -np 1 "$TOWERTRAIN" run "$T/bad.cfg" --logdir "$T/f" --quiet >"$T/out" 2>&1
rc=$?
took=$(($(date +%s) - start))
[ $rc != 0 ] && [ $rc != 124 ] && [ $took -lt 30 ] && grep -q "^towertrain: rank 1: .*bad-images.gz: not an IDX" "$T/out"
st=$?
[ $st = 0 ] || sed 's/^/# /' "$T/out" # what mpirun printed instead
ok $st "rank 1 on bad data: the job exits $rc after ${took}s with rank 1's message, prefixed 'rank 1:'"

# (6) the other trainers refuse to span ranks
$MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/ps" --quiet \
  --set 'trainer={ type = "sync_parameter_server"; }' >"$T/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "only sync_replicated runs across MPI ranks" "$T/out" && [ ! -e "$T/ps" ]
ok $? "sync_parameter_server under mpirun: exit 2 with a clear line (got $rc)"

# (7) bench across ranks: columns and arithmetic with n = towers x ranks
check_bench() { # FILE N
  $PY - "$1" "$2" <<'PYEOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
n = int(sys.argv[2])
assert rows, "no rows"
for r in rows:
    size, count = int(r[0]), int(r[1])
    assert r[2] == "float" and r[3] == "sum" and size == 4 * count, r
    for t, alg, bus, wrong in (r[4:8], r[8:12]):
        assert wrong == "0", r
        # time is printed to 0.1 us and algbw to 0.01 GB/s: allow both roundings
        t = float(t)
        lo, hi = size / (t + 0.05) * 1e-3, size / max(t - 0.05, 1e-3) * 1e-3
        assert lo - 0.006 <= float(alg) <= hi + 0.006, r
        assert abs(float(bus) - float(alg) * 2 * (n - 1) / n) <= 0.011, r
PYEOF
}
$MPIRUN -np 2 "$TOWERTRAIN" bench --algo mpi --towers 1 -b 8 -e 4M -f 8 -n 5 -w 1 >"$T/b1" 2>&1 &&
  check_bench "$T/b1" 2 && grep -q "2 MPI ranks x 1 CPU tower(s), algo mpi (MPI_Allreduce)" "$T/b1"
ok $? "bench --algo mpi, 2 ranks x 1 tower: #wrong 0, busbw = algbw x 2(n-1)/n with n = 2"
$MPIRUN -np 2 "$TOWERTRAIN" bench --algo mpi --towers 2 -b 1K -e 1M -f 32 -n 5 -w 1 >"$T/b2" 2>&1 &&
  check_bench "$T/b2" 4
ok $? "bench --algo mpi, 2 ranks x 2 towers: #wrong 0, n = 4"
"$TOWERTRAIN" bench --algo mpi >"$T/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "start it with mpirun" "$T/out"
ok $? "bench --algo mpi without mpirun: exit 2, says to use mpirun"

# mpirun's output to a file: a rank's stdout is Open MPI's pseudo-terminal,
# but no progress bar is drawn into the file (no carriage return, no escape)
$MPIRUN -np 2 "$TOWERTRAIN" run "$T/job.cfg" --logdir "$T/tofile" --set max_epoch=1 \
  > "$T/tofile.out" 2>&1
rc=$?
[ $rc = 0 ] && [ -s "$T/tofile.out" ] && ! grep -q "$(printf '\r')" "$T/tofile.out" &&
  ! grep -q "$(printf '\033')" "$T/tofile.out" && grep -q "epoch 1" "$T/tofile.out"
ok $? "mpirun > file: epoch lines, no carriage return or escape code in the file (rc $rc)"
tt_done
