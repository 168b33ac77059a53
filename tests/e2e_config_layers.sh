#!/bin/sh
# e2e_config_layers.sh - src/config is layered, one way, without cycles: the
# engine (schema.o) calls nothing above it, the model rules (model_cfg.o) sit
# on the engine, the job's tables and job.o on both. Read from the objects
# themselves: which object's undefined symbols another defines. The graph
# must have no cycle (schema.o and model_cfg.o used to call each other). TAP.
. "$(dirname "$0")/tt_lib.sh"
dir=${TT_BUILDDIR:-.}/src/config
if ! command -v nm >/dev/null 2>&1 || ! ls "$dir"/*.o >/dev/null 2>&1; then
    skip "src/config has no cycle between its objects" "nm or the objects ($dir/*.o) missing"
    tt_done
fi
for o in "$dir"/*.o; do
    b=$(basename "$o" .o)
    nm --defined-only -g "$o" | awk -v b="$b" 'NF == 3 { print "def", b, $3 }'
    nm -u "$o" | awk -v b="$b" '{ print "use", b, $NF }'
done >"$T/syms"
$PY - "$T/syms" >"$T/out" 2>&1 <<'PYEOF'
import sys
defs, uses = {}, []
for line in open(sys.argv[1]):
    kind, obj, sym = line.split()
    if kind == "def":
        defs[sym] = obj
    else:
        uses.append((obj, sym))
edges = {}
for obj, sym in uses:
    if sym in defs and defs[sym] != obj:
        edges.setdefault(obj, set()).add(defs[sym])
print("# " + "; ".join("%s -> %s" % (a, ", ".join(sorted(b))) for a, b in sorted(edges.items())))
# a cycle: depth-first search with colours
state, cycle = {}, []
def visit(v, path):
    state[v] = 1
    for w in sorted(edges.get(v, ())):
        if state.get(w) == 1 and not cycle:
            cycle.extend(path[path.index(w):] + [w] if w in path else [v, w])
        elif w not in state:
            visit(w, path + [w])
    state[v] = 2
for v in sorted(edges):
    if v not in state:
        visit(v, [v])
print(("not ok - " if cycle else "ok - ") + "no cycle among the objects of src/config%s" %
      (": " + " -> ".join(cycle) if cycle else ""))
low = sorted(edges.get("schema", ()))
print(("ok - " if not low else "not ok - ") +
      "the engine (schema.o) calls nothing else of src/config%s" % (": " + ", ".join(low) if low else ""))
PYEOF
tt_tap "$T/out" $?
tt_done
