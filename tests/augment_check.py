"""augment_check.py - resize, center_crop, random_resized_crop and color_jitter
of src/dataflow/augment.c (through tests/tt_augment) against torchvision's
functional transforms on tensors, and against a float64 re-implementation
written here from torchvision 0.14's source (the reference where torchvision
is not installed). Prints "ok - ..." lines; run by e2e_augment.sh.

    augment_check.py TT_AUGMENT
"""
import math
import struct
import subprocess
import sys

import numpy as np
from tt_tap import done, ok, skip

TT = sys.argv[1]
try:
    import torch
    import torchvision.transforms.functional as TF
    HAVE_TV = True
except Exception:  # pragma: no cover - depends on the machine
    HAVE_TV = False

def lines_of(args):
    p = subprocess.run([TT] + [str(a) for a in args], capture_output=True, text=True)
    return [l for l in p.stdout.split("\n") if l.strip()]


def run(args, x):
    c, h, w = x.shape
    data = struct.pack("3i", c, h, w) + x.astype(np.float32).tobytes()
    p = subprocess.run([TT] + [str(a) for a in args], input=data, capture_output=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.decode())
    c, h, w = struct.unpack("3i", p.stdout[:12])
    y = np.frombuffer(p.stdout[12:], dtype=np.float32).reshape(c, h, w)
    return y, p.stderr.decode()


# ---- float64 references (torchvision 0.14, functional_tensor + ATen aa) ----

def ref_resize_shape(h, w, size):
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long / short)
    return (new_long, new_short) if w <= h else (new_short, new_long)


def aa_matrix(n_in, n_out):
    """PyTorch's _compute_weights_aa (bilinear) as an n_out x n_in matrix."""
    m = np.zeros((n_out, n_in))
    scale = n_in / n_out
    support = scale if scale >= 1.0 else 1.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        ws = [max(0.0, 1.0 - abs((j + lo - center + 0.5) * invscale)) for j in range(hi - lo)]
        total = sum(ws)
        for j, v in enumerate(ws):
            m[i, lo + j] = v / total if total != 0 else v
    return m


def ref_resample(x, oh, ow):
    c, h, w = x.shape
    if (h, w) == (oh, ow):
        return x.astype(np.float64)
    mh, mw = aa_matrix(h, oh), aa_matrix(w, ow)
    return np.einsum("ij,cjk,lk->cil", mh, x.astype(np.float64), mw)


def ref_center_crop(x, s):
    c, h, w = x.shape
    if s > w or s > h:
        l, t = ((s - w) // 2 if s > w else 0), ((s - h) // 2 if s > h else 0)
        r, b = ((s - w + 1) // 2 if s > w else 0), ((s - h + 1) // 2 if s > h else 0)
        p = np.zeros((c, h + t + b, w + l + r))
        p[:, t:t + h, l:l + w] = x
        x = p
        c, h, w = x.shape
    top, left = int(round((h - s) / 2.0)), int(round((w - s) / 2.0))
    return x[:, top:top + s, left:left + s].astype(np.float64)


def ref_grey(x):
    return 0.2989 * x[0] + 0.587 * x[1] + 0.114 * x[2]


def ref_jitter(x, order, factors):
    x = x.astype(np.float64)
    for op in order:
        f = factors[op]
        if f < 0:
            continue
        if op == 0:
            other = np.zeros_like(x)
        elif op == 1:
            other = np.full_like(x, (ref_grey(x) if x.shape[0] == 3 else x[0]).mean())
        elif x.shape[0] == 3:
            other = np.broadcast_to(ref_grey(x), x.shape)
        else:
            continue
        x = np.clip(f * x + (1 - f) * other, 0, 1)
    return x


def tv_jitter(x, order, factors):
    t = torch.from_numpy(x.copy())
    for op in order:
        f = factors[op]
        if f < 0:
            continue
        t = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation][op](t, f)
    return t.numpy()


def close(a, b, tol):
    return a.shape == b.shape and float(np.max(np.abs(a - b))) <= tol


rng = np.random.default_rng(5)
TOL = 2e-6  # float32 accumulation against float64 / torch's float32 order

# ---- resize: shrinking (antialiased), growing, shorter side either way ----
cases = [(3, 37, 53, 16), (3, 53, 37, 16), (1, 28, 28, 64), (3, 100, 7, 5), (1, 9, 200, 4),
         (3, 20, 30, 20), (3, 31, 17, 31), (1, 5, 5, 5)]
for c, h, w, s in cases:
    x = rng.random((c, h, w), dtype=np.float32)
    y, _ = run(["resize", s], x)
    oh, ow = ref_resize_shape(h, w, s)
    ref = ref_resample(x, oh, ow)
    ok(close(y, ref, TOL), "resize %dx%dx%d to shorter side %d: %dx%d, float64 reference "
       "(max diff %.2g)" % (c, h, w, s, oh, ow, np.max(np.abs(y - ref)) if y.shape == ref.shape else -1))
    if HAVE_TV:
        tv = TF.resize(torch.from_numpy(x), [s], antialias=True).numpy()
        ok(close(y, tv, TOL), "resize %dx%dx%d to %d equals torchvision F.resize(antialias=True) "
           "(max diff %.2g)" % (c, h, w, s, np.max(np.abs(y - tv)) if y.shape == tv.shape else -1))

# ---- center_crop: smaller, larger (zero padding), odd differences ----
for c, h, w, s in [(3, 10, 10, 7), (3, 11, 14, 6), (1, 7, 9, 12), (3, 4, 20, 9), (1, 13, 13, 13),
                   (3, 6, 5, 8)]:
    x = rng.random((c, h, w), dtype=np.float32)
    y, _ = run(["center_crop", s], x)
    ok(close(y, ref_center_crop(x, s), 0), "center_crop %dx%dx%d to %d: exact, float64 reference"
       % (c, h, w, s))
    if HAVE_TV:
        tv = TF.center_crop(torch.from_numpy(x), [s]).numpy()
        ok(close(y, tv, 0), "center_crop %dx%dx%d to %d equals torchvision F.center_crop"
           % (c, h, w, s))

# ---- random_resized_crop: the crop then resize, with our draws ----
for c, h, w, s, seed in [(3, 40, 60, 24, 1), (3, 60, 40, 24, 2), (1, 28, 28, 28, 3),
                         (3, 33, 35, 16, 4), (1, 28, 28, 20, 5)]:
    x = rng.random((c, h, w), dtype=np.float32)
    y, p = run(["rrc", s, 0.08, 1.0, 0.75, 4.0 / 3.0, seed], x)
    top, left, ch, cw = map(int, p.split())
    ref = ref_resample(x[:, top:top + ch, left:left + cw], s, s)
    ok(close(y, ref, TOL), "random_resized_crop %dx%dx%d to %d (crop %d,%d %dx%d): float64 "
       "reference" % (c, h, w, s, top, left, ch, cw))
    if HAVE_TV:
        tv = TF.resized_crop(torch.from_numpy(x), top, left, ch, cw, [s, s], antialias=True).numpy()
        ok(close(y, tv, TOL), "random_resized_crop %dx%dx%d equals torchvision F.resized_crop "
           "with the same box" % (c, h, w))

# its draws: inside the image, area and aspect within the ranges (up to rounding)
params = [tuple(map(int, l.split()))
          for l in lines_of(["rrc_params", 50, 80, 0.08, 1.0, 0.75, 4.0 / 3.0, 1, 2000])]
inside = all(0 <= t and 0 <= l and t + hh <= 50 and l + ww <= 80 for t, l, hh, ww in params)
areas = [hh * ww / (50 * 80) for t, l, hh, ww in params]
ratios = [ww / hh for t, l, hh, ww in params]
ok(len(params) == 2000 and inside, "random_resized_crop boxes lie inside the image (2000 draws)")
ok(min(areas) > 0.05 and max(areas) <= 1.0, "area fractions in [0.08, 1] up to rounding")


def ref_get_params(h, w, r):
    """RandomResizedCrop.get_params with Python's random numbers."""
    area = h * w
    lr = (math.log(0.75), math.log(4.0 / 3.0))
    for _ in range(10):
        target = area * r.uniform(0.08, 1.0)
        aspect = math.exp(r.uniform(*lr))
        cw, ch = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return r.randint(0, h - ch), r.randint(0, w - cw), ch, cw
    return None


import random
pyr = random.Random(3)
ref_areas = [p[2] * p[3] / 4000 for p in (ref_get_params(50, 80, pyr) for _ in range(20000)) if p]
ok(abs(np.mean(areas) - np.mean(ref_areas)) < 0.025,
   "mean area fraction %.3f, as torchvision's algorithm with other random numbers (%.3f)"
   % (np.mean(areas), np.mean(ref_areas)))
if HAVE_TV:
    import torchvision.transforms as T
    torch.manual_seed(0)
    tv_areas = [p[2] * p[3] / 4000 for p in (T.RandomResizedCrop.get_params(
        torch.zeros(1, 50, 80), [0.08, 1.0], [0.75, 4.0 / 3.0]) for _ in range(4000))]
    ok(abs(np.mean(areas) - np.mean(tv_areas)) < 0.025,
       "mean area fraction %.3f, as torchvision's get_params (%.3f)"
       % (np.mean(areas), np.mean(tv_areas)))
ok(min(ratios) > 0.6 and max(ratios) < 1.6, "aspect ratios in [0.75, 1.33] up to rounding "
   "(%.2f to %.2f)" % (min(ratios), max(ratios)))
offsets = set((t, l) for t, l, hh, ww in params)
ok(len(offsets) > 500, "offsets vary (%d distinct)" % len(offsets))

# ten failed tries give torchvision's central crop: an image far wider than any ratio
for h, w in [(2, 100), (100, 3)]:
    got = tuple(map(int, lines_of(["rrc_params", h, w, 0.08, 1.0, 0.75, 4.0 / 3.0, 7, 1])[0].split()))
    if HAVE_TV:
        import torchvision.transforms as T
        want = tuple(T.RandomResizedCrop.get_params(torch.zeros(1, h, w), [0.08, 1.0],
                                                    [0.75, 4.0 / 3.0]))
        ok(got == want, "random_resized_crop of %dx%d falls back to torchvision's central crop %s "
           "(got %s)" % (h, w, want, got))
    else:
        in_ratio = w / h
        if in_ratio < 0.75:
            cw, ch = w, int(round(w / 0.75))
        elif in_ratio > 4.0 / 3.0:
            ch, cw = h, int(round(h * 4.0 / 3.0))
        else:
            cw, ch = w, h
        want = ((h - ch) // 2, (w - cw) // 2, ch, cw)
        ok(got == want, "random_resized_crop of %dx%d falls back to the central crop %s"
           % (h, w, want))

# where that central crop would be empty (torchvision raises; a folder image
# smaller than the one the ratio was checked on can come here): one pixel kept
for h, w, r0, r1 in [(32, 32, 500.0, 1000.0), (32, 32, 0.001, 0.002)]:
    t, l, ch, cw = map(int, lines_of(["rrc_params", h, w, 0.08, 1.0, r0, r1, 7, 1])[0].split())
    ok(ch >= 1 and cw >= 1 and 0 <= t <= h - ch and 0 <= l <= w - cw,
       "random_resized_crop of %dx%d with ratio [%g, %g]: a crop of at least a pixel, inside "
       "(got %d,%d %dx%d)" % (h, w, r0, r1, t, l, ch, cw))

# ---- color_jitter: the blends in the drawn order, and the draws ----
for c, seed in [(3, 11), (3, 12), (1, 13), (3, 14)]:
    x = rng.random((c, 9, 13), dtype=np.float32)
    y, p = run(["jitter", 0.4, 0.5, 0.6, seed], x)
    f = p.split()
    order, factors = [int(v) for v in f[:3]], [float(v) for v in f[3:]]
    ref = ref_jitter(x, order, factors)
    ok(close(y, ref, TOL), "color_jitter on %d channel(s), order %s: float64 reference" % (c, order))
    if HAVE_TV:
        tv = tv_jitter(x, order, factors)
        ok(close(y, tv, TOL), "color_jitter on %d channel(s) equals torchvision's adjust_brightness"
           " / adjust_contrast / adjust_saturation in that order (max diff %.2g)"
           % (c, np.max(np.abs(y - tv))))
draws = [l.split() for l in lines_of(["jitter_params", 0.4, 1.5, 0.0, 100, 3000])]
orders = set(tuple(d[:3]) for d in draws)
b = [float(d[3]) for d in draws]
cf = [float(d[4]) for d in draws]
ok(len(orders) == 6, "all 6 orders of the three adjustments occur (%d)" % len(orders))
ok(min(b) >= 0.6 and max(b) <= 1.4 and abs(np.mean(b) - 1.0) < 0.02,
   "brightness 0.4: factors uniform in [0.6, 1.4] (mean %.3f)" % np.mean(b))
ok(min(cf) >= 0.0 and max(cf) <= 2.5 and abs(np.mean(cf) - 1.25) < 0.05,
   "contrast 1.5: factors in [max(0, 1 - 1.5), 2.5] (mean %.3f)" % np.mean(cf))
ok(all(float(d[5]) == -1 for d in draws), "saturation 0: left out")

if not HAVE_TV:
    skip("comparisons with torchvision", "python3-torchvision not installed; "
         "checked against the float64 re-implementation only")
done()
