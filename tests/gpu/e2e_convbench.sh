#!/bin/sh
# bench/gpu/convbench without a GPU (TAP): --dry-run's shapes and FLOPs
# against an independent derivation (torchvision's resnet50 run on the meta
# device, a hook on every Conv2d recording its input, weight and output
# shapes: 53 convolutions, their distinct shapes and multiplicities, and
# 2*n*f*oh*ow*c*k*k each), the JSON it writes, --summary's table and ratios
# on a made-up result (PyTorch's time over ours), and bad arguments (one
# line, exit status 2). The measurements need a GPU: the kit runs them.
. "$(dirname "$0")/../tt_lib.sh"
CB=$TT_BUILDDIR/bench/gpu/convbench

for batch in 128 3; do
  "$CB" --dry-run --batch $batch --json "$T/shapes-$batch.json" >"$T/dry-$batch.txt" 2>"$T/err"
  ok $? "--dry-run --batch $batch: exit 0, no GPU needed"
done
if ! "$PY" -c 'import torch, torchvision' 2>/dev/null; then
  skip "the shapes and FLOPs against torchvision's resnet50" "torchvision not installed"
else
  "$PY" - "$T/shapes-128.json" "$T/shapes-3.json" >"$T/tv.tap" 2>&1 <<'PYEOF'
import collections, json, sys
import torch, torchvision
from tt_tap import done, ok

def torchvision_convs(batch):
    model = torchvision.models.resnet50().to("meta")
    seen = []
    def hook(mod, inp, out):
        n, c, h, w = inp[0].shape
        _, f, oh, ow = out.shape
        k, s, p = mod.kernel_size[0], mod.stride[0], mod.padding[0]
        seen.append(((n, c, h, w, f, k, s, p, oh, ow), 2.0 * n * f * oh * ow * c * k * k))
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(hook)
    model(torch.empty(batch, 3, 224, 224, device="meta"))
    return seen

for path, batch in ((sys.argv[1], 128), (sys.argv[2], 3)):
    shapes = json.load(open(path))["shapes"]
    tv = torchvision_convs(batch)
    want = collections.Counter(d for d, _ in tv)
    got = collections.Counter({tuple(s["dims"]): s["count"] for s in shapes})
    ok(len(shapes) == len(want) and sum(got.values()) == len(tv),
       "batch %d: %d distinct shapes of %d convolutions (torchvision: %d of %d)"
       % (batch, len(shapes), sum(got.values()), len(want), len(tv)))
    ok(got == want, "batch %d: every shape [n,c,h,w,f,k,s,p,oh,ow] and its count as torchvision's" % batch)
    total = sum(s["gflop"] * 1e9 * s["count"] for s in shapes)
    ref = sum(fl for _, fl in tv)
    ok(abs(total - ref) <= 1e-9 * ref,
       "batch %d: FLOPs of a pass over the model %.6g (torchvision %.6g)" % (batch, total, ref))
done()
PYEOF
  tt_tap "$T/tv.tap" $?
fi
# conv_torch.py's three calls compute what autograd does (CPU, float64, a
# strided 3x3 with padding): the times it reports are of the right work
if "$PY" -c 'import torch' 2>/dev/null; then
  "$PY" - "$TT_SRCDIR/bench/gpu" >"$T/ct.tap" 2>&1 <<'PYEOF'
import sys
import torch
sys.path.insert(0, sys.argv[1])
import conv_torch
from tt_tap import done, ok
torch.manual_seed(1)
x = torch.randn(2, 3, 9, 9, dtype=torch.float64, requires_grad=True)
w = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
y = torch.nn.functional.conv2d(x, w, None, 2, 1)
dy = torch.randn_like(y)
y.backward(dy)
fwd = conv_torch.pass_fn("fwd", x.detach(), w.detach(), dy, 2, 1)()
dx = conv_torch.pass_fn("bwd-data", x.detach(), w.detach(), dy, 2, 1)()[0]
dw = conv_torch.pass_fn("bwd-filter", x.detach(), w.detach(), dy, 2, 1)()[1]
ok(torch.allclose(fwd, y.detach()) and torch.allclose(dx, x.grad) and torch.allclose(dw, w.grad),
   "conv_torch.py: forward, backward data and backward filter as autograd computes them")
done()
PYEOF
  tt_tap "$T/ct.tap" $?
else
  skip "conv_torch.py's calls against autograd" "torch not installed"
fi
grep -q '^23 distinct shapes of 53 convolutions; 1\.046 TFLOP per pass' "$T/dry-128.txt"
ok $? "the table's last line: 23 distinct shapes, 53 convolutions, 1.046 TFLOP a pass at batch 128"

# --summary on a made-up result: ours 2 ms (legacy-default) and 1 ms
# (graph-auto), PyTorch 1.5 ms: ratios 0.75x today and 1.50x best
cat >"$T/conv.json" <<'JEOF'
{"gpu": "made-up", "shapes": [{"shape": "conv1", "count": 2}],
 "results": [{"prec": "bf16", "shape": "conv1", "pass": "fwd", "variant": "legacy-default", "ok": true, "ms": 2.0},
             {"prec": "bf16", "shape": "conv1", "pass": "fwd", "variant": "graph-auto", "ok": true, "ms": 1.0}]}
JEOF
echo '{"torch": [{"prec": "bf16", "shape": "conv1", "pass": "fwd", "ms": 1.5}]}' >"$T/torch.json"
"$CB" --summary "$T/conv.json" "$T/torch.json" >"$T/sum.txt" 2>&1
st=$?
grep -q '^bf16 conv1 .* fwd .* 2\.000 .* 1\.000 graph-auto .* 1\.500 *0\.75x *1\.50x$' "$T/sum.txt" &&
  grep -q 'today 4\.00 ms, best 2\.00 ms, PyTorch 3\.00 ms: 0\.75x today, 1\.50x best' "$T/sum.txt"
ok $(( st | $? )) "--summary: the best variant, PyTorch's time, the ratios, totals x count"

for args in "--bogus" "--batch 0" "--prec fp64" "--variants nope" "--only conv9" "--summary $T/none.json"; do
  # shellcheck disable=SC2086
  "$CB" $args >"$T/out" 2>"$T/err"
  st=$?
  [ $st = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && [ ! -s "$T/out" ]
  ok $? "convbench $args: refused, one line on stderr, exit status 2 (got $st: $(cat "$T/err"))"
done
tt_done
