"""tt_safetensors.py - a small independent safetensors reader for the
end-to-end tests (python3 and numpy only): load(path) returns the tensors as
numpy arrays by name and the __metadata__ dict. optimizer.* tensors are left
out unless asked for."""
import json
import struct

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
