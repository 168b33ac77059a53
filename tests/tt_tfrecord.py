"""tt_tfrecord.py - TFRecord framing for the tests that read or forge event
files (e2e_events.sh, e2e_plot.sh): CRC-32C bit by bit, independent of the
C table, and TensorFlow's masked form."""
import struct


def crc32c(data):
    """CRC-32C (Castagnoli) of bytes."""
    c = 0xffffffff
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82f63b78 if c & 1 else 0)
    return c ^ 0xffffffff


def masked(c):
    """TFRecord's masked CRC: ((c >> 15) | (c << 17)) + 0xa282ead8."""
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff


def length_header(n):
    """A record's first 12 bytes: its length n and the length's masked CRC."""
    head = struct.pack("<Q", n)
    return head + struct.pack("<I", masked(crc32c(head)))


def varint(v):
    """A protobuf varint."""
    out = b""
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def scalar_event(step, tag, value):
    """One framed record: Event { step = 2; summary = 5 { value = 1 { tag = 1;
    simple_value = 2 } } }."""
    t = tag.encode()
    val = b"\x0a" + varint(len(t)) + t + b"\x15" + struct.pack("<f", value)
    summary = b"\x0a" + varint(len(val)) + val
    event = b"\x10" + varint(step) + b"\x2a" + varint(len(summary)) + summary
    return length_header(len(event)) + event + struct.pack("<I", masked(crc32c(event)))
