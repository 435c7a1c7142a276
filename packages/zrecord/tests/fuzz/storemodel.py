"""A small, independent model of the format-v1 byte layout, for building hostile stores.

The fuzzer and the hostile-input tests need to take a valid store apart, change one thing and
put it back together with every *other* rule still satisfied (checksums resealed, sizes and
offsets consistent), so that the change reaches the code path it targets instead of being
stopped by the first checksum. This module does exactly that and nothing else. It is written
from spec/format-v1.md and never imports zrecord.

Invariants:
- ``Store.encode()`` of a ``Store.decode()``-ed valid store gives back the same bytes.
- Nothing here validates: fields hold whatever the caller puts in them, truncated to their
  on-disk width.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

try:
    import xxhash as _xxhash
except ImportError:  # pragma: no cover - optional speed-up
    _xxhash = None

MAGIC = b"\x89ZREC\r\n\x1a"
HEADER_FIXED_BYTES = 128
ENTRY_FIXED_BYTES = 24

# (offset, size, name) of every fixed header field (spec §3.1).
HEADER_FIELDS = [
    (0, 8, "magic"), (8, 2, "format_major"), (10, 2, "format_minor"), (12, 4, "header_size"),
    (16, 1, "kind"), (17, 1, "dtype"), (18, 1, "ndim"), (19, 1, "codec"), (20, 1, "data_shards"),
    (21, 3, "reserved0"), (24, 8, "record_count"), (32, 8, "logical_bytes"),
    (40, 8, "stored_bytes"), (48, 4, "index_entry_size"), (52, 4, "dict_size"),
    (56, 8, "index_size"), (64, 8, "index_checksum"), (72, 8, "dict_checksum"),
    (80, 8, "required_features"), (88, 4, "dtype_length"), (92, 1, "dtype_unit"),
    (93, 35, "reserved1"),
]
# (offset, size, name) of every fixed index entry field (spec §4).
ENTRY_FIELDS = [(0, 8, "offset"), (8, 4, "stored_size"), (12, 1, "shard"), (13, 3, "reserved"),
                (16, 8, "checksum")]
ITEMSIZE = {1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 4, 8: 8, 9: 8, 10: 2, 11: 4, 12: 8, 13: 8,
            14: 16, 15: 8, 16: 8}
# The parametric dtypes of format 1.1 whose item size is dtype_length times this (S, U, V).
ITEMSIZE_PER_LENGTH = {17: 1, 18: 4, 19: 1}


def itemsize(dtype: int, dtype_length: int) -> int:
    """A dtype code's item size with its length parameter (spec §3.3); 1 for unknown codes."""
    if dtype in ITEMSIZE_PER_LENGTH:
        return ITEMSIZE_PER_LENGTH[dtype] * dtype_length
    return ITEMSIZE.get(dtype, 1)

_M64 = (1 << 64) - 1
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P3 = 1609587929392839161
_P4 = 9650029242287828579
_P5 = 2870177450012600261


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * _P2) & _M64
    return (_rotl(acc, 31) * _P1) & _M64


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _M64


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 (the format's one checksum): the `xxhash` package's when installed (it is only a
    speed-up), else this pure-Python one written from the xxHash specification."""
    if _xxhash is not None:
        return int(_xxhash.xxh64_intdigest(bytes(data), seed))
    return xxh64_pure(data, seed)


def xxh64_pure(data: bytes, seed: int = 0) -> int:
    n = len(data)
    p = 0
    if n >= 32:
        v1 = (seed + _P1 + _P2) & _M64
        v2 = (seed + _P2) & _M64
        v3 = seed
        v4 = (seed - _P1) & _M64
        while p + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, p)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            p += 32
        acc = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            acc = _merge(acc, v)
    else:
        acc = (seed + _P5) & _M64
    acc = (acc + n) & _M64
    while p + 8 <= n:
        (lane,) = struct.unpack_from("<Q", data, p)
        acc ^= _round(0, lane)
        acc = (_rotl(acc, 27) * _P1 + _P4) & _M64
        p += 8
    if p + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, p)
        acc ^= (lane * _P1) & _M64
        acc = (_rotl(acc, 23) * _P2 + _P3) & _M64
        p += 4
    while p < n:
        acc ^= (data[p] * _P5) & _M64
        acc = (_rotl(acc, 11) * _P1) & _M64
        p += 1
    acc ^= acc >> 33
    acc = (acc * _P2) & _M64
    acc ^= acc >> 29
    acc = (acc * _P3) & _M64
    acc ^= acc >> 32
    return acc


def get(buf: bytes | bytearray, off: int, size: int) -> int:
    return int.from_bytes(buf[off:off + size], "little")


def put(buf: bytearray, off: int, size: int, value: int) -> None:
    buf[off:off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def shard_name(k: int) -> str:
    return f"data-{k:03d}.zrd"


@dataclass
class Record:
    """One record: which shard holds it, its stored bytes and (Ragged) its shape."""

    shard: int
    stored: bytes
    shape: list[int] = field(default_factory=list)
    reserved: int = 0
    padding: bytes = b""


@dataclass
class Store:
    """A decoded store, fields as on disk. ``encode`` lays it out again consistently."""

    kind: int
    dtype: int
    ndim: int
    codec: int
    data_shards: int
    item_shape: list[int]
    dictionary: bytes
    records: list[Record]
    format_major: int = 1
    format_minor: int = 0
    dtype_length: int = 0
    dtype_unit: int = 0
    required_features: int = 0

    @classmethod
    def decode(cls, files: dict[str, bytes]) -> Store:
        """Decode the files of a valid store (as written by zrecord)."""
        h = files["header.zrh"]
        kind, dtype, ndim, codec, shards = h[16], h[17], h[18], h[19], h[20]
        dict_size = get(h, 52, 4)
        pos = HEADER_FIXED_BYTES
        item_shape = []
        if kind == 1:
            item_shape = [get(h, pos + 8 * a, 8) for a in range(ndim)]
            pos += 8 * ndim
        pos += 8 * shards
        dictionary = bytes(h[pos:pos + dict_size])
        es = entry_size(kind, ndim)
        index = files["index.zri"]
        records = []
        for i in range(get(h, 24, 8)):
            e = index[i * es:(i + 1) * es]
            off, size, shard = get(e, 0, 8), get(e, 8, 4), e[12]
            shape = [get(e, 24 + 4 * a, 4) for a in range(ndim)] if kind == 2 else []
            records.append(Record(shard, bytes(files[shard_name(shard)][off:off + size]), shape))
        return cls(kind, dtype, ndim, codec, shards, item_shape, dictionary, records,
                   get(h, 8, 2), get(h, 10, 2), get(h, 88, 4), h[92], get(h, 80, 8))

    def logical_size(self, rec: Record) -> int:
        dims = self.item_shape if self.kind == 1 else rec.shape
        size = itemsize(self.dtype, self.dtype_length)
        for d in dims:
            size *= d
        return size

    def encode(self) -> dict[str, bytes]:
        """Lay the store out: shards in record order, a consistent index and header."""
        es = entry_size(self.kind, self.ndim)
        shards = [bytearray() for _ in range(self.data_shards)]
        index = bytearray()
        for rec in self.records:
            data = shards[rec.shard] if rec.shard < len(shards) else bytearray()
            entry = bytearray(es)
            put(entry, 0, 8, len(data))
            put(entry, 8, 4, len(rec.stored))
            entry[12] = rec.shard & 0xFF
            put(entry, 13, 3, rec.reserved)
            put(entry, 16, 8, xxh64(rec.stored))
            for a, dim in enumerate(rec.shape[:self.ndim] if self.kind == 2 else []):
                if 24 + 4 * a + 4 <= es:
                    put(entry, 24 + 4 * a, 4, dim)
            if rec.padding:
                pad_at = 24 + 4 * self.ndim if self.kind == 2 else es
                entry[pad_at:es] = rec.padding[:max(0, es - pad_at)].ljust(max(0, es - pad_at),
                                                                          b"\0")
            data += rec.stored
            index += entry
        files = {shard_name(k): bytes(s) for k, s in enumerate(shards)}
        files["index.zri"] = bytes(index)
        logical = sum(self.logical_size(r) for r in self.records)
        files["header.zrh"] = self.encode_header(len(self.records), logical,
                                                 [len(s) for s in shards], bytes(index))
        return files

    def encode_header(self, record_count: int, logical: int, shard_sizes: list[int],
                      index: bytes) -> bytes:
        var = bytearray()
        if self.kind == 1:
            for d in self.item_shape:
                var += (d & _M64).to_bytes(8, "little")
        for s in shard_sizes:
            var += s.to_bytes(8, "little")
        var += self.dictionary
        var += bytes(-(HEADER_FIXED_BYTES + len(var)) % 8)
        h = bytearray(HEADER_FIXED_BYTES)
        h[0:8] = MAGIC
        put(h, 8, 2, self.format_major)
        put(h, 10, 2, self.format_minor)
        put(h, 12, 4, HEADER_FIXED_BYTES + len(var) + 8)
        h[16], h[17], h[18], h[19] = self.kind, self.dtype, self.ndim, self.codec
        h[20] = self.data_shards & 0xFF
        put(h, 24, 8, record_count)
        put(h, 32, 8, logical)
        put(h, 40, 8, sum(shard_sizes))
        put(h, 48, 4, entry_size(self.kind, self.ndim))
        put(h, 52, 4, len(self.dictionary))
        put(h, 56, 8, len(index))
        put(h, 64, 8, xxh64(index))
        put(h, 72, 8, xxh64(self.dictionary) if self.dictionary else 0)
        put(h, 80, 8, self.required_features & _M64)
        put(h, 88, 4, self.dtype_length & 0xFFFFFFFF)
        h[92] = self.dtype_unit & 0xFF
        h += var
        return bytes(h + xxh64(bytes(h)).to_bytes(8, "little"))


def entry_size(kind: int, ndim: int) -> int:
    if kind != 2:
        return ENTRY_FIXED_BYTES
    return (ENTRY_FIXED_BYTES + 4 * ndim + 7) // 8 * 8


def reseal_header(header: bytearray) -> None:
    """Recompute the header checksum over whatever the header now holds."""
    if len(header) >= 8:
        header[-8:] = xxh64(bytes(header[:-8])).to_bytes(8, "little")


def read_store(path: str) -> dict[str, bytes]:
    files = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            files[name] = f.read()
    return files


# A value of `files` that write_store makes a FIFO (named pipe) instead of a regular file.
FIFO = "fifo"


def write_store(path: str, files: dict[str, bytes | str | None]) -> None:
    """Write `files` into the new directory `path`; a value of None makes a subdirectory and
    the value FIFO a named pipe."""
    os.mkdir(path)
    for name, data in files.items():
        full = os.path.join(path, name)
        if data is None:
            os.mkdir(full)
        elif data == FIFO:
            os.mkfifo(full)
        else:
            with open(full, "wb") as f:
                f.write(data)
