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
