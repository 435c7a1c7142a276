"""A small, slow, readable reader of zrecord format v1, written from spec/format-v1.md alone.

It checks every rule the spec gives a reader, in the order of spec section 9 ([ZR-ERR-002]):
the header file on its own, then the shard files, then the index file, then every index entry,
and, while records are read, each record's checksum and frame. A rule that fails raises
`FormatViolation` with the conformance error code of spec section 9 and the requirement ID.

It never imports zrecord. It reads whole files into memory, which is fine for the conformance
vectors and nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import zstandard

from .xxh64 import xxh64

MAGIC = b"\x89ZREC\r\n\x1a"
FORMAT_MAJOR = 1
HEADER_FIXED_BYTES = 128
INDEX_ENTRY_FIXED_BYTES = 24
ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"

# Limits, spec section 8.
DATA_SHARDS_MIN = 1
DATA_SHARDS_MAX = 255
NDIM_MAX = 32
RECORD_SIZE_BYTES_MAX = 2**31
STORED_SIZE_BYTES_MAX = 2**32 - 1
DICT_SIZE_BYTES_MAX = 2**24
RECORD_COUNT_MAX = 2**48

# Dtype codes, spec section 3.3: code -> little-endian NumPy dtype.
DTYPES: dict[int, np.dtype] = {
    1: np.dtype("bool"),
    2: np.dtype("int8"),
    3: np.dtype("uint8"),
    4: np.dtype("<i2"),
    5: np.dtype("<u2"),
    6: np.dtype("<i4"),
    7: np.dtype("<u4"),
    8: np.dtype("<i8"),
    9: np.dtype("<u8"),
    10: np.dtype("<f2"),
    11: np.dtype("<f4"),
    12: np.dtype("<f8"),
    13: np.dtype("<c8"),
    14: np.dtype("<c16"),
}
KINDS = {1: "dense", 2: "ragged"}
CODECS = {0: "raw", 1: "zstd", 2: "zstd_dict"}

# The conformance error codes of spec section 9 and their numbers in zig/include/zrecord.h.
ERROR_CODES = {
    "not_published": -14,
    "bad_magic": -10,
    "unsupported_version": -11,
    "corrupt": -12,
    "checksum": -13,
    "unsupported": -15,
    "limit": -16,
    "decode": -17,
}


class FormatViolation(Exception):
    """A store breaks a rule of the spec. `code` is a key of ERROR_CODES, `rule` a spec ID."""

    def __init__(self, code: str, rule: str, message: str) -> None:
        assert code in ERROR_CODES, code
        super().__init__(f"{message} ({rule}; error {code})")
        self.code = code
        self.rule = rule


def _u(buf: bytes, off: int, size: int) -> int:
    return int.from_bytes(buf[off : off + size], "little")


def _product(dims: list[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def index_entry_size(kind: str, ndim: int) -> int:
    """Spec section 4: 24 for Dense, 24 + 4 * ndim rounded up to 8 for Ragged."""
    if kind == "dense":
        return INDEX_ENTRY_FIXED_BYTES
    return (INDEX_ENTRY_FIXED_BYTES + 4 * ndim + 7) // 8 * 8


@dataclass
class Entry:
    offset: int
    stored_size: int
    shard: int
    checksum: int
    shape: tuple[int, ...]
    logical_size: int


@dataclass
class Store:
    path: str
    format_version: tuple[int, int]
    kind: str
    dtype: np.dtype
    ndim: int
    codec: str
    data_shards: int
    record_count: int
    logical_bytes: int
    stored_bytes: int
    item_shape: tuple[int, ...]
    dictionary: bytes
    entries: list[Entry] = field(default_factory=list)
    shards: list[bytes] = field(default_factory=list)

    def read(self, i: int) -> np.ndarray:
        """Record `i`, after its checksum ([ZR-SUM-001]) and, if compressed, its frame."""
        e = self.entries[i]
        stored = self.shards[e.shard][e.offset : e.offset + e.stored_size]
        if xxh64(stored) != e.checksum:
            raise FormatViolation(
                "checksum", "ZR-SUM-001", f"record {i}: stored bytes do not match the index checksum"
            )
        payload = stored if self.codec == "raw" else self._decode(i, stored, e.logical_size)
        arr = np.frombuffer(payload, dtype=self.dtype)
        return arr.reshape(e.shape).copy()

    def _decode(self, i: int, stored: bytes, logical_size: int) -> bytes:
        # Spec section 6: exactly one complete zstd frame with its content size set, which
        # must be the record's logical size ([ZR-IDX-005]).
        def fail(why: str) -> FormatViolation:
            return FormatViolation("decode", "ZR-IDX-005", f"record {i}: {why}")

        if stored[:4] != ZSTD_FRAME_MAGIC:
            raise fail("stored bytes are not a zstd frame")
        try:
            params = zstandard.get_frame_parameters(stored)
        except zstandard.ZstdError as exc:
            raise fail(f"bad zstd frame header: {exc}") from None
        if params.content_size != logical_size:
            raise fail(f"frame content size {params.content_size} is not the logical size {logical_size}")
        zdict = None
        if self.codec == "zstd_dict":
            zdict = zstandard.ZstdCompressionDict(self.dictionary)
            if params.dict_id not in (0, zdict.dict_id()):
                raise fail(f"frame needs dictionary {params.dict_id}, not the store's")
        elif params.dict_id != 0:
            raise fail("frame of codec zstd needs a dictionary")
        try:
            out = zstandard.ZstdDecompressor(dict_data=zdict).decompress(
                stored, max_output_size=logical_size, allow_extra_data=False
            )
        except zstandard.ZstdError as exc:
            raise fail(f"frame does not decode: {exc}") from None
        if len(out) != logical_size:
            raise fail(f"frame decodes to {len(out)} bytes, not {logical_size}")
        return out

    def read_all(self) -> list[np.ndarray]:
        return [self.read(i) for i in range(self.record_count)]


def _read_file(path: str) -> bytes | None:
    """The bytes of a store file, or None if it does not exist."""
    if os.path.islink(path):
        raise FormatViolation("corrupt", "ZR-GEN-004", f"{path} is a symbolic link")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise FormatViolation("corrupt", "ZR-GEN-001", f"{path} is not a regular file")
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def decode_header(h: bytes) -> dict:
    """Validates header.zrh on its own (spec section 3) and returns its fields."""

    def corrupt(rule: str, why: str) -> FormatViolation:
        return FormatViolation("corrupt", rule, f"header.zrh: {why}")

    if len(h) < 8 or h[:8] != MAGIC:
        raise FormatViolation("bad_magic", "ZR-HDR-001", "header.zrh does not start with the magic")
    if len(h) < 12:
        raise corrupt("ZR-HDR-003", f"{len(h)} bytes, shorter than the fixed part")
    major, minor = _u(h, 8, 2), _u(h, 10, 2)
    if major != FORMAT_MAJOR:
        raise FormatViolation(
            "unsupported_version", "ZR-HDR-002", f"format {major}.{minor}; this reader implements major 1"
        )
    if len(h) < HEADER_FIXED_BYTES + 8:
        raise corrupt("ZR-HDR-003", f"{len(h)} bytes, shorter than fixed part and checksum")
    header_size = _u(h, 12, 4)
    if header_size != len(h) or header_size % 8 != 0:
        raise corrupt("ZR-HDR-003", f"header_size {header_size}, file has {len(h)} bytes")
    if xxh64(h[:-8]) != _u(h, len(h) - 8, 8):
        raise FormatViolation("checksum", "ZR-HDR-004", "header checksum mismatch")
    if any(h[21:24]) or any(h[80:128]):
        raise corrupt("ZR-HDR-005", "non-zero reserved bytes")
    kind_code, dtype_code, ndim, codec_code, data_shards = h[16], h[17], h[18], h[19], h[20]
    if kind_code not in KINDS:
        raise FormatViolation("unsupported", "ZR-HDR-006", f"unknown kind {kind_code}")
    if dtype_code not in DTYPES:
        raise FormatViolation("unsupported", "ZR-HDR-006", f"unknown dtype {dtype_code}")
    if codec_code not in CODECS:
        raise FormatViolation("unsupported", "ZR-COD-003", f"unknown codec {codec_code}")
    kind, codec, dtype = KINDS[kind_code], CODECS[codec_code], DTYPES[dtype_code]
    if data_shards < DATA_SHARDS_MIN:
        raise FormatViolation("limit", "ZR-HDR-007", "data_shards 0, below data_shards_min 1")
    if ndim > NDIM_MAX:
        raise FormatViolation("limit", "ZR-HDR-008", f"ndim {ndim}, above ndim_max {NDIM_MAX}")
    if kind == "ragged" and ndim == 0:
        raise corrupt("ZR-HDR-008", "a Ragged store with ndim 0")
    dict_size = _u(h, 52, 4)
    if dict_size > DICT_SIZE_BYTES_MAX:
        raise FormatViolation("limit", "ZR-HDR-013", f"dict_size {dict_size}, above the limit")
    shape_axes = ndim if kind == "dense" else 0
    variable = 8 * shape_axes + 8 * data_shards + dict_size
    want_size = (HEADER_FIXED_BYTES + variable + 7) // 8 * 8 + 8
    if header_size != want_size:
        raise corrupt("ZR-HDR-003", f"header_size {header_size}, the variable part needs {want_size}")
    pos = HEADER_FIXED_BYTES
    item_shape = tuple(_u(h, pos + 8 * k, 8) for k in range(shape_axes))
    pos += 8 * shape_axes
    shard_sizes = [_u(h, pos + 8 * k, 8) for k in range(data_shards)]
    pos += 8 * data_shards
    dictionary = h[pos : pos + dict_size]
    pos += dict_size
    if any(h[pos : len(h) - 8]):
        raise corrupt("ZR-HDR-005", "non-zero padding")
    if kind == "dense" and 0 not in item_shape:
        if _product(list(item_shape)) * dtype.itemsize > RECORD_SIZE_BYTES_MAX:
            raise FormatViolation("limit", "ZR-HDR-009", "Dense record size above record_size_bytes_max")
    stored_bytes = _u(h, 40, 8)
    if sum(shard_sizes) != stored_bytes:
        raise corrupt("ZR-HDR-010", "stored_bytes is not the sum of shard_sizes")
    record_count = _u(h, 24, 8)
    if record_count > RECORD_COUNT_MAX:
        raise FormatViolation("limit", "ZR-HDR-014", f"record_count {record_count} above record_count_max")
    entry_size = _u(h, 48, 4)
    if entry_size != index_entry_size(kind, ndim):
        raise corrupt("ZR-HDR-012", f"index_entry_size {entry_size}")
    index_size = _u(h, 56, 8)
    if index_size != record_count * entry_size:
        raise corrupt("ZR-HDR-011", "index_size is not record_count * index_entry_size")
    if codec == "zstd_dict" and dict_size == 0:
        raise corrupt("ZR-HDR-013", "codec zstd_dict without a dictionary")
    if codec != "zstd_dict" and dict_size != 0:
        raise corrupt("ZR-HDR-013", f"a dictionary with codec {codec}")
    want_dict_sum = xxh64(dictionary) if dict_size else 0
    if _u(h, 72, 8) != want_dict_sum:
        raise FormatViolation("checksum", "ZR-HDR-013", "dict_checksum mismatch")
    return {
        "format_version": (major, minor),
        "kind": kind,
        "dtype": dtype,
        "ndim": ndim,
        "codec": codec,
        "data_shards": data_shards,
        "record_count": record_count,
        "logical_bytes": _u(h, 32, 8),
        "stored_bytes": stored_bytes,
        "item_shape": item_shape,
        "shard_sizes": shard_sizes,
        "entry_size": entry_size,
        "index_size": index_size,
        "index_checksum": _u(h, 64, 8),
        "dictionary": bytes(dictionary),
    }


def open_store(path: str | os.PathLike[str]) -> Store:
    """Validates everything the spec lets a reader check without record data (spec section 9)."""
    path = os.fspath(path)
    header = _read_file(os.path.join(path, "header.zrh"))
    if header is None:
        raise FormatViolation("not_published", "ZR-PUB-004", f"{path} has no header.zrh")
    f = decode_header(header)
    store = Store(
        path=path,
        **{
            k: f[k]
            for k in (
                "format_version",
                "kind",
                "dtype",
                "ndim",
                "codec",
                "data_shards",
                "record_count",
                "logical_bytes",
                "stored_bytes",
                "item_shape",
                "dictionary",
            )
        },
    )

    if store.codec == "zstd_dict":
        _check_dictionary(store.dictionary)

    for k, want in enumerate(f["shard_sizes"]):
        data = _read_file(os.path.join(path, f"data-{k:03d}.zrd"))
        if data is None:
            raise FormatViolation("corrupt", "ZR-GEN-001", f"shard file data-{k:03d}.zrd missing")
        if len(data) != want:
            raise FormatViolation(
                "corrupt", "ZR-HDR-010", f"data-{k:03d}.zrd has {len(data)} bytes, shard_sizes says {want}"
            )
        store.shards.append(data)

    index = _read_file(os.path.join(path, "index.zri"))
    if index is None:
        raise FormatViolation("corrupt", "ZR-GEN-001", "index.zri missing")
    if len(index) != f["index_size"]:
        raise FormatViolation(
            "corrupt", "ZR-HDR-011", f"index.zri has {len(index)} bytes, index_size says {f['index_size']}"
        )
    if xxh64(index) != f["index_checksum"]:
        raise FormatViolation("checksum", "ZR-HDR-011", "index checksum mismatch")

    es = f["entry_size"]
    shard_sums = [0] * store.data_shards
    logical_sum = 0
    for i in range(store.record_count):
        store.entries.append(_decode_entry(store, index[i * es : (i + 1) * es], i))
        shard_sums[store.entries[-1].shard] += store.entries[-1].stored_size
        logical_sum += store.entries[-1].logical_size
    for k, total in enumerate(shard_sums):
        if total != f["shard_sizes"][k]:
            raise FormatViolation(
                "corrupt",
                "ZR-DAT-001",
                f"records of data-{k:03d}.zrd add up to {total} bytes, the file has {f['shard_sizes'][k]}",
            )
    if logical_sum != store.logical_bytes:
        raise FormatViolation(
            "corrupt",
            "ZR-HDR-015",
            f"records add up to {logical_sum} logical bytes, logical_bytes says {store.logical_bytes}",
        )
    return store


ZSTD_DICT_MAGIC = b"\x37\xa4\x30\xec"
# A zstd frame of no content: magic, single-segment descriptor, content size 0, one empty
# last raw block (RFC 8878 section 3.1.1).
EMPTY_ZSTD_FRAME = ZSTD_FRAME_MAGIC + b"\x20\x00\x01\x00\x00"


def _check_dictionary(dictionary: bytes) -> None:
    """[ZR-COD-004] A zstd-format dictionary must load. Loading it is left to the zstd decoder
    (the entropy tables of RFC 8878 section 5 are its business): decoding an empty frame with
    it makes the decoder load it, whatever the frame holds."""
    if len(dictionary) < 8 or dictionary[:4] != ZSTD_DICT_MAGIC:
        return
    try:
        zdict = zstandard.ZstdCompressionDict(dictionary, dict_type=zstandard.DICT_TYPE_FULLDICT)
        zstandard.ZstdDecompressor(dict_data=zdict).decompress(EMPTY_ZSTD_FRAME)
    except zstandard.ZstdError as exc:
        raise FormatViolation(
            "corrupt", "ZR-COD-004", f"the dictionary has the zstd magic but does not load: {exc}"
        ) from None


def _decode_entry(store: Store, b: bytes, i: int) -> Entry:
    """Checks one index entry in isolation (spec section 4)."""

    def corrupt(rule: str, why: str) -> FormatViolation:
        return FormatViolation("corrupt", rule, f"index entry {i}: {why}")

    offset, stored_size, shard, checksum = _u(b, 0, 8), _u(b, 8, 4), b[12], _u(b, 16, 8)
    if shard >= store.data_shards:
        raise corrupt("ZR-IDX-001", f"shard {shard} of {store.data_shards}")
    if any(b[13:16]):
        raise corrupt("ZR-IDX-003", "non-zero reserved bytes")
    if offset + stored_size > len(store.shards[shard]):
        raise corrupt("ZR-IDX-002", f"bytes {offset}+{stored_size} past the end of the shard")
    if store.kind == "dense":
        shape = store.item_shape
    else:
        shape = tuple(_u(b, 24 + 4 * k, 4) for k in range(store.ndim))
        if 0 not in shape and _product(list(shape)) * store.dtype.itemsize > RECORD_SIZE_BYTES_MAX:
            raise FormatViolation(
                "limit", "ZR-IDX-004", f"index entry {i}: shape {shape} exceeds record_size_bytes_max"
            )
        if any(b[24 + 4 * store.ndim :]):
            raise corrupt("ZR-IDX-003", "non-zero padding")
    logical = _product(list(shape)) * store.dtype.itemsize
    if store.codec == "raw" and stored_size != logical:
        raise corrupt("ZR-IDX-004", f"raw stored_size {stored_size}, logical size {logical}")
    return Entry(offset, stored_size, shard, checksum, shape, logical)


def read_store(path: str | os.PathLike[str]) -> list[np.ndarray]:
    """Opens the store and returns every record, checking everything a reader must."""
    return open_store(path).read_all()
