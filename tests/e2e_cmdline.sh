#!/bin/sh
# End-to-end: every command reads its words by one table of options (TAP):
# a value after '=' for short options too, --help anywhere on the line, and
# one clear line for an unknown option, a missing value or an extra argument.
. "$(dirname "$0")/tt_lib.sh"

mkdir "$T/stats"
cat > "$T/stats/stats.json" <<'JSON'
[ {"epoch_num": 1, "global_step": 10, "train_loss": 2.0, "validation_loss": 2.2},
  {"epoch_num": 2, "global_step": 20, "train_loss": 1.0, "validation_loss": 1.1} ]
JSON

# --help anywhere: the command's own usage and options, exit 0, nothing else done
"$TOWERTRAIN" run "$T/none.cfg" --logdir "$T/help_run" --help > "$T/out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "^usage: towertrain run JOB.cfg" "$T/out" && grep -q -- "--logdir DIR" "$T/out" &&
  ! grep -q -- "--max-epoch" "$T/out" && [ ! -e "$T/help_run" ]
ok $? "run JOB.cfg --logdir DIR --help: run's usage and options, exit 0, no log directory (rc $rc)"
"$TOWERTRAIN" bench -e 8 --help > "$T/out" 2>&1 && grep -q "^usage: towertrain bench" "$T/out" &&
  grep -q -- "^  -e BYTES" "$T/out" && grep -q -- "--towers N" "$T/out" && ! grep -q -- "--logdir" "$T/out"
ok $? "bench --help: bench's options (-e, --towers), not run's"
"$TOWERTRAIN" resume -h > "$T/out" 2>&1 && grep -q -- "--max-epoch N" "$T/out"
ok $? "resume -h: resume's options"

# a short option's value after '='
"$TOWERTRAIN" plot "$T/stats" -o="$T/eq.svg" > "$T/out" 2>&1 && [ -s "$T/eq.svg" ] && [ ! -e "$T/stats/stats.svg" ]
ok $? "plot LOGDIR -o=FILE.svg writes FILE.svg ($(head -c 200 "$T/out"))"
"$TOWERTRAIN" bench --towers=2 -b=1K -e=4K -f=4 -n=2 -w=0 -c=1 --json="$T/eq.json" > /dev/null 2>&1 &&
  $PY -c 'import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if [e["size"] for e in j] == [1024, 4096] and j[0]["towers"] == 2 else 1)' "$T/eq.json"
ok $? "bench -b=1K -e=4K -f=4: read as -b 1K -e 4K -f 4"

# one line, exit 2, the command's name and the word at fault
tt_refused "bench --frob: an unknown option" "towertrain: bench: unknown option '--frob'" "" \
  "$TOWERTRAIN" bench --frob
tt_refused "bench -e 8 extra: an unexpected argument" "towertrain: bench: unexpected argument 'extra'" "" \
  "$TOWERTRAIN" bench -e 8 extra
tt_refused "bench -e at the end: needs a value" "towertrain: bench: -e needs BYTES" "" \
  "$TOWERTRAIN" bench -e
tt_refused "plot -x=1: an unknown option" "towertrain: plot: unknown option '-x=1'" "" \
  "$TOWERTRAIN" plot "$T/stats" -x=1
tt_refused "run --quiet=yes: a flag takes no value" "towertrain: run: --quiet takes no value" "$T/q" \
  "$TOWERTRAIN" run "$TT_SRCDIR/jobs/fashion_mnist_mlp.cfg" --logdir "$T/q" --quiet=yes
tt_refused "validate --logdir: not an option of validate" "towertrain: validate: unknown option '--logdir'" "" \
  "$TOWERTRAIN" validate "$TT_SRCDIR/jobs/fashion_mnist_mlp.cfg" --logdir "$T/v"
tt_done
