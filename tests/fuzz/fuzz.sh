#!/bin/sh
# fuzz.sh - runs every libFuzzer target of `make fuzz` for FUZZ_SECONDS
# seconds (default 30), FUZZ_JOBS at a time (default 2, niced), each over a
# fresh directory for new inputs plus its seed corpus (read only). TAP: one
# line per target with its executions. SKIPs visibly when the targets are not
# built (no clang). A crashing input is left as fuzz-build/crashes/<target>-*:
# fix the bug and add the input to tests/fuzz/corpus/<target>/ as crash-<what>.
srcdir=${TT_SRCDIR:-.}
builddir=${TT_BUILDDIR:-.}
secs=${FUZZ_SECONDS:-30}
jobs=${FUZZ_JOBS:-2}
targets="job model set idx cifar10 npy image_folder plot safetensors checkpoint_job"
bin=$builddir/fuzz-build
if [ ! -x "$bin/fuzz_job" ]; then
    echo "1..0 # SKIP fuzz targets not built (make fuzz: needs clang-16 and libclang-rt-16-dev)"
    exit 0
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tt_fuzzrun.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT
mkdir -p "$bin/crashes"
# libconfig 1.5 leaks on its own syntax errors: lsan.supp names those frames only
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export LSAN_OPTIONS="suppressions=$srcdir/tests/fuzz/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

run_one() {
    t=$1
    case $t in
        job|model|set) extra="-max_len=8192 -dict=$srcdir/tests/fuzz/cfg.dict" ;;
        idx|npy) extra="-max_len=8192" ;;
        *) extra="-max_len=20000" ;;
    esac
    mkdir -p "$work/$t"
    # shellcheck disable=SC2086
    nice -n 10 "$bin/fuzz_$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$bin/crashes/$t-" $extra \
        "$work/$t" "$srcdir/tests/fuzz/corpus/$t" >"$work/$t.log" 2>&1
    echo $? >"$work/$t.rc"
}

set -- $targets
while [ $# -gt 0 ]; do
    running=0
    while [ $# -gt 0 ] && [ $running -lt "$jobs" ]; do
        run_one "$1" &
        shift
        running=$((running + 1))
    done
    wait
done

n=0
failed=0
for t in $targets; do
    n=$((n + 1))
    rc=$(cat "$work/$t.rc" 2>/dev/null || echo 99)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -1)
    if [ "$rc" -eq 0 ]; then
        echo "ok $n - fuzz_$t: ${secs} s, ${runs:-?} executions, no crash, leak or timeout"
    else
        echo "not ok $n - fuzz_$t: exit status $rc after ${runs:-?} executions"
        grep -E "ERROR|SUMMARY|runtime error|fuzz:|Test unit written" "$work/$t.log" |
            head -n 8 | sed 's/^/# /'
        failed=$((failed + 1))
    fi
done
echo "1..$n"
[ "$failed" -eq 0 ]
