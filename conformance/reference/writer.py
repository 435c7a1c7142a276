"""A small writer of zrecord format 1.1 stores, written byte by byte from spec/format-v1.md.

It exists so that some conformance vectors come from a second implementation: the native
core is then tested on bytes it did not produce. It writes straight into the target
directory (no temporary sibling, no fsync): it makes test vectors, not production stores.

Codec `zstd` frames are built here from RFC 8878 with raw and RLE blocks only, so their bytes
depend on no compression library. Codec `zstd_dict` frames come from the `zstandard` package.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import zstandard

from .reader import (
    CODECS,
    HEADER_FIXED_BYTES,
    KINDS,
    MAGIC,
    dtype_params,
    index_entry_size,
)
from .xxh64 import xxh64

ZSTD_BLOCK_BYTES_MAX = 128 * 1024


def _code(table: dict, value: object) -> int:
    return next(k for k, v in table.items() if v == value)


def zstd_frame(payload: bytes, single_segment: bool = True) -> bytes:
    """One zstd frame (RFC 8878 section 3.1.1) holding `payload`, with its content size set.

    No checksum, no dictionary ID. A single-segment frame by default, whose blocks hold at most
    128 KiB; otherwise one with a 1 KiB window descriptor and a 4-byte content size, whose blocks
    hold at most the window, 1 KiB. A block that repeats one byte is an RLE block, any other a
    raw block.
    """
    n = len(payload)
    if not single_segment:
        # Frame_Header_Descriptor: content size flag 2 (4 bytes), Single_Segment_Flag 0; then
        # Window_Descriptor 0x00: exponent 0, mantissa 0, a window of 2^10 bytes.
        header = b"\x28\xb5\x2f\xfd" + bytes([2 << 6, 0x00]) + n.to_bytes(4, "little")
        return _blocks(header, payload, 1024)
    if n < 256:
        fcs_flag, fcs = 0, n.to_bytes(1, "little")
    elif n < 65536 + 256:
        fcs_flag, fcs = 1, (n - 256).to_bytes(2, "little")
    elif n < 2**32:
        fcs_flag, fcs = 2, n.to_bytes(4, "little")
    else:
        fcs_flag, fcs = 3, n.to_bytes(8, "little")
    return _blocks(b"\x28\xb5\x2f\xfd" + bytes([(fcs_flag << 6) | (1 << 5)]) + fcs, payload)


def _blocks(frame_header: bytes, payload: bytes, block_max: int = ZSTD_BLOCK_BYTES_MAX) -> bytes:
    """The frame header followed by `payload` in raw and RLE blocks of at most `block_max`."""
    out = bytearray(frame_header)
    n = len(payload)
    pos = 0
    while True:
        block = payload[pos : pos + block_max]
        pos += len(block)
        last = pos >= n
        if len(block) > 1 and block.count(block[0]) == len(block):
            out += (int(last) | (1 << 1) | (len(block) << 3)).to_bytes(3, "little")
            out.append(block[0])
        else:
            out += (int(last) | (len(block) << 3)).to_bytes(3, "little")
            out += block
        if last:
            return bytes(out)


def rle_zstd_frame(byte: int, size: int) -> bytes:
    """A zstd frame of `size` copies of `byte`, made of RLE blocks (a few bytes per 128 KiB)."""
    fcs_flag, fcs = (2, size.to_bytes(4, "little")) if size < 2**32 else (3, size.to_bytes(8, "little"))
    out = bytearray(b"\x28\xb5\x2f\xfd")
    out.append((fcs_flag << 6) | (1 << 5))
    out += fcs
    left = size
    while True:
        block = min(left, ZSTD_BLOCK_BYTES_MAX)
        left -= block
        out += (int(left == 0) | (1 << 1) | (block << 3)).to_bytes(3, "little")
        out.append(byte)
        if left == 0:
            return bytes(out)


def dict_encoder(dictionary: bytes, level: int = 3) -> Callable[[bytes], bytes]:
    """Encoder for codec zstd_dict: `zstandard` with `dictionary` as a raw-content dictionary."""
    zdict = zstandard.ZstdCompressionDict(dictionary, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    comp = zstandard.ZstdCompressor(
        level=level, dict_data=zdict, write_content_size=True, write_checksum=False, write_dict_id=False
    )
    return comp.compress


@dataclass
class Stored:
    """One record as it lies in a store: its shape, logical size, stored bytes and shard."""

    shape: tuple[int, ...]
    logical_size: int
    stored: bytes
    shard: int = 0


def encode_records(
    records: Sequence[np.ndarray],
    dtype: np.dtype,
    encode: Callable[[bytes], bytes],
    assign: Callable[[int], int],
) -> list[Stored]:
    """Turns arrays into `Stored` records: C order, little-endian, then `encode`."""
    out = []
    for i, rec in enumerate(records):
        arr = np.ascontiguousarray(rec, dtype=dtype.newbyteorder("<"))
        payload = arr.tobytes(order="C")
        out.append(Stored(tuple(arr.shape), len(payload), encode(payload), assign(i)))
    return out


def build(
    *,
    kind: str,
    dtype_code: int,
    ndim: int,
    codec_code: int,
    data_shards: int,
    records: Sequence[Stored],
    item_shape: Sequence[int] = (),
    dictionary: bytes = b"",
    format_minor: int | None = None,
    layout: Sequence[int] | None = None,
    dtype_length: int = 0,
    dtype_unit: int = 0,
    required_features: int = 0,
) -> dict[str, bytes]:
    """The files of a store (name -> bytes), laid out byte by byte as spec sections 3 to 5 say.

    `format_minor` defaults to the lowest minor that defines the dtype code ([ZR-HDR-018]).

    `layout` is the order in which records are placed in their shards (default: logical order);
    the index always lists them in logical order.
    """
    entry_size = index_entry_size(kind, ndim)
    shards, offsets = _lay_out(records, data_shards, layout)
    index = _index(kind, entry_size, records, offsets)
    variable = _variable_part(kind, item_shape, shards, dictionary)
    header = bytearray(HEADER_FIXED_BYTES)
    header[0:8] = MAGIC
    header[8:10] = (1).to_bytes(2, "little")
    if format_minor is None:
        format_minor = 1 if dtype_code >= 15 else 0
    header[10:12] = format_minor.to_bytes(2, "little")
    header[12:16] = (HEADER_FIXED_BYTES + len(variable) + 8).to_bytes(4, "little")
    header[16] = _code(KINDS, kind)
    header[17] = dtype_code
    header[18] = ndim
    header[19] = codec_code
    header[20] = data_shards
    header[24:32] = len(records).to_bytes(8, "little")
    header[32:40] = sum(r.logical_size for r in records).to_bytes(8, "little")
    header[40:48] = sum(len(s) for s in shards).to_bytes(8, "little")
    header[48:52] = entry_size.to_bytes(4, "little")
    header[52:56] = len(dictionary).to_bytes(4, "little")
    header[56:64] = len(index).to_bytes(8, "little")
    header[64:72] = xxh64(index).to_bytes(8, "little")
    header[72:80] = (xxh64(dictionary) if dictionary else 0).to_bytes(8, "little")
    header[80:88] = required_features.to_bytes(8, "little")
    header[88:92] = dtype_length.to_bytes(4, "little")
    header[92] = dtype_unit
    header += variable
    header += xxh64(header).to_bytes(8, "little")
    files = {f"data-{k:03d}.zrd": bytes(s) for k, s in enumerate(shards)}
    files["index.zri"] = bytes(index)
    files["header.zrh"] = bytes(header)
    return files


def _lay_out(
    records: Sequence[Stored], data_shards: int, layout: Sequence[int] | None
) -> tuple[list[bytearray], list[int]]:
    """The shard files (spec section 5): each record's stored bytes appended to its shard, in
    the order `layout` gives (default: logical order). Returns the shards and each record's
    offset in its shard, in logical order."""
    shards = [bytearray() for _ in range(data_shards)]
    offsets = [0] * len(records)
    for i in layout if layout is not None else range(len(records)):
        rec = records[i]
        offsets[i] = len(shards[rec.shard])
        shards[rec.shard] += rec.stored
    return shards, offsets


def _index(kind: str, entry_size: int, records: Sequence[Stored], offsets: list[int]) -> bytearray:
    """index.zri (spec section 4): one entry per record, in logical order; a Ragged entry
    adds the record's shape."""
    index = bytearray()
    for i, rec in enumerate(records):
        entry = bytearray(entry_size)
        entry[0:8] = offsets[i].to_bytes(8, "little")
        entry[8:12] = len(rec.stored).to_bytes(4, "little")
        entry[12] = rec.shard
        entry[16:24] = xxh64(rec.stored).to_bytes(8, "little")
        if kind == "ragged":
            for axis, dim in enumerate(rec.shape):
                entry[24 + 4 * axis : 28 + 4 * axis] = dim.to_bytes(4, "little")
        index += entry
    return index


def _variable_part(kind: str, item_shape: Sequence[int], shards: list[bytearray], dictionary: bytes) -> bytearray:
    """The header's variable part (spec section 3): item_shape (Dense only), shard_sizes and the
    dictionary, padded with zeros so that the header up to its checksum fills whole 8-byte words."""
    variable = bytearray()
    if kind == "dense":
        for dim in item_shape:
            variable += int(dim).to_bytes(8, "little")
    for shard in shards:
        variable += len(shard).to_bytes(8, "little")
    variable += dictionary
    variable += bytes(-(HEADER_FIXED_BYTES + len(variable)) % 8)
    return variable


def write_files(path: str | os.PathLike[str], files: dict[str, bytes]) -> None:
    """Creates directory `path` with `files`; header.zrh, the publication marker, last."""
    os.mkdir(path)
    for name in sorted(files, key=lambda n: n == "header.zrh"):
        with open(os.path.join(path, name), "wb") as f:
            f.write(files[name])


def write_store(
    path: str | os.PathLike[str],
    *,
    kind: str,
    dtype: str | np.dtype,
    records: Sequence[np.ndarray],
    item_shape: Sequence[int] = (),
    ndim: int | None = None,
    codec: str = "raw",
    data_shards: int = 1,
    dictionary: bytes = b"",
    assign: Callable[[int], int] | None = None,
    encode: Callable[[bytes], bytes] | None = None,
    format_minor: int | None = None,
    layout: Sequence[int] | None = None,
) -> None:
    """Writes a published store at `path` (a new directory) from NumPy records.

    `assign(i)` picks the shard of record `i` (default: round robin, unlike the native
    writer's contiguous runs). `encode` turns a payload into stored bytes; by default the
    identity for `raw`, `zstd_frame` for `zstd` and `dict_encoder(dictionary)` for `zstd_dict`.
    """
    write_files(
        path,
        build_store(
            kind=kind,
            dtype=dtype,
            records=records,
            item_shape=item_shape,
            ndim=ndim,
            codec=codec,
            data_shards=data_shards,
            dictionary=dictionary,
            assign=assign,
            encode=encode,
            format_minor=format_minor,
            layout=layout,
        ),
    )


def build_store(
    *,
    kind: str,
    dtype: str | np.dtype,
    records: Sequence[np.ndarray],
    item_shape: Sequence[int] = (),
    ndim: int | None = None,
    codec: str = "raw",
    data_shards: int = 1,
    dictionary: bytes = b"",
    assign: Callable[[int], int] | None = None,
    encode: Callable[[bytes], bytes] | None = None,
    format_minor: int | None = None,
    layout: Sequence[int] | None = None,
) -> dict[str, bytes]:
    """`build` from NumPy records; arguments as in `write_store`."""
    dt = np.dtype(dtype)
    dtype_code, dtype_length, dtype_unit = dtype_params(dt)
    if kind == "dense":
        ndim = len(item_shape)
        for rec in records:
            assert np.shape(rec) == tuple(item_shape), (np.shape(rec), item_shape)
    assert ndim is not None
    if encode is None:
        encode = bytes if codec == "raw" else zstd_frame if codec == "zstd" else dict_encoder(dictionary)
    if assign is None:

        def assign(i: int) -> int:
            return i % data_shards

    stored = encode_records(records, dt, encode, assign)
    return build(
        kind=kind,
        dtype_code=dtype_code,
        ndim=ndim,
        codec_code=_code(CODECS, codec),
        data_shards=data_shards,
        records=stored,
        item_shape=item_shape,
        dictionary=dictionary,
        format_minor=format_minor,
        layout=layout,
        dtype_length=dtype_length,
        dtype_unit=dtype_unit,
    )
