#!/usr/bin/env python3
"""Writes Fashion-MNIST (Debian's dataset-fashion-mnist, IDX files) as the data
of the example jobs, with nothing but Python's standard library:

  fashion_mnist_export.py folder [OUT]   an image folder, one grey 28x28 PNG per image:
                                         OUT/{train,test}/<k>-<class name>/<index>.png
                                         (default OUT: data/fashion_mnist_folder)
  fashion_mnist_export.py npy [OUT]      NumPy arrays: OUT/{train,test}_images.npy (uint8,
                                         [N, 28, 28]) and OUT/{train,test}_labels.npy (uint8, [N])
                                         (default OUT: data/fashion_mnist_npy)

The class folders are named "<label>-<name>", so their byte order is the label
order and towertrain's class i is Fashion-MNIST's label i. OUT is relative to
the repository (the directory above this script's) unless absolute. --from DIR
reads the IDX files elsewhere (default /usr/share/datasets/fashion-mnist).
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

CLASSES = ["tshirt-top", "trouser", "pullover", "dress", "coat", "sandal", "shirt",
           "sneaker", "bag", "ankle-boot"]


def read_idx(path, magic):
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    if struct.unpack(">I", data[:4])[0] != magic:
        sys.exit("%s: not an IDX file of the expected kind" % path)
    dims = struct.unpack(">%dI" % (magic & 0xff), data[4:4 + 4 * (magic & 0xff)])
    return dims, data[4 + 4 * len(dims):]


def png(width, height, rows):
    """A grey 8-bit PNG: signature, IHDR, one IDAT, IEND."""
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff))
    raw = b"".join(b"\x00" + r for r in rows)  # filter type 0 on every row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def npy(path, descr, shape, data):
    """NumPy format 1.0: magic, version, header length, dict padded to 64 bytes."""
    head = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    head += " " * (63 - (10 + len(head)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode("latin1") + data)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("format", choices=["folder", "npy"])
    p.add_argument("out", nargs="?")
    p.add_argument("--from", dest="src", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = a.out or os.path.join("data", "fashion_mnist_" + a.format)
    out = out if os.path.isabs(out) else os.path.join(repo, out)
    for split, prefix in (("train", "train"), ("test", "t10k")):
        (n, h, w), pixels = read_idx(os.path.join(a.src, prefix + "-images-idx3-ubyte.gz"), 0x803)
        (nl,), labels = read_idx(os.path.join(a.src, prefix + "-labels-idx1-ubyte.gz"), 0x801)
        if nl != n:
            sys.exit("%s: %d labels for %d images" % (a.src, nl, n))
        if a.format == "npy":
            os.makedirs(out, exist_ok=True)
            npy(os.path.join(out, split + "_images.npy"), "|u1", (n, h, w), pixels[:n * h * w])
            npy(os.path.join(out, split + "_labels.npy"), "|u1", (n,), labels[:n])
            continue
        for k, name in enumerate(CLASSES):
            os.makedirs(os.path.join(out, split, "%d-%s" % (k, name)), exist_ok=True)
        for i in range(n):
            img = pixels[i * h * w:(i + 1) * h * w]
            rows = [img[y * w:(y + 1) * w] for y in range(h)]
            k = labels[i]
            with open(os.path.join(out, split, "%d-%s" % (k, CLASSES[k]), "%05d.png" % i), "wb") as f:
                f.write(png(w, h, rows))
        print("%s: %d images in %s" % (split, n, os.path.join(out, split)))
    if a.format == "npy":
        print("wrote %s/{train,test}_{images,labels}.npy" % out)


if __name__ == "__main__":
    main()
