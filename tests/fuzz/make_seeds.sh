#!/bin/sh
# make_seeds.sh - (re)makes the generated seeds of the binary fuzz corpora
# (idx, cifar10, safetensors, checkpoint_job) from a built tree. The text
# corpora (job, model, set) are written by hand. Inputs named crash-* are
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

# safetensors and checkpoint_job: a checkpoint of fuzz_safetensors.c's trainer
TT_FUZZ_SEED=$corpus/safetensors/fuzz_model.safetensors tests/fuzz/replay_safetensors /dev/null
cp "$corpus/safetensors/fuzz_model.safetensors" "$corpus/checkpoint_job/fuzz_model.safetensors"

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
