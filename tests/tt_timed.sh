#!/bin/sh
# tt_timed.sh - automake's test driver, timed: make check runs every test as
#   sh tests/tt_timed.sh DRIVER... --trs-file tests/x.trs ...
# which runs the driver (build-aux/tap-driver.sh) as it was, then writes
# the test's wall time in seconds to tests/x.time beside its .trs, for the
# slowest-tests list that make check prints at its end (tests/tt_slowest.sh).
# The driver's exit status is this script's.
trs=
prev=
for a in "$@"; do
  case $prev in --trs-file) trs=$a ;; esac
  case $a in --trs-file=*) trs=${a#--trs-file=} ;; esac
  prev=$a
done
start=$(date +%s.%N)
"$@"
rc=$?
end=$(date +%s.%N)
[ -n "$trs" ] && awk -v s="$start" -v e="$end" 'BEGIN { printf "%.1f\n", e - s }' >"${trs%.trs}.time"
exit $rc
