#!/bin/sh
# tt_slowest.sh N LOG... - the N slowest tests of the LOGs make check just
# wrote (each test's seconds in the .time file tests/tt_timed.sh left beside
# its .log), slowest first, and the sum of all their seconds: printed at
# the end of make check so that the suite's time stays visible. Budget: the
# whole make check in 8 minutes on 2 cores (README, Testing).
n=$1
shift
for log in "$@"; do
  t=${log%.log}.time
  [ -f "$t" ] && echo "$(cat "$t") ${log%.log}"
done | sort -k1,1 -n -r | awk -v n="$n" '
  { sum += $1; if (NR <= n) line[NR] = sprintf("%8.1f s  %s", $1, $2) }
  END {
    if (NR == 0) exit
    printf "The %d slowest of %d tests (seconds each; %.0f s in all):\n", (NR < n ? NR : n), NR, sum
    for (i = 1; i <= n && i <= NR; i++) print line[i]
  }'
