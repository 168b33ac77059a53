#!/bin/sh
# End-to-end on the build itself (TAP): no circle between source files. A
# file calls (or reads) another's symbol when its object has it undefined and
# the other defines it; a circle is a strongly connected set of two or more
# objects in that graph (nm over the objects of src/ and monitors/, tests
# and bench left out). A circle means two files cannot be read, tested or
# replaced apart: the test names each one and the symbols on its edges.
. "$(dirname "$0")/tt_lib.sh"

command -v nm > /dev/null || tt_skip_all "nm (binutils) is not installed" "no circle between source files"
cd "${TT_BUILDDIR:-.}" || exit 99
$PY - > "$T/out" 2>&1 <<'PY'
import collections, glob, subprocess, sys
objs = sorted(glob.glob("src/**/*.o", recursive=True) + glob.glob("monitors/**/*.o", recursive=True))
if len(objs) < 50:
    print("not ok - found only %d objects under src/ and monitors/ (is the tree built?)" % len(objs))
    sys.exit(0)
defs = collections.defaultdict(set); undef = {o: set() for o in objs}
# one nm for all: "OBJECT:[ADDRESS] TYPE SYMBOL" a line
out = subprocess.run(["nm", "-A"] + objs, capture_output=True, text=True).stdout
for line in out.splitlines():
    o, _, rest = line.partition(":")
    p = rest.split()
    if o not in undef:
        continue
    if len(p) == 3 and p[1] in "TDBR":
        defs[p[2]].add(o)
    elif len(p) == 2 and p[0] == "U":
        undef[o].add(p[1])
edges = collections.defaultdict(dict)
for o, u in undef.items():
    for s in u:
        for d in defs.get(s, ()):
            if d != o:
                edges[o].setdefault(d, set()).add(s)
# Tarjan's strongly connected components, iteratively (no recursion limit)
index, low, on, stack, comps, n = {}, {}, set(), [], [], 0
for root in objs:
    if root in index:
        continue
    work = [(root, iter(edges.get(root, {})))]
    index[root] = low[root] = n; n += 1; stack.append(root); on.add(root)
    while work:
        v, it = work[-1]
        w = next(it, None)
        if w is not None:
            if w not in index:
                index[w] = low[w] = n; n += 1; stack.append(w); on.add(w)
                work.append((w, iter(edges.get(w, {}))))
            elif w in on:
                low[v] = min(low[v], index[w])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))
for c in comps:
    print("# circle: " + " ".join(c))
    for a in c:
        for b in c:
            if b in edges.get(a, {}):
                print("#   %s -> %s: %s" % (a, b, " ".join(sorted(edges[a][b])[:6])))
print("%sok - no circle between the %d objects of src/ and monitors/ (%d found)"
      % ("" if not comps else "not ", len(objs), len(comps)))
PY
tt_tap "$T/out" $?
tt_done
