"""A small writer of zrecord format 1.2 stores, written byte by byte from spec/format-v1.md.

It exists so that some conformance vectors come from a second implementation: the native
core is then tested on bytes it did not produce. It writes straight into the target
directory (no temporary sibling, no fsync): it makes test vectors, not production stores.

It writes index parts (format 1.2, spec section 4.1) only when asked (`index_parts`): the
frozen vectors of 1.0 and 1.1 are stores without them, and it must keep writing those byte for
byte. Asked with `index_parts=True`, it uses the writer defaults of spec section 4.1
(`default_part_shifts`), which zrecord's writer uses too.

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
    FEATURE_INDEX_PARTS,
    HEADER_FIXED_BYTES,
    INDEX_GROUPS_MAX,
    KINDS,
    MAGIC,
    blocks_of,
    dtype_params,
    index_entry_size,
)
from .xxh64 import xxh64

ZSTD_BLOCK_BYTES_MAX = 128 * 1024
# The writer defaults of spec section 4.1: index blocks of 2^8 entries, and sum groups of at least
# 2^10 block sums, more where that would make more than index_groups_max groups.
INDEX_BLOCK_SHIFT_DEFAULT = 8
INDEX_GROUP_SHIFT_MIN_DEFAULT = 10


def default_part_shifts(record_count: int) -> tuple[int, int]:
    """(index_block_shift, index_group_shift) as the writer defaults of spec section 4.1 give them:
    s = 8, and g the smallest value >= 10 for which the store has at most index_groups_max groups."""
    blocks = blocks_of(record_count, INDEX_BLOCK_SHIFT_DEFAULT)
    group_shift = INDEX_GROUP_SHIFT_MIN_DEFAULT
    while blocks_of(blocks, group_shift) > INDEX_GROUPS_MAX:
        group_shift += 1
    return INDEX_BLOCK_SHIFT_DEFAULT, group_shift


def index_parts_of(index: bytes, entry_size: int, block_shift: int, group_shift: int) -> tuple[bytes, list[int]]:
    """index.zrs (the XXH64 of each index block of `index`, in block order) and the header's
    group_sums (the XXH64 of each sum group of index.zrs), spec section 4.1."""
    record_count = len(index) // entry_size
    block_bytes = entry_size << block_shift
    sums = b"".join(
        xxh64(index[b * block_bytes : (b + 1) * block_bytes]).to_bytes(8, "little")
        for b in range(blocks_of(record_count, block_shift))
    )
    group_bytes = 8 << group_shift
    groups = blocks_of(len(sums) // 8, group_shift)
    return sums, [xxh64(sums[t * group_bytes : (t + 1) * group_bytes]) for t in range(groups)]


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
    index_parts: bool | tuple[int, int] = False,
) -> dict[str, bytes]:
    """The files of a store (name -> bytes), laid out byte by byte as spec sections 3 to 5 say.

    `format_minor` defaults to the lowest minor that defines the dtype code and the feature bits
    ([ZR-HDR-018]).

    `layout` is the order in which records are placed in their shards (default: logical order);
    the index always lists them in logical order.

    `index_parts` (spec section 4.1): False for a store without them; True for the writer
    defaults; or (index_block_shift, index_group_shift).
    """
    entry_size = index_entry_size(kind, ndim)
    shards, offsets = _lay_out(records, data_shards, layout)
    index = _index(kind, entry_size, records, offsets)
    shifts = default_part_shifts(len(records)) if index_parts is True else index_parts or None
    block_sums, group_sums = index_parts_of(index, entry_size, *shifts) if shifts else (b"", [])
    if shifts:
        required_features |= FEATURE_INDEX_PARTS
    variable = _variable_part(kind, item_shape, shards, group_sums, dictionary)
    header = bytearray(HEADER_FIXED_BYTES)
    header[0:8] = MAGIC
    header[8:10] = (1).to_bytes(2, "little")
    if format_minor is None:
        format_minor = 2 if shifts else 1 if dtype_code >= 15 else 0
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
    if shifts:
        header[93], header[94] = shifts
    header += variable
    header += xxh64(header).to_bytes(8, "little")
    files = {f"data-{k:03d}.zrd": bytes(s) for k, s in enumerate(shards)}
    files["index.zri"] = bytes(index)
    if shifts:
        files["index.zrs"] = block_sums
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


def _variable_part(
    kind: str, item_shape: Sequence[int], shards: list[bytearray], group_sums: list[int], dictionary: bytes
) -> bytearray:
    """The header's variable part (spec section 3): item_shape (Dense only), shard_sizes, the
    group sums (index parts only) and the dictionary, padded with zeros so that the header up to
    its checksum fills whole 8-byte words."""
    variable = bytearray()
    if kind == "dense":
        for dim in item_shape:
            variable += int(dim).to_bytes(8, "little")
    for shard in shards:
        variable += len(shard).to_bytes(8, "little")
    for group_sum in group_sums:
        variable += group_sum.to_bytes(8, "little")
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
    index_parts: bool | tuple[int, int] = False,
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
            index_parts=index_parts,
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
    index_parts: bool | tuple[int, int] = False,
) -> dict[str, bytes]:
    """`build` from NumPy records; arguments as in `write_store` and `build`."""
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
        index_parts=index_parts,
    )
