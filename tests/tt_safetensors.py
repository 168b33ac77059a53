"""tt_safetensors.py - a small independent safetensors reader for the
end-to-end tests (python3 and numpy only): load(path) returns the tensors as
numpy arrays by name and the __metadata__ dict. optimizer.* tensors are left
out unless asked for. save(path, tensors) writes float32 tensors (a
session_init file).

As a command, what the end-to-end scripts share (tt_lib.sh's tt_same):
  tt_safetensors.py same A B TOL [optimizer]
every tensor of checkpoints A and B within TOL (max |a - b| / max |a| per
tensor; TOL 0: bit for bit), the optimizer state too when asked; prints the
worst and exits 0 when within."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "I64": "<i8"}


def load(path, optimizer=False):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = b[8 + n:]
    tensors = {}
    for name, v in head.items():
        if name == "__metadata__" or (name.startswith("optimizer.") and not optimizer):
            continue
        lo, hi = v["data_offsets"]
        tensors[name] = np.frombuffer(data[lo:hi], dtype=DTYPES[v["dtype"]]).reshape(v["shape"])
    return tensors, head.get("__metadata__", {})


def save(path, tensors):
    head, off, blobs = {}, 0, []
    for name, v in tensors.items():
        b = np.ascontiguousarray(v, dtype="<f4").tobytes()
        head[name] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def worst_difference(a, b, tol):
    """The worst max |a - b| / max |a| over the tensors (1.0 when the names
    differ or there are none); with tol 0, 0.0 only when every tensor has the
    same dtype, shape and bytes."""
    if a.keys() != b.keys() or not a:
        return 1.0
    if tol == 0 and all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and
                        a[k].tobytes() == b[k].tobytes() for k in a):
        return 0.0
    worst = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) /
                max(1e-30, float(np.max(np.abs(a[k])))) for k in a)
    return worst if tol != 0 or worst > 0 else 1e-30  # equal values, other bits (-0.0)


def main(argv):
    if len(argv) not in (4, 5) or argv[0] != "same" or argv[4:] not in ([], ["optimizer"]):
        sys.exit("usage: tt_safetensors.py same A B TOL [optimizer]")
    opt = len(argv) == 5
    tol = float(argv[3])
    worst = worst_difference(load(argv[1], opt)[0], load(argv[2], opt)[0], tol)
    print("%.2g" % worst)
    sys.exit(0 if worst <= tol else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
