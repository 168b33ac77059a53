"""safetensors_check.py - the reference safetensors library (PyPI's
`safetensors`, strict about the header) against towertrain's own reader on
towertrain's checkpoints (tests/e2e_safetensors.sh; the venv of
tests/tt_venv.sh).

  safetensors_check.py TT_STDUMP WORKDIR KIND=FILE...

For each checkpoint: the library loads it, and sees the same tensors (name,
dtype, shape, bytes) and the same __metadata__ as towertrain's reader
(tests/tt_stdump.c); what each kind must hold is checked too (optimizer
slots for every trainable parameter, replica_statistics, metadata).
Then the damaged copies of the first one: truncated at each part of the file
and one bit flipped at many places of the header and the data. Whatever
towertrain's reader refuses the library refuses too, except where the
library cannot see damage: in the data section (it has no checksum; ours
checks data_crc32c) and in the data_crc32c value itself (opaque metadata to
it). Where both read a damaged file they must see the same tensors."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load as st_load

from tt_tap import done, ok

DTYPES = {"F32": np.float32, "I64": np.int64, "BF16": None}


def ours(stdump, path, work, keys=()):
    """towertrain's reader: None if refused, else ({name: (dtype, shape,
    bytes)}, {key: value})."""
    data = os.path.join(work, "data.bin")
    # names as bytes (a flipped bit may leave one that is not UTF-8)
    r = subprocess.run([stdump, path, data] + list(keys), capture_output=True, text=True,
                       errors="surrogateescape")
    if r.returncode == 2:
        return None
    if r.returncode != 0:
        raise RuntimeError("tt_stdump %s: exit %d %s" % (path, r.returncode, r.stderr))
    blob = open(data, "rb").read()
    tensors, meta, off = {}, {}, 0
    for line in r.stdout.splitlines():
        f = line.split(" ", 2)
        if f[0] == "tensor":
            w = line.split()
            name, dtype, ndim = w[1], w[2], int(w[3])
            shape, n = tuple(int(d) for d in w[4:4 + ndim]), int(w[4 + ndim])
            tensors[name] = (dtype, shape, blob[off:off + n])
            off += n
        elif f[0] == "meta":
            k, v = f[1], f[2] if len(f) > 2 else ""
            meta[k] = v.replace("\\n", "\n").replace("\\\\", "\\")
    return tensors, meta


def reference(path):
    """The library: None if refused, else ({name: (dtype, shape, bytes)},
    metadata)."""
    try:
        with safe_open(path, framework="np") as f:
            meta = f.metadata() or {}
        arrays = st_load(open(path, "rb").read())
    except (SafetensorError, ValueError, OSError, OverflowError):
        return None
    inv = {np.dtype(v): k for k, v in DTYPES.items() if v is not None}
    return ({k.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape"):
             (inv.get(a.dtype, str(a.dtype)), a.shape, a.tobytes()) for k, a in arrays.items()},
            meta)


def header_len(path):
    return struct.unpack("<Q", open(path, "rb").read(8))[0]


def check_kind(stdump, work, kind, path):
    ref = reference(path)
    ok(ref is not None, "%s (%s): the safetensors library loads it" % (kind, os.path.basename(path)))
    if ref is None:
        return
    mine = ours(stdump, path, work, sorted(ref[1]))
    ok(mine is not None and mine[0] == ref[0],
       "%s: the same %d tensors as towertrain's reader (names, dtypes, shapes, bytes)"
       % (kind, len(ref[0])))
    ok(mine is not None and mine[1] == ref[1] and ref[1].get("format") == "towertrain/1",
       "%s: the same __metadata__ (%s)" % (kind, sorted(ref[1])))
    t, meta = ref
    params = [k for k in t if not k.startswith("optimizer.") and k != "replica_statistics"]
    slots = [k for k in t if k.startswith("optimizer.")]
    want_slots = {"momentum": 1, "adam": 2}[kind.split("/")[1]]
    owner = {s: s[len("optimizer."):].rsplit(".", 1)[0] for s in slots}
    trainable = set(owner.values())
    ok(len(slots) == want_slots * len(trainable) and trainable <= set(params) and
       all(t[s][1] == t[p][1] and t[s][0] == "F32" for s, p in owner.items()),
       "%s: %d optimizer slots, %d per trainable parameter, each of its shape"
       % (kind, len(slots), want_slots))
    if "replicas" not in kind:
        ok("replica_statistics" not in t, "%s: no replica_statistics at an epoch's end" % kind)
    else:
        rs = t.get("replica_statistics")
        ok(rs is not None and rs[0] == "F32" and rs[1][0] == 2 and int(meta["local_step"]) > 0,
           "%s: replica_statistics F32 [2 replicas, %s] in a checkpoint of step %s mid-epoch"
           % (kind, rs and rs[1][1:], meta.get("local_step")))
        stats = np.frombuffer(rs[2], dtype=np.float32).reshape(rs[1]) if rs else None
        ok(stats is not None and not np.array_equal(stats[0], stats[1]),
           "%s: the two replicas' batchnorm statistics differ (each its own)" % kind)


def metadata_value_span(raw, key):
    """The byte range of a __metadata__ value in the header."""
    text = raw.decode()
    i = text.index('"%s":' % key) + len(key) + 3
    i = text.index('"', i) + 1
    j = text.index('"', i)
    return len(text[:i].encode()) + 8, len(text[:j].encode()) + 8


def damaged(stdump, work, path):
    raw = open(path, "rb").read()
    n = header_len(path)
    bad = os.path.join(work, "bad.safetensors")
    size = len(raw)
    cuts = sorted({0, 4, 7, 8, 9, 8 + n // 2, 8 + n - 1, 8 + n, 8 + n + 1,
                   8 + n + (size - 8 - n) // 2, size - 4, size - 1})
    both = []
    for c in cuts:
        open(bad, "wb").write(raw[:c])
        both.append((c, ours(stdump, bad, work) is None, reference(bad) is None))
    ok(all(o and r for _, o, r in both), "truncated at %d places (length, header, data): both "
       "refuse (%s)" % (len(cuts), [x for x in both if not (x[1] and x[2])]))
    crc_lo, crc_hi = metadata_value_span(raw[8:8 + n], "data_crc32c")
    # one bit at every 3rd byte of the header, and 40 places in the data
    places = list(range(0, 8 + n, 3)) + [8 + n + k * (size - 8 - n) // 40 for k in range(40)]
    lax, blind, data_refused, same_seen, disagree = [], 0, 0, True, []
    for k, p in enumerate(places):
        b = bytearray(raw)
        b[p] ^= 1 << (k % 8)
        open(bad, "wb").write(b)
        o, r = ours(stdump, bad, work), reference(bad)
        where = "data" if p >= 8 + n else "crc" if crc_lo <= p < crc_hi else "header"
        data_refused += where == "data" and o is None
        if o is None and r is not None:
            if where in ("data", "crc"):
                blind += 1
            else:
                disagree.append((p, k % 8))
        elif o is not None and r is None:
            lax.append((p, chr(raw[p]), chr(b[p])))
        elif o is not None:
            same_seen &= o[0] == r[0]
    ok(not disagree, "%d one-bit flips: every one towertrain's reader refuses, the library "
       "refuses too, except %d in the data and data_crc32c, which it cannot check "
       "(disagreeing: %s)" % (len(places), blind, disagree[:5]))
    ok(data_refused == 40, "every flip in the data is refused by towertrain's reader "
       "(data_crc32c): %d of 40" % data_refused)
    ok(same_seen, "where both read a flipped file they see the same tensors")
    ok(not lax, "every flip the library refuses, towertrain's reader refuses too (its "
       "header check: UTF-8, no control characters): %d read, e.g. (offset, byte, flipped): %s"
       % (len(lax), lax[:8]))
    framed(stdump, work, raw, n)


def framed(stdump, work, raw, n):
    """The header's JSON object with other bytes around it. Whether a one-bit
    flip above lands in the writer's padding spaces depends on the header's
    length (its metadata differ from run to run), so each case is here."""
    text = raw[8:8 + n].rstrip(b" ")
    bad = os.path.join(work, "framed.safetensors")
    cases = [("whitespace after", text + b" \t\n\r", True),
             ("whitespace before", b"\n " + text, True),
             ("a digit after", text + b"0", False),
             ("a second object after", text + b" {}", False),
             ("a byte-order mark before", b"\xef\xbb\xbf" + text, False),
             ("a digit before", b"0" + text, False)]
    wrong = []
    for what, head, readable in cases:
        head += b" " * (-len(head) % 8)
        open(bad, "wb").write(struct.pack("<Q", len(head)) + head + raw[8 + n:])
        o, r = ours(stdump, bad, work), reference(bad)
        if (o is not None, r is not None) != (readable, readable) or (o and o[0] != r[0]):
            wrong.append((what, "ours", o is not None, "library", r is not None))
    ok(not wrong, "the header's object with %d framings (whitespace, a digit, a second "
       "object, a byte-order mark): both read the same or both refuse, as expected (%s)"
       % (len(cases), wrong))


def main():
    stdump, work = sys.argv[1], sys.argv[2]
    kinds = [a.split("=", 1) for a in sys.argv[3:]]
    for kind, path in kinds:
        check_kind(stdump, work, kind, path)
    damaged(stdump, work, kinds[0][1])
    done()


if __name__ == "__main__":
    main()
