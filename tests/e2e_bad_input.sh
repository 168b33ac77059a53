#!/bin/sh
# e2e_bad_input.sh - every bad job file in tests/bad/ (and a few bad --set) must
# be refused with exit status 2, ONE line on stderr that starts "towertrain: "
# and contains the file's "# expect:" text, nothing on stdout, and no log
# directory created (SPEC 1). Files named model_*.cfg are model files, used by
# the bad job files. TAP output; needs $TOWERTRAIN and $TT_SRCDIR.

srcdir=${TT_SRCDIR:-.}
bad=$srcdir/tests/bad
if [ -z "$TOWERTRAIN" ] || [ ! -x "$TOWERTRAIN" ]; then
    echo "1..0 # SKIP towertrain binary not found (\$TOWERTRAIN)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tt_bad.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

n=0
failed=0

# check DESC EXPECT LOGDIR CMD...: runs CMD, reports one TAP line.
check() {
    desc=$1; expect=$2; logdir=$3; shift 3
    n=$((n + 1))
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    why=""
    lines=$(wc -l <"$tmp/err")
    first=$(head -n 1 "$tmp/err")
    [ "$rc" -eq 2 ] || why="$why exit status $rc, not 2;"
    [ "$lines" -eq 1 ] || why="$why stderr has $lines lines, not 1;"
    case $first in
        "towertrain: "*) ;;
        *) why="$why stderr does not start with 'towertrain: ';" ;;
    esac
    case $first in
        *"$expect"*) ;;
        *) why="$why stderr lacks '$expect';" ;;
    esac
    [ -s "$tmp/out" ] && why="$why stdout is not empty;"
    [ -e "$logdir" ] && why="$why the log directory was created;"
    if [ -z "$why" ]; then
        echo "ok $n - $desc"
    else
        echo "not ok $n - $desc"
        echo "#$why"
        sed 's/^/# stderr: /' "$tmp/err" | head -n 5
        failed=$((failed + 1))
    fi
}

for f in "$bad"/*.cfg; do
    name=$(basename "$f")
    case $name in model_*) continue ;; esac
    expect=$(sed -n '1s/^# expect: //p' "$f")
    if [ -z "$expect" ]; then
        n=$((n + 1))
        echo "not ok $n - $name: first line is not '# expect: ...'"
        failed=$((failed + 1))
        continue
    fi
    check "$name: $expect" "$expect" "$tmp/logdir_$n" \
        "$TOWERTRAIN" run "$f" --logdir "$tmp/logdir_$n"
done

# A valid job, made bad by --set.
cat >"$tmp/good.cfg" <<JOB
dataflow = { source = { type = "fake"; shape = [1, 28, 28]; size = 256; }; batch_size = 32; };
model = "$bad/model_ok.cfg";
optimizer = { type = "momentum"; learning_rate = 0.05; };
trainer = { type = "sync_replicated"; nr_tower = 2; };
max_epoch = 1;
JOB
check "--set trainer.nr_tower=0" "towertrain: --set trainer.nr_tower=0: must be >= 1 (got 0)" \
    "$tmp/logdir_s1" "$TOWERTRAIN" run "$tmp/good.cfg" --logdir "$tmp/logdir_s1" \
    --set trainer.nr_tower=0
check "--set with a typo in the key" \
    "--set trainer.nr_towr=2: unknown key 'trainer.nr_towr' (did you mean 'trainer.nr_tower'?)" \
    "$tmp/logdir_s2" "$TOWERTRAIN" run "$tmp/good.cfg" --logdir "$tmp/logdir_s2" \
    --set trainer.nr_towr=2
check "--set with an unparsable value" "--set trainer.nr_tower=abc: invalid value" \
    "$tmp/logdir_s3" "$TOWERTRAIN" run "$tmp/good.cfg" --logdir "$tmp/logdir_s3" \
    --set trainer.nr_tower=abc
check "--set without =" "--set trainer.nr_tower: expected KEY=VALUE" \
    "$tmp/logdir_s4" "$TOWERTRAIN" run "$tmp/good.cfg" --logdir "$tmp/logdir_s4" \
    --set trainer.nr_tower
check "--set of a bad optimizer" "unknown optimizer 'adm' (did you mean 'adam'?)" \
    "$tmp/logdir_s5" "$TOWERTRAIN" run "$tmp/good.cfg" --logdir "$tmp/logdir_s5" \
    --set 'optimizer.type="adm"'
check "missing job file" "no_such_job.cfg" "$tmp/logdir_s6" \
    "$TOWERTRAIN" run "$tmp/no_such_job.cfg" --logdir "$tmp/logdir_s6"


# Bytes from the user that reach a message are escaped: one line, no control
# codes (an ESC would let a file name drive the terminal).
esc=$(printf '\033')
weird="$tmp/$(printf 'x\033]0;owned\007\ny\377.cfg')"
check "a job path with control bytes and a newline" \
    'cannot read '"$tmp"'/x\x1b]0;owned\x07\x0ay\xff.cfg: No such file or directory' \
    "$tmp/logdir_s7" "$TOWERTRAIN" run "$weird" --logdir "$tmp/logdir_s7"
n=$((n + 1))
if grep -q "$esc" "$tmp/err"; then
    echo "not ok $n - no ESC byte reaches stderr"; failed=$((failed + 1))
else
    echo "ok $n - no ESC byte reaches stderr"
fi
check "an unknown option with control bytes" "unknown option '--x\x1b[2J'" "$tmp/logdir_s8" \
    "$TOWERTRAIN" run "$tmp/good.cfg" "$(printf -- '--x\033[2J')"

echo "1..$n"
[ "$failed" -eq 0 ]
