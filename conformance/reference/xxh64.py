"""XXH64 (seed 0 by default) in pure Python, from the xxHash specification.

This is the checksum of format v1 (spec/format-v1.md section 2). It is slow (about a megabyte
per second) and meant for the small conformance vectors only; it has no dependency at all, so
that the reference reader shares no code with the implementation it checks.
"""

from __future__ import annotations

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _MASK
    return (_rotl(acc, 31) * _P1) & _MASK


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _MASK


def xxh64(data: bytes | bytearray | memoryview, seed: int = 0) -> int:
    """Return the XXH64 hash of `data` as an unsigned 64-bit integer."""
    buf = bytes(data)
    n = len(buf)
    pos = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _MASK
        v2 = (seed + _P2) & _MASK
        v3 = seed & _MASK
        v4 = (seed - _P1) & _MASK
        while pos + 32 <= n:
            v1 = _round(v1, int.from_bytes(buf[pos : pos + 8], "little"))
            v2 = _round(v2, int.from_bytes(buf[pos + 8 : pos + 16], "little"))
            v3 = _round(v3, int.from_bytes(buf[pos + 16 : pos + 24], "little"))
            v4 = _round(v4, int.from_bytes(buf[pos + 24 : pos + 32], "little"))
            pos += 32
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _MASK
        for v in (v1, v2, v3, v4):
            acc = _merge(acc, v)
    else:
        acc = (seed + _P5) & _MASK
    acc = (acc + n) & _MASK
    while pos + 8 <= n:
        acc ^= _round(0, int.from_bytes(buf[pos : pos + 8], "little"))
        acc = (_rotl(acc, 27) * _P1 + _P4) & _MASK
        pos += 8
    if pos + 4 <= n:
        acc ^= (int.from_bytes(buf[pos : pos + 4], "little") * _P1) & _MASK
        acc = (_rotl(acc, 23) * _P2 + _P3) & _MASK
        pos += 4
    while pos < n:
        acc ^= (buf[pos] * _P5) & _MASK
        acc = (_rotl(acc, 11) * _P1) & _MASK
        pos += 1
    acc ^= acc >> 33
    acc = (acc * _P2) & _MASK
    acc ^= acc >> 29
    acc = (acc * _P3) & _MASK
    acc ^= acc >> 32
    return acc
