#!/bin/sh
# End-to-end: `towertrain bench` prints nccl-tests' all_reduce_perf table with
# consistent arithmetic and no wrong element (TAP).
. "$(dirname "$0")/tt_lib.sh"
"$TOWERTRAIN" bench --towers 3 --algo all -b 1K -e 1M -f 4 -n 5 -w 1 --json "$T/b.json" > "$T/out"
rc=$?
$PY - "$T/out" "$T/b.json" $rc >"$T/checks" 2>&1 <<'PYEOF'
import json, sys
out, js, rc = open(sys.argv[1]).read().splitlines(), sys.argv[2], int(sys.argv[3])
from tt_tap import ok
ok(rc == 0, "bench exits 0")
rows = [l.split() for l in out if l.strip() and not l.startswith("#")]
ok(len(rows) == 3 * 6, "6 sizes (1K..1M by 4) for each of 3 algorithms: %d rows" % len(rows))
sizes = [int(r[0]) for r in rows[:6]]
ok(sizes == [1024, 4096, 16384, 65536, 262144, 1048576], "sizes %s" % sizes)
good = all(int(r[1]) * 4 == int(r[0]) and r[2] == "float" and r[3] == "sum" for r in rows)
ok(good, "count = size / 4, type float, redop sum")
arith = True
for r in rows:
    for t, alg, bus in ((4, 5, 6), (8, 9, 10)):
        time, algbw, busbw = float(r[t]), float(r[alg]), float(r[bus])
        arith &= abs(algbw - int(r[0]) / time / 1e3) <= 0.011 + 0.01 * algbw
        arith &= abs(busbw - algbw * 2 * 2 / 3) <= 0.011 + 0.01 * busbw
ok(arith, "algbw = size / time and busbw = algbw * 2(n-1)/n (n = 3)")
ok(all(r[7] == "0" and r[11] == "0" for r in rows), "#wrong is 0 everywhere, out-of-place and in-place")
ok(any(l.startswith("# Avg bus bandwidth") for l in out), "ends with # Avg bus bandwidth")
j = json.load(open(js))
ok(len(j) == 18 and all(e["in_place"]["wrong"] == 0 for e in j), "--json holds every row")

PYEOF
tt_tap "$T/checks" $?
# --opt=VALUE as the other commands take it: the same run as --opt VALUE
"$TOWERTRAIN" bench --towers=3 --algo=ring -b 1K -e 4K -n 2 -w 0 --json="$T/eq.json" > /dev/null &&
  $PY -c 'import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if len(j) == 3 and j[0]["size"] == 1024 and j[0]["towers"] == 3 and j[0]["algo"] == "ring" else 1)' "$T/eq.json"
ok $? "bench --towers=3 --algo=ring --json=FILE: read as --towers 3 --algo ring --json FILE"
for bad in "--algo nccl" "-b 0" "-f 1" "-c 2" "--towers 0" "--towers=0" "-e 1X" "--bogus 1"; do
  tt_refused "bench $bad: exit 2, one line" "towertrain: bench: " "" "$TOWERTRAIN" bench $bad
done
tt_done
