#!/bin/sh
# make_seeds.sh - (re)makes the generated seeds of the binary fuzz corpora
# (idx, cifar10, npy, image_folder, plot, safetensors, checkpoint_job) from a
# built tree. The text corpora (job, model, set) are written by hand. Inputs named crash-* are
# regression cases found by fuzzing: never remove those.
# Usage: tests/fuzz/make_seeds.sh   (in the build directory, after make check)
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
corpus=$src/tests/fuzz/corpus
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tt_seeds.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# IDX: flags byte, label file length (2 bytes LE), labels, images (fuzz_idx.c);
# flags 0x08: the model's classes are 10
/usr/bin/python3 - "$corpus" <<'PY'
import gzip, os, struct, sys
corpus = sys.argv[1]
def idx(n, h, w, labels, pixels):
    lab = struct.pack(">II", 0x801, n) + bytes(labels)
    img = struct.pack(">IIII", 0x803, n, h, w) + bytes(pixels)
    return lab, img
def seed(name, flags, lab, img):
    with open(os.path.join(corpus, "idx", name), "wb") as f:
        f.write(bytes([flags]) + struct.pack("<H", len(lab)) + lab + img)
lab, img = idx(5, 4, 4, [0, 1, 2, 3, 1], range(80))
seed("five_4x4", 0x00, lab, img)
seed("five_4x4_limit3", 0x30, lab, img)
lab, img = idx(3, 2, 3, [9, 0, 10], [255] * 18)
seed("label10", 0x00, lab, img)
seed("label10_classes10", 0x08, lab, img)
seed("truncated", 0x00, lab, img[:-5])
lab, img = idx(2, 28, 28, [7, 2], [i % 256 for i in range(2 * 784)])
seed("two_28x28_gz", 0x03, lab, img)
lab, img = idx(1, 1, 1, [0], [128])
seed("one_1x1", 0x00, lab, img)
seed("huge_claim", 0x00, lab, struct.pack(">IIII", 0x803, 1 << 20, 1 << 10, 1 << 10))
# fashion-mnist's first samples, when installed
base = "/usr/share/datasets/fashion-mnist"
try:
    with gzip.open(base + "/t10k-images-idx3-ubyte.gz") as f:
        head = f.read(16 + 3 * 784)
    with gzip.open(base + "/t10k-labels-idx1-ubyte.gz") as f:
        lhead = f.read(8 + 3)
    img = struct.pack(">IIII", 0x803, 3, 28, 28) + head[16:]
    lab = struct.pack(">II", 0x801, 3) + lhead[8:]
    seed("fashion3", 0x00, lab, img)
except OSError:
    pass
# CIFAR-10: n byte, then files, each but the last after a 3-byte length (fuzz_cifar10.c)
def rec(label, v):
    return bytes([label]) + bytes([v % 256]) * 3072
def cseed(name, files):
    out = bytes([len(files) - 1])
    for i, f in enumerate(files):
        if i + 1 < len(files):
            out += struct.pack("<I", len(f))[:3]
        out += f
    with open(os.path.join(corpus, "cifar10", name), "wb") as fh:
        fh.write(out)
cseed("one_record", [rec(3, 7)])
cseed("two_files", [rec(0, 1) + rec(9, 200), rec(5, 255)])
cseed("three_files", [rec(1, 2), rec(2, 3), rec(3, 4)])
cseed("label11", [rec(11, 0)])
def cseed_checked(name, files):
    cseed(name, files)
    p = os.path.join(corpus, "cifar10", name)
    b = bytearray(open(p, "rb").read())
    b[0] |= 0x80  # the model's classes are 10
    open(p, "wb").write(bytes(b))
cseed_checked("label11_classes10", [rec(0, 0), rec(11, 0)])
cseed_checked("two_files_classes10", [rec(0, 1) + rec(9, 200), rec(5, 255)])
cseed("partial_record", [rec(1, 1)[:100]])
PY

# npy and image_folder (fuzz_npy.c, fuzz_image_folder.c): numpy and PIL write them
/usr/bin/python3 - "$corpus" <<'PY'
import io, os, struct, sys
import numpy as np
from PIL import Image
corpus = sys.argv[1]
# npy: flags byte, label file length (2 bytes LE), labels, images (fuzz_npy.c);
# flags bit 0: nhwc, bits 2-3: classes 0/4/10/256, bits 4-7: limit
def npy(a, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, a, allow_pickle=False)
    else:
        np.lib.format.write_array(b, a, version=version, allow_pickle=False)
    return b.getvalue()
def nseed(name, flags, lab, img):
    with open(os.path.join(corpus, "npy", name), "wb") as f:
        f.write(bytes([flags]) + struct.pack("<H", len(lab)) + lab + img)
r = np.arange(48, dtype=np.uint8)
nseed("u8_nhw", 0x04, npy(np.array([0, 1, 3], dtype=np.int64)), npy(r.reshape(3, 4, 4)))
nseed("u8_nhw_limit2", 0x24, npy(np.array([0, 1, 3], dtype=np.int64)), npy(r.reshape(3, 4, 4)))
nseed("f32_nchw", 0x08, npy(np.array([9, 2], dtype=np.uint8)),
      npy(np.linspace(-1, 1, 18, dtype=np.float32).reshape(2, 1, 3, 3)))
nseed("u8_nhwc", 0x09, npy(np.array([5, 7], dtype=np.int16)), 
      npy(np.arange(54, dtype=np.uint8).reshape(2, 3, 3, 3)))
nseed("big_endian", 0x00, npy(np.array([1, 2], dtype=">i2")),
      npy(np.arange(8, dtype=">f4").reshape(2, 2, 2)))
nseed("version2", 0x0c, npy(np.array([255], dtype=np.uint64), (2, 0)),
      npy(np.zeros((1, 2, 2), dtype=np.uint8), (2, 0)))
nseed("label_out_of_range", 0x04, npy(np.array([0, 4], dtype=np.int32)), npy(r[:8].reshape(2, 2, 2)))
nseed("negative_label", 0x08, npy(np.array([-1], dtype=np.int8)), npy(r[:4].reshape(1, 2, 2)))
nseed("fortran", 0x00, npy(np.array([0, 1], dtype=np.int64)),
      npy(np.asfortranarray(r[:8].reshape(2, 2, 2))))
nseed("truncated", 0x00, npy(np.array([0, 1], dtype=np.int64)), npy(r[:8].reshape(2, 2, 2))[:-3])
nseed("float64_refused", 0x00, npy(np.array([0], dtype=np.int64)), npy(np.zeros((1, 2, 2))))
# ten dimensions, two more than npy.c keeps: written by hand (numpy's limit is 32)
hdr = "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1, 1), }"
hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
nseed("ten_dims", 0x00, npy(np.array([0], dtype=np.int64)),
      b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + b"\x07")
# image_folder: flags byte (bit 0: grey, bit 1: skip_corrupt, bits 2-3: the
# files are .jpg, bit 4: two files), [3-byte length of the first], files
def img(mode, size, fmt, **kw):
    b = io.BytesIO()
    n = size[0] * size[1] * len(mode if mode not in ("P", "I;16", "1") else "L")
    im = Image.frombytes(mode, size, bytes((i * 37) % 256 for i in range(n)))
    im.save(b, fmt, **kw)
    return b.getvalue()
def iseed(name, flags, a, b=None):
    out = bytes([flags | (16 if b is not None else 0)])
    if b is not None:
        out += struct.pack("<I", len(a))[:3] + a + b
    else:
        out += a
    with open(os.path.join(corpus, "image_folder", name), "wb") as f:
        f.write(out)
png_rgb = img("RGB", (4, 3), "PNG")
jpg_rgb = img("RGB", (8, 8), "JPEG", quality=90)
iseed("png_rgb", 0x00, png_rgb)
iseed("png_rgb_grey", 0x01, png_rgb)
iseed("png_grey_1bit", 0x00, img("1", (9, 5), "PNG"))
pal = Image.frombytes("P", (5, 5), bytes(i % 4 for i in range(25)))
pal.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255])
b = io.BytesIO(); pal.save(b, "PNG", transparency=0)
iseed("png_palette_trns", 0x00, b.getvalue())
iseed("png_rgba", 0x00, img("RGBA", (3, 3), "PNG"))
iseed("png_la", 0x01, img("LA", (3, 2), "PNG"))
b = io.BytesIO(); Image.frombytes("I;16", (4, 4), bytes(range(32))).save(b, "PNG")
iseed("png_grey16", 0x00, b.getvalue())
iseed("png_rgb_9x9", 0x00, img("RGB", (9, 9), "PNG"))
iseed("jpg_rgb", 0x04, jpg_rgb)
iseed("jpg_grey", 0x05, img("L", (8, 8), "JPEG"))
iseed("jpg_progressive", 0x04, img("RGB", (16, 16), "JPEG", progressive=True))
iseed("jpg_cmyk", 0x04, img("CMYK", (8, 8), "JPEG"))
iseed("jpg_truncated", 0x04, jpg_rgb[:len(jpg_rgb) // 2])
iseed("two_mixed", 0x08, png_rgb, jpg_rgb)
iseed("two_one_corrupt_skip", 0x0a, png_rgb[:40], jpg_rgb)
iseed("two_one_corrupt", 0x08, png_rgb, jpg_rgb[:300])
iseed("not_an_image", 0x00, b"GIF89a not a png")
iseed("empty", 0x10, b"", b"")
PY

# safetensors and checkpoint_job: a checkpoint of fuzz_safetensors.c's trainer
TT_FUZZ_SEED=$corpus/safetensors/fuzz_model.safetensors tests/fuzz/replay_safetensors /dev/null
cp "$corpus/safetensors/fuzz_model.safetensors" "$corpus/checkpoint_job/fuzz_model.safetensors"

# plot: stats.json and an event file of a short run (fuzz_plot.c): as is
# (flags 0), and as records framed by the target (flags 1; 3: its last byte cut)
cat >"$tmp/plot.cfg" <<'CFG'
dataflow = { source = { type = "fake"; shape = [1, 4, 4]; classes = 2; size = 16; }; batch_size = 8; };
model = { input = [1, 4, 4]; classes = 2; layers = ( { name = "fc"; type = "dense"; units = 2; } ); };
optimizer = { type = "sgd"; learning_rate = 0.1; };
monitors = ( { type = "events"; every_k_steps = 1; }, "json" );
max_epoch = 2;
CFG
./towertrain run "$tmp/plot.cfg" --logdir "$tmp/plot" --quiet
/usr/bin/python3 - "$corpus/plot" "$tmp/plot" <<'PY'
import glob, os, struct, sys
out, log = sys.argv[1], sys.argv[2]
stats = open(os.path.join(log, "stats.json"), "rb").read()
events = open(glob.glob(os.path.join(log, "events.out.tfevents.*"))[0], "rb").read()
def seed(name, flags, ev, st=stats):
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([flags]) + struct.pack("<H", len(st)) + st + ev)
seed("run_as_is", 0, events)
seed("stats_only", 0, b"")
seed("not_json", 0, b"", b"[{\"epoch_num\": 1,")
# a key longer than a series name keeps, in two-byte characters: cut whole
key = "train_" + "\u00e9" * 40
seed("long_utf8_key", 0, b"", ('[{"epoch_num": 1, "global_step": 8, "%s": 0.5}, '
     '{"epoch_num": 2, "global_step": 16, "%s": 0.25}]' % (key, key)).encode())
records, off = b"", 0
while off + 16 <= len(events):
    n = struct.unpack_from("<Q", events, off)[0]
    body = events[off + 12:off + 12 + n]
    if len(body) < 256:
        records += struct.pack("<IB", n, len(body)) + body
    off += 16 + n
seed("run_framed", 1, records)
seed("run_framed_cut", 3, records)
PY

# and one written by `towertrain run`, whose job lists callbacks and monitors
cat >"$tmp/job.cfg" <<'CFG'
dataflow = { source = { type = "fake"; shape = [1, 8, 8]; classes = 4; size = 32; };
  batch_size = 8; augment = ( { type = "flip"; } ); };
model = { input = [1, 8, 8]; classes = 4;
  layers = ( { name = "fc"; type = "dense"; units = 4; } ); };
optimizer = { type = "momentum"; learning_rate = 0.1; };
callbacks = ( { type = "model_saver"; max_to_keep = 1; },
  { type = "scheduled_hyperparam"; schedule = ( (0, 0.1), (1, 0.01) ); } );
max_epoch = 1;
CFG
./towertrain run "$tmp/job.cfg" --logdir "$tmp/log" --quiet
cp "$tmp"/log/model-*.safetensors "$corpus/checkpoint_job/run_momentum.safetensors"
cp "$tmp"/log/model-*.safetensors "$corpus/safetensors/other_model.safetensors"
echo "seeds written under $corpus"
