"""image_folder_check.py - the image_folder source against PIL (TAP; run by
e2e_image_folder.sh).

Builds image folders with PIL: PNGs of every colour type and several bit
depths (grey 1/4/8/16-bit, grey+alpha, RGB 8/16-bit, RGBA, palette with and
without transparency, interlaced), JPEGs (4:2:0, 4:4:4, progressive, grey,
CMYK) of several sizes, nested sub-folders, an empty class folder, files that
are not images; then reads them through towertrain (tests/tt_samples) and
compares every pixel with PIL's Image.convert("RGB") / convert("L"), exactly
for PNG, within the decoders' rounding for JPEG. The order and labels are
torchvision's ImageFolder's. Corrupt files (a truncated JPEG, PNGs with a bad
CRC, text named .png, an empty file) are refused naming the file, or skipped
with skip_corrupt.

    image_folder_check.py TT_SAMPLES WORKDIR
"""
import io
import itertools
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
from PIL import Image
from tt_tap import done, ok, skip

TT, W = sys.argv[1], sys.argv[2]
job_files = itertools.count()


def job(root, extra="", classes=10):
    path = os.path.join(W, "job-%d.cfg" % next(job_files))
    with open(path, "w") as f:
        f.write('dataflow = { source = { type = "image_folder"; root = "%s"; %s }; batch_size = 1; };\n'
                'model = { input = [3, 8, 8]; classes = %d; layers = ( { name = "fc"; type = "dense"; '
                'units = %d; } ); };\noptimizer = { type = "sgd"; learning_rate = 0.1; };\n'
                % (root, extra, classes, classes))
    return path


def samples(root, extra="", classes=10):
    """(returncode, stderr, [(label, array C x H x W)])"""
    p = subprocess.run([TT, job(root, extra, classes)], capture_output=True)
    out, o = [], 0
    b = p.stdout
    while o < len(b):
        label, c, h, w = struct.unpack("4i", b[o:o + 16])
        o += 16
        out.append((label, np.frombuffer(b[o:o + 4 * c * h * w], dtype=np.float32).reshape(c, h, w)))
        o += 4 * c * h * w
    return p.returncode, p.stderr.decode(), out


rng = np.random.default_rng(7)


def noise(h, w, c=3):
    # smooth-ish content, so JPEG's error stays small
    base = rng.integers(0, 256, (h // 4 + 2, w // 4 + 2, c)).astype(np.float64)
    img = np.kron(base, np.ones((4, 4, 1)))[:h, :w]
    return np.clip(img + rng.normal(0, 8, img.shape), 0, 255).astype(np.uint8)


root = os.path.join(W, "folder")
files = []  # (path, kind)


def put(cls, name, img, kind, **save):
    d = os.path.join(root, cls)
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, name)
    img.save(p, **save)
    files.append((p, kind))


# class 0: PNGs of every colour type
put("0-png", "a_rgb.png", Image.fromarray(noise(7, 5)), "png")
put("0-png", "b_grey.png", Image.fromarray(noise(9, 11, 1)[:, :, 0], "L"), "png")
put("0-png", "c_grey1.png", Image.fromarray(noise(10, 13, 1)[:, :, 0] > 128), "png")
put("0-png", "d_rgba.png", Image.fromarray(np.dstack([noise(6, 6), noise(6, 6, 1)]), "RGBA"), "png")
put("0-png", "e_la.png", Image.fromarray(np.dstack([noise(5, 8, 1), noise(5, 8, 1)]), "LA"), "png")
pal = Image.fromarray(noise(12, 9)).convert("P", palette=Image.ADAPTIVE, colors=17)
put("0-png", "f_palette.png", pal, "png")
palt = pal.copy()
palt.info["transparency"] = 3
put("0-png", "g_palette_trns.png", palt, "png", transparency=3)
put("0-png", "h_rgb.png", Image.fromarray(noise(17, 19)), "png")
# 16-bit and 4-bit PNGs PIL cannot write: written here with zlib
def raw_png(path, w, h, depth, ctype, rows):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0)
    raw = b"".join(b"\x00" + r for r in rows)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) +
                chunk(b"IEND", b""))
grey16 = rng.integers(0, 65536, (6, 7)).astype(">u2")
raw_png(os.path.join(root, "0-png", "i_grey16.png"), 7, 6, 16, 0, [r.tobytes() for r in grey16])
files.append((os.path.join(root, "0-png", "i_grey16.png"), "grey16"))
rgb16 = rng.integers(0, 65536, (5, 4, 3)).astype(">u2")
raw_png(os.path.join(root, "0-png", "j_rgb16.png"), 4, 5, 16, 2, [r.tobytes() for r in rgb16])
files.append((os.path.join(root, "0-png", "j_rgb16.png"), "png"))
grey4 = rng.integers(0, 16, (3, 6)).astype(np.uint8)
raw_png(os.path.join(root, "0-png", "k_grey4.png"), 6, 3, 4, 0,
        [bytes((r[2 * i] << 4) | r[2 * i + 1] for i in range(3)) for r in grey4])
files.append((os.path.join(root, "0-png", "k_grey4.png"), "png"))
# PIL writes no interlaced PNG: an Adam7 grey one written here
def adam7_png(path, img):
    h, w = img.shape
    passes = [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2),
              (1, 0, 2, 1)]
    raw = b""
    for y0, x0, dy, dx in passes:
        sub = img[y0::dy, x0::dx]
        if sub.size:
            raw += b"".join(b"\x00" + r.tobytes() for r in sub)
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 1)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
adam7_png(os.path.join(root, "0-png", "l_adam7.png"), noise(11, 10, 1)[:, :, 0])
files.append((os.path.join(root, "0-png", "l_adam7.png"), "png"))
with open(os.path.join(root, "0-png", "notes.txt"), "w") as f:
    f.write("not an image\n")

# class 1: JPEGs
put("1-jpeg", "a_420.jpg", Image.fromarray(noise(21, 30)), "jpeg", quality=90)
put("1-jpeg", "b_444.jpeg", Image.fromarray(noise(16, 16)), "jpeg", quality=95, subsampling=0)
put("1-jpeg", "c_progressive.JPG", Image.fromarray(noise(33, 27)), "jpeg", quality=90, progressive=True)
put("1-jpeg", "d_grey.jpg", Image.fromarray(noise(15, 9, 1)[:, :, 0], "L"), "jpeg", quality=90)
put("1-jpeg", "e_cmyk.jpg", Image.fromarray(np.dstack([noise(12, 10), noise(12, 10, 1)]), "CMYK"),
    "jpeg", quality=95)
# class 2: empty; class 3: nested folders, in sorted(os.walk()) order
os.makedirs(os.path.join(root, "2-empty"), exist_ok=True)
put("3-nested", "z.png", Image.fromarray(noise(4, 4)), "png")
put("3-nested/sub", "a.png", Image.fromarray(noise(4, 4)), "png")
put("3-nested/sub-x", "b.png", Image.fromarray(noise(4, 4)), "png")
put("3-nested/sub/deeper", "c.png", Image.fromarray(noise(4, 4)), "png")
# classes 4, 5 and their files: a name that is not UTF-8 (the byte 0x80, which
# Python reads as U+DC80) sorts after "\u00e9" in Python and before it in bytes
put("4-\u00e9t\u00e9", "\u00e9.png", Image.fromarray(noise(4, 4)), "png")
put("4-\u00e9t\u00e9", "\udc80.png", Image.fromarray(noise(5, 4)), "png")
put("4-\udc80", "a.png", Image.fromarray(noise(4, 5)), "png")
with open(os.path.join(root, "readme.txt"), "w") as f:
    f.write("files in the root are not images of a class\n")


def torchvision_order(root):
    """torchvision's find_classes + make_dataset (0.14), allowing empty classes."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = []
    for k, c in enumerate(classes):
        for r, _, names in sorted(os.walk(os.path.join(root, c), followlinks=True)):
            for name in sorted(names):
                if name.lower().endswith((".jpg", ".jpeg", ".png")):
                    out.append((os.path.join(r, name), k))
    return out


def reference(path, kind, channels):
    if kind == "grey16":
        a = (np.array(Image.open(path)).astype(np.uint32) >> 8).astype(np.uint8)
        return np.stack([a] * channels)
    img = Image.open(path)
    if channels == 3:
        return np.asarray(img.convert("RGB")).transpose(2, 0, 1)
    return np.asarray(img.convert("RGB").convert("L"))[None]


kinds = dict(files)
order = torchvision_order(root)
try:
    import torchvision
    tv_root = os.path.join(W, "folder-no-empty")
    subprocess.run(["cp", "-r", root, tv_root], check=True)
    os.rmdir(os.path.join(tv_root, "2-empty"))
    tv = torchvision.datasets.ImageFolder(tv_root)
    tv_names = [(os.path.relpath(p, tv_root), k if k < 2 else k + 1) for p, k in tv.samples]
    ok(tv_names == [(os.path.relpath(p, root), k) for p, k in order],
       "the file order and labels are torchvision.datasets.ImageFolder's (empty class aside)")
except ImportError:
    skip("order against torchvision.datasets.ImageFolder", "no torchvision")

for channels in (3, 1):
    rc, err, got = samples(root, "channels = %d;" % channels)
    ok(rc == 0 and len(got) == len(order), "channels = %d: %d images read (rc %d %s)"
       % (channels, len(got), rc, err.strip()))
    if rc != 0:
        continue
    for (path, label), (glabel, x) in zip(order, got):
        kind = kinds[path]
        ref = reference(path, kind, channels).astype(np.float64) / 255.0
        name = os.path.relpath(path, root)
        if x.shape != ref.shape:
            ok(False, "%s (channels %d): shape %s, PIL %s" % (name, channels, x.shape, ref.shape))
            continue
        diff = float(np.max(np.abs(x - ref))) * 255
        # PNG exact (float32 of k/255); JPEG: decoders may round the IDCT and
        # upsampling differently (here both are libjpeg-turbo: usually 0)
        tol = 1e-3 if kind in ("png", "grey16") else 2.01
        ok(glabel == label and diff <= tol, "%s, channels %d: label %d, pixels as PIL's within "
           "%.3g (max diff %.3g of 255)" % (name, channels, glabel, tol, diff))

# ---- corrupt files ----
def corrupt_folder(name, make):
    r = os.path.join(W, name)
    os.makedirs(os.path.join(r, "a"))
    os.makedirs(os.path.join(r, "b"))
    Image.fromarray(noise(8, 8)).save(os.path.join(r, "a", "good1.png"))
    Image.fromarray(noise(8, 8)).save(os.path.join(r, "b", "good2.png"))
    bad = make(os.path.join(r, "a"))
    return r, bad


def truncated_jpeg(d):
    buf = io.BytesIO()
    Image.fromarray(noise(40, 40)).save(buf, "jpeg", quality=90)
    p = os.path.join(d, "cut.jpg")
    open(p, "wb").write(buf.getvalue()[:len(buf.getvalue()) * 6 // 10])
    return p


def bad_crc(chunk_type):
    def make(d):
        buf = io.BytesIO()
        Image.fromarray(noise(8, 8)).save(buf, "png")
        b = bytearray(buf.getvalue())
        i = b.find(chunk_type)
        length = struct.unpack(">I", b[i - 4:i])[0]
        b[i + 4 + length] ^= 0x55  # the chunk's CRC
        p = os.path.join(d, "crc-%s.png" % chunk_type.decode().lower())
        open(p, "wb").write(bytes(b))
        return p
    return make


def text_png(d):
    p = os.path.join(d, "text.png")
    open(p, "w").write("hello\n")
    return p


def empty_jpg(d):
    p = os.path.join(d, "empty.jpg")
    open(p, "w").close()
    return p


for name, make, stage, why in [("truncated", truncated_jpeg, "decode", "truncated JPEG"),
                               ("crc-idat", bad_crc(b"IDAT"), "decode", "corrupt PNG"),
                               ("crc-ihdr", bad_crc(b"IHDR"), "open", "bad CRC in IHDR"),
                               ("text", text_png, "open", "not a JPEG or PNG file"),
                               ("empty", empty_jpg, "open", "empty file")]:
    r, bad = corrupt_folder(name, make)
    rc, err, got = samples(r)
    ok(rc == 2 and err.count("\n") == 1 and bad in err and why in err,
       "%s: refused, one line naming the file and '%s' (%s)" % (name, why, err.strip()))
    rc, err, got = samples(r, "skip_corrupt = true;")
    # open-time: left out (2 images); decode-time: the next image stands in (3)
    want = 2 if stage == "open" else 3
    ok(rc == 0 and len(got) == want, "%s with skip_corrupt: %d samples read (rc %d %s)"
       % (name, len(got), rc, err.strip()))
    if stage == "decode" and len(got) == 3:
        # sorted: a/crc-idat.png or a/cut.jpg first, then a/good1.png stands in
        ok(np.array_equal(got[0][1], got[1][1]) and got[0][0] == 0,
           "%s with skip_corrupt: the next image in file order stands in" % name)

# labels: a model with fewer classes than the folder has
rc, err, got = samples(root, "", classes=3)
ok(rc == 2 and "3-nested" in err and "label 3 >= classes 3" in err and "sample " in err,
   "a fourth class folder with classes = 3: refused naming the file, sample and label (%s)"
   % err.strip())

done()
