#!/bin/sh
# e2e_bad_input.sh - every bad job file in tests/bad/ (and a few bad --set) must
# be refused with exit status 2, ONE line on stderr that starts "towertrain: "
# and contains the file's "# expect:" text, nothing on stdout, and no log
# directory created (towertrain(1), EXIT STATUS). Files named model_*.cfg are model files, used by
# the bad job files. TAP output.

. "$(dirname "$0")/tt_lib.sh"
bad=$TT_SRCDIR/tests/bad

for f in "$bad"/*.cfg; do
    name=$(basename "$f")
    case $name in model_*) continue ;; esac
    expect=$(sed -n '1s/^# expect: //p' "$f")
    if [ -z "$expect" ]; then
        ok 1 "$name: first line is not '# expect: ...'"
        continue
    fi
    tt_refused "$name: $expect" "$expect" "$T/logdir_$n" \
        "$TOWERTRAIN" run "$f" --logdir "$T/logdir_$n"
done

# A valid job, made bad by --set.
cat >"$T/good.cfg" <<JOB
dataflow = { source = { type = "fake"; shape = [1, 28, 28]; size = 256; }; batch_size = 32; };
model = "$bad/model_ok.cfg";
optimizer = { type = "momentum"; learning_rate = 0.05; };
trainer = { type = "sync_replicated"; nr_tower = 2; };
max_epoch = 1;
JOB
tt_refused "--set trainer.nr_tower=0" "towertrain: --set trainer.nr_tower=0: must be >= 1 (got 0)" \
    "$T/logdir_s1" "$TOWERTRAIN" run "$T/good.cfg" --logdir "$T/logdir_s1" \
    --set trainer.nr_tower=0
tt_refused "--set with a typo in the key" \
    "--set trainer.nr_towr=2: unknown key 'trainer.nr_towr' (did you mean 'trainer.nr_tower'?)" \
    "$T/logdir_s2" "$TOWERTRAIN" run "$T/good.cfg" --logdir "$T/logdir_s2" \
    --set trainer.nr_towr=2
tt_refused "--set with an unparsable value" "--set trainer.nr_tower=abc: invalid value" \
    "$T/logdir_s3" "$TOWERTRAIN" run "$T/good.cfg" --logdir "$T/logdir_s3" \
    --set trainer.nr_tower=abc
touch "$T/a-file"
tt_refused "--logdir that is a file: exit 2, one line" "towertrain: $T/a-file: not a directory" "" \
    "$TOWERTRAIN" run "$T/good.cfg" --logdir "$T/a-file"
tt_refused "--logdir under a file: exit 2, one line" \
    "towertrain: cannot create $T/a-file/sub: Not a directory" "" \
    "$TOWERTRAIN" run "$T/good.cfg" --logdir "$T/a-file/sub"
tt_refused "--set without =" "--set trainer.nr_tower: expected KEY=VALUE" \
    "$T/logdir_s4" "$TOWERTRAIN" run "$T/good.cfg" --logdir "$T/logdir_s4" \
    --set trainer.nr_tower
tt_refused "--set of a bad optimizer" "unknown optimizer 'adm' (did you mean 'adam'?)" \
    "$T/logdir_s5" "$TOWERTRAIN" run "$T/good.cfg" --logdir "$T/logdir_s5" \
    --set 'optimizer.type="adm"'
tt_refused "missing job file" "no_such_job.cfg" "$T/logdir_s6" \
    "$TOWERTRAIN" run "$T/no_such_job.cfg" --logdir "$T/logdir_s6"

# Bytes from the user that reach a message are escaped: one line, no control
# codes (an ESC would let a file name drive the terminal).
weird="$T/$(printf 'x\033]0;owned\007\ny\377.cfg')"
tt_refused "a job path with control bytes and a newline" \
    'cannot read '"$T"'/x\x1b]0;owned\x07\x0ay\xff.cfg: No such file or directory' \
    "$T/logdir_s7" "$TOWERTRAIN" run "$weird" --logdir "$T/logdir_s7"
! grep -q "$(printf '\033')" "$T/refused.err"
ok $? "no ESC byte reaches stderr"
tt_refused "an unknown option with control bytes" "unknown option '--x\x1b[2J'" "$T/logdir_s8" \
    "$TOWERTRAIN" run "$T/good.cfg" "$(printf -- '--x\033[2J')"

# A data or session_init file that is not there: validate, run and resume
# name the job's file, line and key (towertrain.cfg(5), Errors), exit 2.
cat >"$T/nodata.cfg" <<JOB
model = "$TT_SRCDIR/models/mlp.cfg";
dataflow = { source = { type = "idx"; images = "$T/none-images.gz";
                        labels = "$T/none-labels.gz"; }; batch_size = 32; };
optimizer = { type = "sgd"; learning_rate = 0.1; };
JOB
tt_refused "validate: a data file that is not there, by file, line and key" \
    "towertrain: $T/nodata.cfg:2: dataflow.source.images: $T/none-images.gz: No such file" "" \
    "$TOWERTRAIN" validate "$T/nodata.cfg"
tt_refused "run: the same, and no log directory" \
    "towertrain: $T/nodata.cfg:2: dataflow.source.images: $T/none-images.gz: No such file" \
    "$T/logdir_nodata" "$TOWERTRAIN" run "$T/nodata.cfg" --logdir "$T/logdir_nodata"
tt_refused "validate: a session_init given by --set that is not there names the --set" \
    "towertrain: --set session_init=\"$T/none.safetensors\": $T/none.safetensors: No such file" "" \
    "$TOWERTRAIN" validate "$T/good.cfg" --set "session_init=\"$T/none.safetensors\""

tt_done
