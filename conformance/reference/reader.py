"""A small, slow, readable reader of zrecord format 1.2, written from spec/format-v1.md alone.

It checks every rule the spec gives a reader, in the order of spec section 9 ([ZR-ERR-002],
[ZR-ERR-003]): the store path, the header file on its own, then the shard files, then the
index file, then every index entry, the sums over the index, and, while records are read, each
record's checksum and frame; `Store.verify` adds the layout of the shards ([ZR-IDX-008]). A
rule that fails raises `FormatViolation` with the conformance error code of spec section 9 and
the requirement ID.

A store with the feature `index_parts` (format 1.2, spec sections 4.1 and 9.6) is read in one
of two ways, both of which the spec allows: `open_store(path)` judges the whole index at open
(every sum group, every index block, the whole-index checksum, every entry, the sums over the
index), and `open_store(path, by_part=True)` judges only the files' sizes at open and each
index block (its sum group, its block sum, its entries) when a record of it is first read,
leaving the sums over the whole index to `Store.verify`. A store without the feature reads the
same either way, with the whole index judged at open, as in format 1.1.

Zstd-format dictionaries are checked by the algorithm of spec section 6.3 (`dictionary.py`),
and frame headers and block headers are read here (spec section 6.2); `zstandard` only decodes
frames that passed both. A failure of the system (permission denied, an I/O error, a store path
the system cannot resolve for a reason other than ENOENT or ENOTDIR) is no FormatViolation: it
propagates as the OSError it is ([ZR-GEN-009]).

It never imports zrecord. It reads whole files into memory, which is fine for the conformance
vectors and nothing else.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import zstandard

from .dictionary import DictionaryProblem, check_dictionary
from .xxh64 import xxh64

MAGIC = b"\x89ZREC\r\n\x1a"
FORMAT_MAJOR = 1
FORMAT_MINOR = 2
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
ITEMSIZE_BYTES_MAX = 2**31 - 1
EXTENT_BYTES_MAX = 2**63 - 1
UNIT_COUNT_MAX = 2**31 - 1
WINDOW_SIZE_FLOOR = 2**27
BLOCK_SIZE_BYTES_MAX = 2**17  # RFC 8878's 128 KiB bound of Block_Maximum_Size
# libzstd bounds what a Compressed block decodes to by Block_Maximum_Size from 1.5.6 on
# ([ZR-COD-013]); with an older one the reference reader would accept frames the spec rejects.
ZSTD_VERSION_FLOOR = (1, 5, 6)
if tuple(zstandard.ZSTD_VERSION) < ZSTD_VERSION_FLOOR:
    raise ImportError(
        f"the reference reader needs zstandard built with libzstd >= 1.5.6 (spec ZR-COD-013); "
        f"this one has {'.'.join(map(str, zstandard.ZSTD_VERSION))}"
    )
# Index parts, format 1.2 (spec sections 4.1 and 8).
INDEX_BLOCK_SHIFT_MAX = 48
INDEX_GROUP_SHIFT_MAX = 48
INDEX_GROUPS_MAX = 2**16
HEADER_SIZE_BYTES_MAX = (
    HEADER_FIXED_BYTES + 8 * NDIM_MAX + 8 * DATA_SHARDS_MAX + 8 * INDEX_GROUPS_MAX + DICT_SIZE_BYTES_MAX + 8
)
# The largest header of format 1.1 (no group_sums), which the frozen vector
# header_oversized_without_magic of conformance/v1.1 is one byte longer than.
HEADER_SIZE_BYTES_MAX_1_1 = HEADER_FIXED_BYTES + 8 * NDIM_MAX + 8 * DATA_SHARDS_MAX + DICT_SIZE_BYTES_MAX + 8

# Dtype codes of format 1.0, spec section 3.3: code -> little-endian NumPy dtype.
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
# The parametric dtype codes of format 1.1, spec section 3.3: code -> (name, NumPy kind).
PARAMETRIC: dict[int, tuple[str, str]] = {
    15: ("datetime64", "M"),
    16: ("timedelta64", "m"),
    17: ("bytes", "S"),
    18: ("str", "U"),
    19: ("void", "V"),
}
# datetime64/timedelta64 unit codes, spec section 3.3.
UNITS: dict[int, str] = {
    1: "Y", 2: "M", 3: "W", 4: "D", 5: "h", 6: "m", 7: "s",
    8: "ms", 9: "us", 10: "ns", 11: "ps", 12: "fs", 13: "as",
}
KINDS = {1: "dense", 2: "ragged"}
CODECS = {0: "raw", 1: "zstd", 2: "zstd_dict"}
# Bits of required_features this reader implements (spec section 3.4): format 1.2 defines bit 0,
# index_parts (spec section 4.1).
FEATURE_INDEX_PARTS = 1 << 0
REQUIRED_FEATURES_KNOWN = FEATURE_INDEX_PARTS

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
# Format 1.1 adds one, for a store path at which nothing exists ([ZR-GEN-005]).
ERROR_CODES_1_1 = {**ERROR_CODES, "not_found": -3}


class FormatViolation(Exception):
    """A store breaks a rule of the spec. `code` is a key of ERROR_CODES_1_1, `rule` a spec ID."""

    def __init__(self, code: str, rule: str, message: str) -> None:
        assert code in ERROR_CODES_1_1, code
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


def _extent(dims: list[int] | tuple[int, ...], itemsize: int) -> int:
    """The product of the non-zero axes times the itemsize ([ZR-HDR-021], [ZR-IDX-007])."""
    return _product([d for d in dims if d]) * itemsize


def index_entry_size(kind: str, ndim: int) -> int:
    """Spec section 4: 24 for Dense, 24 + 4 * ndim rounded up to 8 for Ragged."""
    if kind == "dense":
        return INDEX_ENTRY_FIXED_BYTES
    return (INDEX_ENTRY_FIXED_BYTES + 4 * ndim + 7) // 8 * 8


def dtype_of(code: int, length: int, unit: int) -> np.dtype:
    """The NumPy dtype of a valid dtype code and its parameters (spec section 3.3)."""
    if code in DTYPES:
        return DTYPES[code]
    kind = PARAMETRIC[code][1]
    if kind in "Mm":
        return np.dtype(f"<{kind}8[{'' if length == 1 else length}{UNITS[unit]}]")
    return np.dtype(f"<U{length}") if kind == "U" else np.dtype(f"{kind}{length}")


def dtype_params(dt: np.dtype) -> tuple[int, int, int]:
    """(code, dtype_length, dtype_unit) of a NumPy dtype the format can hold."""
    dt = np.dtype(dt)
    for code, (_, kind) in PARAMETRIC.items():
        if dt.kind != kind:
            continue
        if kind in "Mm":
            unit, count = np.datetime_data(dt)
            return code, count, next(c for c, u in UNITS.items() if u == unit)
        return code, dt.itemsize // 4 if kind == "U" else dt.itemsize, 0
    norm = dt.newbyteorder("<") if dt.itemsize > 1 else dt
    return next(c for c, d in DTYPES.items() if d == norm), 0, 0


@dataclass
class Entry:
    offset: int
    stored_size: int
    shard: int
    checksum: int
    shape: tuple[int, ...]
    logical_size: int


def blocks_of(record_count: int, shift: int) -> int:
    """ceil(record_count / 2^shift): the index blocks of a store, or the sum groups of its block
    sums (spec section 4.1), without the rounding overflowing 64 bits."""
    return (record_count >> shift) + (1 if record_count & ((1 << shift) - 1) else 0)


@dataclass
class Parts:
    """The index parts of a store with the feature index_parts (spec section 4.1): index blocks of
    2^block_shift entries, whose block sums (index.zrs) come in sum groups of 2^group_shift, one
    group sum per group in the header."""

    block_shift: int
    group_shift: int
    blocks: int
    group_sums: list[int]
    block_sums: bytes = b""

    def block_records(self, b: int, record_count: int) -> range:
        return range(b << self.block_shift, min((b + 1) << self.block_shift, record_count))

    def group_blocks(self, t: int) -> range:
        return range(t << self.group_shift, min((t + 1) << self.group_shift, self.blocks))


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
    dict_id: int = 0
    # Every entry, once the whole index has been judged (steps 4 to 6); until then, by part.
    entries: list[Entry] = field(default_factory=list)
    shards: list[bytes] = field(default_factory=list)
    shard_sizes: list[int] = field(default_factory=list)
    index: bytes = b""
    entry_size: int = 0
    index_checksum: int = 0
    parts: Parts | None = None
    whole_index_judged: bool = False
    # Reading by part (spec section 9.6): the groups and blocks judged so far, and the entries of
    # the judged blocks.
    judged_groups: set[int] = field(default_factory=set)
    judged_blocks: set[int] = field(default_factory=set)
    part_entries: dict[int, Entry] = field(default_factory=dict)

    def entry(self, i: int) -> Entry:
        """Record i's index entry, once the checks that describe it have passed: the whole index
        (judged at open), or its index block, judged now if it was not yet ([ZR-PRT-006])."""
        if self.whole_index_judged:
            return self.entries[i]
        assert self.parts is not None
        self._judge_block(i >> self.parts.block_shift)
        return self.part_entries[i]

    def _check_group(self, t: int) -> None:
        """[ZR-PRT-004] Sum group t of index.zrs against its group sum in the header."""
        parts = self.parts
        assert parts is not None
        blocks = parts.group_blocks(t)
        if xxh64(parts.block_sums[8 * blocks.start : 8 * blocks.stop]) != parts.group_sums[t]:
            raise FormatViolation(
                "checksum",
                "ZR-PRT-004",
                f"index.zrs: sum group {t} (blocks {blocks.start} to {blocks.stop - 1}, records "
                f"{self._first_record(blocks.start)} to {self._last_record(blocks.stop - 1)}) does not "
                f"match group_sums[{t}] of header.zrh",
            )

    def _check_block(self, b: int) -> None:
        """[ZR-PRT-005] Index block b of index.zri against its block sum in index.zrs."""
        parts = self.parts
        assert parts is not None
        records = parts.block_records(b, self.record_count)
        got = xxh64(self.index[records.start * self.entry_size : records.stop * self.entry_size])
        if got != _u(parts.block_sums, 8 * b, 8):
            raise FormatViolation(
                "checksum",
                "ZR-PRT-005",
                f"index.zri: index block {b} (records {records.start} to {records.stop - 1}) does not "
                f"match its block sum in index.zrs",
            )

    def _first_record(self, b: int) -> int:
        assert self.parts is not None
        return b << self.parts.block_shift

    def _last_record(self, b: int) -> int:
        assert self.parts is not None
        return self.parts.block_records(b, self.record_count).stop - 1

    def _judge_block(self, b: int) -> None:
        """Spec section 9.6, by part: before any entry of index block b is used, its sum group
        ([ZR-PRT-004]), then the block ([ZR-PRT-005]), then each of its entries in record order
        (step 5, [ZR-PRT-006]). A block judged once is not judged again."""
        parts = self.parts
        assert parts is not None
        if b in self.judged_blocks:
            return
        t = b >> parts.group_shift
        if t not in self.judged_groups:
            self._check_group(t)
            self.judged_groups.add(t)
        self._check_block(b)
        es = self.entry_size
        for i in parts.block_records(b, self.record_count):
            self.part_entries[i] = _decode_entry(self, self.index[i * es : (i + 1) * es], i)
        self.judged_blocks.add(b)

    def judge_whole_index(self) -> None:
        """Steps 4 (the index's contents) to 6 over the whole index. With index parts, in the
        order of [ZR-PRT-010]: every sum group, every index block, then the whole-index checksum
        ([ZR-HDR-011]); without, the checksum alone. Then every entry (step 5) and the sums over
        the index (step 6)."""
        parts = self.parts
        if parts is not None:
            for t in range(len(parts.group_sums)):
                self._check_group(t)
            for b in range(parts.blocks):
                self._check_block(b)
        if xxh64(self.index) != self.index_checksum:
            raise FormatViolation("checksum", "ZR-HDR-011", "index checksum mismatch")
        es = self.entry_size
        entries = [_decode_entry(self, self.index[i * es : (i + 1) * es], i) for i in range(self.record_count)]
        _check_index_sums(self, entries)
        self.entries = entries
        self.whole_index_judged = True

    def read(self, i: int) -> np.ndarray:
        """Record `i`, after its checksum ([ZR-SUM-001]) and, if compressed, its frame."""
        e = self.entry(i)
        stored = self.shards[e.shard][e.offset : e.offset + e.stored_size]
        if xxh64(stored) != e.checksum:
            raise FormatViolation(
                "checksum", "ZR-SUM-001", f"record {i}: stored bytes do not match the index checksum"
            )
        payload = stored if self.codec == "raw" else self._decode(i, stored, e.logical_size)
        # [ZR-GEN-008] The bytes as they are: no element value is invalid.
        arr = np.frombuffer(payload, dtype=self.dtype)
        return arr.reshape(e.shape).copy()

    def _decode(self, i: int, stored: bytes, logical_size: int) -> bytes:
        """Spec section 6.2: exactly one zstd frame ([ZR-COD-005]) with its content size set to
        the logical size ([ZR-COD-006]), naming no dictionary but the store's ([ZR-COD-007]),
        with a window within the cap ([ZR-COD-008]), blocks within Block_Maximum_Size
        ([ZR-COD-013]) and sequences section headers as [ZR-COD-016] requires, that decodes to
        exactly the logical size ([ZR-IDX-005], its content checksum included, [ZR-COD-009]).
        The conditions [ZR-COD-019] leaves to the decoder are zstandard's (libzstd's) to judge."""

        def fail(rule: str, why: str) -> FormatViolation:
            return FormatViolation("decode", rule, f"record {i}: {why}")

        fh = parse_frame_header(stored)
        if isinstance(fh, str):
            raise fail("ZR-COD-005", fh)
        if fh.content_size is None:
            raise fail("ZR-COD-006", "the frame declares no content size")
        if fh.content_size != logical_size:
            raise fail("ZR-COD-006", f"frame content size {fh.content_size} is not the logical size {logical_size}")
        if fh.dict_id != 0 and fh.dict_id != self.dict_id:
            raise fail("ZR-COD-007", f"the frame names dictionary {fh.dict_id}, which the store does not have")
        cap = window_size_max(logical_size)
        if fh.window_size > cap:
            raise fail("ZR-COD-008", f"the frame's window of {fh.window_size} bytes is above {cap}")
        block_problem = check_block_sizes(stored, fh)
        if block_problem is not None:
            raise fail("ZR-COD-013", block_problem)
        sequences_problem = check_sequences_headers(stored, fh)
        if sequences_problem is not None:
            raise fail("ZR-COD-016", sequences_problem)
        zdict = zstandard.ZstdCompressionDict(self.dictionary) if self.codec == "zstd_dict" else None
        try:
            out = zstandard.ZstdDecompressor(dict_data=zdict, max_window_size=cap).decompress(
                stored, max_output_size=logical_size, allow_extra_data=False
            )
        except zstandard.ZstdError as exc:
            raise fail("ZR-IDX-005", f"frame does not decode: {exc}") from None
        if len(out) != logical_size:
            raise fail("ZR-IDX-005", f"frame decodes to {len(out)} bytes, not {logical_size}")
        return out

    def read_all(self) -> list[np.ndarray]:
        return [self.read(i) for i in range(self.record_count)]

    def verify(self) -> None:
        """What a whole-store check adds to reading every record ([ZR-IDX-008]): every byte of
        every shard lies in exactly one record's stored range. Then every record is read. A store
        with index parts has its whole index judged first ([ZR-PRT-010]), however much of it was
        judged by part."""
        if self.parts is not None:
            self.judge_whole_index()
        for k in range(self.data_shards):
            ranges = sorted(
                (e.offset, e.offset + e.stored_size, i)
                for i, e in enumerate(self.entries)
                if e.shard == k and e.stored_size > 0
            )
            covered = 0
            for begin, end, i in ranges:
                if begin != covered:
                    what = "overlaps the record before it" if begin < covered else "leaves bytes before it uncovered"
                    raise FormatViolation(
                        "corrupt", "ZR-IDX-008", f"data-{k:03d}.zrd: record {i}'s stored range {what}"
                    )
                covered = end
            if covered != len(self.shards[k]):
                raise FormatViolation(
                    "corrupt", "ZR-IDX-008", f"data-{k:03d}.zrd: bytes from {covered} on belong to no record"
                )
        self.read_all()


@dataclass
class FrameHeader:
    window_size: int
    content_size: int | None
    dict_id: int
    has_checksum: bool
    size: int  # bytes from the frame magic to the first block header


def parse_frame_header(stored: bytes) -> FrameHeader | str:
    """The frame header of RFC 8878 section 3.1.1.1, or why `stored` does not start with one."""
    if stored[:4] != ZSTD_FRAME_MAGIC:
        return "the stored bytes do not start with the zstd frame magic 28 B5 2F FD"
    if len(stored) < 5:
        return "the stored bytes end inside the frame header"
    fhd = stored[4]
    if fhd & 0x08:
        return "the frame header descriptor's reserved bit is set"
    single = bool(fhd & 0x20)
    did_size = (0, 1, 2, 4)[fhd & 3]
    fcs_flag = fhd >> 6
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    size = 5 + (0 if single else 1) + did_size + fcs_size
    if len(stored) < size:
        return "the stored bytes end inside the frame header"
    pos = 5
    window = 0
    if not single:
        wd = stored[pos]
        pos += 1
        base = 1 << (10 + (wd >> 3))
        window = base + (base // 8) * (wd & 7)
    dict_id = _u(stored, pos, did_size)
    pos += did_size
    content = None
    if fcs_size:
        content = _u(stored, pos, fcs_size) + (256 if fcs_size == 2 else 0)
    if single:
        window = content
    return FrameHeader(window, content, dict_id, bool(fhd & 4), size)


def iter_blocks(stored: bytes, start: int) -> Iterator[tuple[int, int, bytes]]:
    """(Block_Type, Block_Size, the block's stored bytes) of each block of the frame whose
    blocks start at `start` (RFC 8878 section 3.1.1.2), up to the last block, or up to a header
    that does not fit in the stored bytes; a block whose bytes run off the end is given cut short,
    for the decoder to refuse."""
    pos = start
    while pos + 3 <= len(stored):
        h = _u(stored, pos, 3)
        block_type, block_size = (h >> 1) & 3, h >> 3
        body = stored[pos + 3 : pos + 3 + (1 if block_type == 1 else block_size)]
        yield block_type, block_size, body
        if h & 1:
            return
        pos += 3 + len(body)


def check_block_sizes(stored: bytes, fh: FrameHeader) -> str | None:
    """[ZR-COD-013] Every block of the frame within Block_Maximum_Size, min(Window_Size,
    128 KiB) (RFC 8878 section 3.1.1.2.4): the Block_Size of a Raw or Compressed block and the
    repeat count of an RLE block. libzstd's one-shot decoder leaves Raw and RLE blocks unchecked,
    so the block headers are walked here; a walk that runs off the stored bytes stops, and the
    decoder then rejects the truncated frame. What a Compressed block decodes to is bounded by
    libzstd itself from 1.5.6 on (ZSTD_VERSION_FLOOR)."""
    block_max = min(fh.window_size, BLOCK_SIZE_BYTES_MAX)
    for block_type, block_size, _ in iter_blocks(stored, fh.size):
        if block_type != 3 and block_size > block_max:
            kind = ("raw", "RLE", "compressed")[block_type]
            return f"a {kind} block of {block_size} bytes, above Block_Maximum_Size {block_max}"
    return None


def check_sequences_headers(stored: bytes, fh: FrameHeader) -> str | None:
    """[ZR-COD-016] In every Compressed block, a Number_of_Sequences of 0 is the one byte 0 and
    the block's last byte, and otherwise the reserved bits (1-0) of Symbol_Compression_Modes
    are 0. libzstd releases up to 1.5.5 and from 1.5.6 on judge both differently, so they are
    read here from the block's bytes. A block whose sections do not fit in it is left to the
    decoder, which rejects it."""
    for block_type, _, body in iter_blocks(stored, fh.size):
        if block_type == 2:
            problem = sequences_header_problem(body)
            if problem is not None:
                return problem
    return None


def literals_section(block: bytes) -> tuple[int, int, int] | None:
    """(Literals_Block_Type, header size, section size) of a Compressed block's
    Literals_Section (RFC 8878 section 3.1.1.3.1.1): its header, then Regenerated_Size bytes
    (Raw), one byte (RLE) or Compressed_Size bytes; None if the header does not fit."""
    b0 = block[0]
    literals_type, size_format = b0 & 3, (b0 >> 2) & 3
    if literals_type < 2:
        header = (1, 2, 1, 3)[size_format]
        if len(block) < header:
            return None
        value = _u(block, 0, header)
        regenerated = value >> 3 if header == 1 else value >> 4
        return literals_type, header, header + (regenerated if literals_type == 0 else 1)
    header, bits = ((3, 10), (3, 10), (4, 14), (5, 18))[size_format]
    if len(block) < header:
        return None
    return literals_type, header, header + ((_u(block, 0, header) >> (4 + bits)) & ((1 << bits) - 1))


def sequences_header_problem(block: bytes) -> str | None:
    """What breaks [ZR-COD-016] in one Compressed block's Sequences_Section_Header, if anything."""
    literals = literals_section(block) if block else None
    if literals is None or literals[2] >= len(block):
        return None
    end = literals[2]
    byte0 = block[end]
    if byte0 == 0:
        return None if end + 1 == len(block) else "bytes follow a Number_of_Sequences of 0"
    width = 1 if byte0 < 128 else 2 if byte0 < 255 else 3
    if byte0 == 128 and end + 1 < len(block) and block[end + 1] == 0:
        return "a Number_of_Sequences of 0 is written in two bytes"
    if end + width < len(block) and block[end + width] & 3:
        return "the reserved bits of Symbol_Compression_Modes are not 0"
    return None


def window_size_max(logical_size: int) -> int:
    """[ZR-COD-008] The logical size rounded up to a power of two (0 rounds up to 1), and at
    least 2^27."""
    cap = WINDOW_SIZE_FLOOR
    while cap < logical_size:
        cap *= 2
    return cap


def _open_store_dir(path: str) -> int:
    """[ZR-GEN-005] The store path, links followed, opened as a directory: ENOENT is
    not_found, ENOTDIR (a file, a link to one, a path through a file) is not_published; any
    other failure is environmental ([ZR-GEN-009]) and raised as the OSError it is."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise FormatViolation("not_found", "ZR-GEN-005", f"nothing exists at {path}") from None
    except NotADirectoryError:
        raise FormatViolation("not_published", "ZR-GEN-005", f"{path} is not a directory") from None


def _store_file(dfd: int, path: str, name: str) -> bytes | None:
    """The bytes of store file `name` of the directory open as `dfd`; None if the directory
    has no entry of that name ([ZR-GEN-006]); a symbolic link or anything but a regular file is
    corrupt ([ZR-GEN-004]). Any other failure of the system is environmental ([ZR-GEN-009]):
    it propagates as an OSError, never as a FormatViolation."""
    try:
        st = os.lstat(name, dir_fd=dfd)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise FormatViolation("corrupt", "ZR-GEN-004", f"{path}/{name} is a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        raise FormatViolation("corrupt", "ZR-GEN-004", f"{path}/{name} is not a regular file")
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    if len(data) != st.st_size:
        # [ZR-GEN-009] A file that changed size while it was read is corrupt, not environmental.
        raise FormatViolation("corrupt", "ZR-GEN-009", f"{path}/{name} changed size while it was read")
    return data


def decode_header(h: bytes) -> dict:
    """Validates header.zrh on its own (spec section 3), in the order of spec section 9.2, and
    returns its fields. The steps of 9.2 are checked by the functions below, one group each,
    called in the order of their steps."""
    major, minor = _check_version(h)
    header_size = _check_header_bytes(h)
    dtype, itemsize = _check_codes(h)
    # 2.9: reserved bytes; with index_parts, bytes 93 and 94 are the shifts ([ZR-PRT-007]).
    has_parts = bool(_u(h, 80, 8) & FEATURE_INDEX_PARTS)
    if any(h[21:24]) or any(h[95 if has_parts else 93 : 128]):
        raise _corrupt_header("ZR-HDR-005", "non-zero reserved bytes")
    kind, ndim, codec, data_shards = KINDS[h[16]], h[18], CODECS[h[19]], h[20]
    item_shape, shard_sizes, parts, dictionary = _check_variable_part(
        h, kind, ndim, data_shards, header_size, has_parts
    )
    stored_bytes, record_count, entry_size, index_size = _check_related_fields(
        h, kind, ndim, item_shape, itemsize, shard_sizes
    )
    dict_id = _check_dictionary_fields(h, codec, dictionary)
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
        "dict_id": dict_id,
        "parts": parts,
    }


def _corrupt_header(rule: str, why: str) -> FormatViolation:
    return FormatViolation("corrupt", rule, f"header.zrh: {why}")


def _check_version(h: bytes) -> tuple[int, int]:
    """Steps 2.1 to 2.3: the magic, a version to read, the major version. Returns the format
    version (major, minor)."""
    if len(h) < 8 or h[:8] != MAGIC:
        raise FormatViolation("bad_magic", "ZR-HDR-001", "header.zrh does not start with the magic")
    if len(h) < 12:
        raise _corrupt_header("ZR-ERR-002", f"{len(h)} bytes, too short to hold the format version")
    major, minor = _u(h, 8, 2), _u(h, 10, 2)
    if major != FORMAT_MAJOR:
        rule = "ZR-HDR-016" if major == 0 else "ZR-HDR-002"
        raise FormatViolation("unsupported_version", rule, f"format {major}.{minor}; this reader implements major 1")
    return major, minor


def _check_header_bytes(h: bytes) -> int:
    """Steps 2.4 and 2.5: the file's size, then its checksum. Returns header_size."""
    if len(h) < HEADER_FIXED_BYTES + 8:
        raise _corrupt_header("ZR-HDR-003", f"{len(h)} bytes, shorter than fixed part and checksum")
    if len(h) > HEADER_SIZE_BYTES_MAX:
        raise _corrupt_header("ZR-HDR-022", f"{len(h)} bytes, more than the largest valid header")
    header_size = _u(h, 12, 4)
    if header_size != len(h) or header_size % 8 != 0:
        raise _corrupt_header("ZR-HDR-003", f"header_size {header_size}, file has {len(h)} bytes")
    if xxh64(h[:-8]) != _u(h, len(h) - 8, 8):
        raise FormatViolation("checksum", "ZR-HDR-004", "header checksum mismatch")
    return header_size


def _check_codes(h: bytes) -> tuple[np.dtype, int]:
    """Steps 2.6 to 2.8: whether this reader can read the store at all (the required features,
    then the kind, dtype and codec codes, then the dtype's parameters). Returns the dtype and
    its item size."""
    features = _u(h, 80, 8)
    if features & ~REQUIRED_FEATURES_KNOWN:
        raise FormatViolation("unsupported", "ZR-HDR-017", f"required_features 0x{features:x}")
    kind_code, dtype_code, codec_code = h[16], h[17], h[19]
    if kind_code not in KINDS:
        raise FormatViolation("unsupported", "ZR-HDR-006", f"unknown kind {kind_code}")
    if dtype_code not in DTYPES and dtype_code not in PARAMETRIC:
        raise FormatViolation("unsupported", "ZR-HDR-006", f"unknown dtype {dtype_code}")
    if codec_code not in CODECS:
        raise FormatViolation("unsupported", "ZR-COD-003", f"unknown codec {codec_code}")
    length, unit = _u(h, 88, 4), h[92]
    itemsize = _check_dtype_params(dtype_code, length, unit)
    dtype = dtype_of(dtype_code, length, unit)
    assert dtype.itemsize == itemsize
    return dtype, itemsize


def _check_part_shifts(h: bytes) -> tuple[int, int, int, int]:
    """Step 2.10a, index_parts only: the block shift, then the group shift ([ZR-PRT-002]), then
    the number of sum groups ([ZR-PRT-003]). Returns the two shifts and the numbers of index
    blocks and sum groups."""
    block_shift, group_shift = h[93], h[94]
    if block_shift > INDEX_BLOCK_SHIFT_MAX:
        raise FormatViolation(
            "limit", "ZR-PRT-002", f"index_block_shift {block_shift}, above index_block_shift_max {INDEX_BLOCK_SHIFT_MAX}"
        )
    if group_shift > INDEX_GROUP_SHIFT_MAX:
        raise FormatViolation(
            "limit", "ZR-PRT-002", f"index_group_shift {group_shift}, above index_group_shift_max {INDEX_GROUP_SHIFT_MAX}"
        )
    record_count = _u(h, 24, 8)
    blocks = blocks_of(record_count, block_shift)
    groups = blocks_of(blocks, group_shift)
    if groups > INDEX_GROUPS_MAX:
        raise FormatViolation(
            "limit",
            "ZR-PRT-003",
            f"{record_count} records in index blocks of 2^{block_shift} and sum groups of 2^{group_shift} "
            f"make {groups} sum groups, above index_groups_max {INDEX_GROUPS_MAX}",
        )
    return block_shift, group_shift, blocks, groups


def _check_variable_part(
    h: bytes, kind: str, ndim: int, data_shards: int, header_size: int, has_parts: bool
) -> tuple[tuple[int, ...], list[int], Parts | None, bytes]:
    """Steps 2.10 to 2.12: the schema's limits, the index parts' shifts and count, the header's
    exact size, the padding. Returns the variable part's fields: item_shape (empty for Ragged),
    shard_sizes, the index parts (None without index_parts) and the dictionary."""
    if data_shards < DATA_SHARDS_MIN:
        raise FormatViolation("limit", "ZR-HDR-007", "data_shards 0, below data_shards_min 1")
    if ndim > NDIM_MAX:
        raise FormatViolation("limit", "ZR-HDR-008", f"ndim {ndim}, above ndim_max {NDIM_MAX}")
    if kind == "ragged" and ndim == 0:
        raise _corrupt_header("ZR-HDR-008", "a Ragged store with ndim 0")
    dict_size = _u(h, 52, 4)
    if dict_size > DICT_SIZE_BYTES_MAX:
        raise FormatViolation("limit", "ZR-HDR-013", f"dict_size {dict_size}, above the limit")
    block_shift, group_shift, blocks, groups = _check_part_shifts(h) if has_parts else (0, 0, 0, 0)
    shape_axes = ndim if kind == "dense" else 0
    variable = 8 * shape_axes + 8 * data_shards + 8 * groups + dict_size
    want_size = (HEADER_FIXED_BYTES + variable + 7) // 8 * 8 + 8
    if header_size != want_size:
        raise _corrupt_header("ZR-HDR-003", f"header_size {header_size}, the variable part needs {want_size}")
    pos = HEADER_FIXED_BYTES
    item_shape = tuple(_u(h, pos + 8 * k, 8) for k in range(shape_axes))
    pos += 8 * shape_axes
    shard_sizes = [_u(h, pos + 8 * k, 8) for k in range(data_shards)]
    pos += 8 * data_shards
    group_sums = [_u(h, pos + 8 * t, 8) for t in range(groups)]
    pos += 8 * groups
    dictionary = h[pos : pos + dict_size]
    pos += dict_size
    if any(h[pos : len(h) - 8]):
        raise _corrupt_header("ZR-HDR-005", "non-zero padding")
    parts = Parts(block_shift, group_shift, blocks, group_sums) if has_parts else None
    return item_shape, shard_sizes, parts, dictionary


def _check_related_fields(
    h: bytes, kind: str, ndim: int, item_shape: tuple[int, ...], itemsize: int, shard_sizes: list[int]
) -> tuple[int, int, int, int]:
    """Steps 2.13 to 2.17: the fields that relate to each other. Returns stored_bytes,
    record_count, index_entry_size and index_size."""
    if kind == "dense" and 0 not in item_shape:
        if _product(list(item_shape)) * itemsize > RECORD_SIZE_BYTES_MAX:
            raise FormatViolation("limit", "ZR-HDR-009", "Dense record size above record_size_bytes_max")
    if kind == "dense" and _extent(item_shape, itemsize) > EXTENT_BYTES_MAX:
        raise FormatViolation("limit", "ZR-HDR-021", "item_shape's non-zero axes exceed extent_bytes_max")
    stored_bytes = _u(h, 40, 8)
    if sum(shard_sizes) != stored_bytes:
        raise _corrupt_header("ZR-HDR-010", "stored_bytes is not the sum of shard_sizes")
    record_count = _u(h, 24, 8)
    if record_count > RECORD_COUNT_MAX:
        raise FormatViolation("limit", "ZR-HDR-014", f"record_count {record_count} above record_count_max")
    entry_size = _u(h, 48, 4)
    if entry_size != index_entry_size(kind, ndim):
        raise _corrupt_header("ZR-HDR-012", f"index_entry_size {entry_size}")
    index_size = _u(h, 56, 8)
    if index_size != record_count * entry_size:
        raise _corrupt_header("ZR-HDR-011", "index_size is not record_count * index_entry_size")
    return stored_bytes, record_count, entry_size, index_size


def _check_dictionary_fields(h: bytes, codec: str, dictionary: bytes) -> int:
    """Steps 2.18 to 2.20: the dictionary, its checksum and, for a zstd-format dictionary, its
    format (spec section 6.3). Returns its Dictionary_ID, or 0 for raw content or none."""
    dict_size = len(dictionary)
    if codec == "zstd_dict" and dict_size == 0:
        raise _corrupt_header("ZR-HDR-013", "codec zstd_dict without a dictionary")
    if codec != "zstd_dict" and dict_size != 0:
        raise _corrupt_header("ZR-HDR-013", f"a dictionary with codec {codec}")
    want_dict_sum = xxh64(dictionary) if dict_size else 0
    if _u(h, 72, 8) != want_dict_sum:
        rule = "ZR-HDR-013" if dict_size else "ZR-HDR-023"
        raise FormatViolation("checksum", rule, "dict_checksum mismatch")
    dict_id = 0
    if codec == "zstd_dict":
        problem = check_dictionary(bytes(dictionary))
        if problem is not None:
            raise _corrupt_header(problem.rule, f"the zstd-format dictionary is malformed: {problem.what}")
        if len(dictionary) >= 8 and dictionary[:4] == b"\x37\xa4\x30\xec":
            dict_id = _u(dictionary, 4, 4)
    return dict_id


def _check_dtype_params(code: int, length: int, unit: int) -> int:
    """[ZR-HDR-019] [ZR-HDR-020] The dtype's parameters; returns its item size."""
    if code in DTYPES:
        if length or unit:
            raise FormatViolation("corrupt", "ZR-HDR-019", f"dtype {code} with non-zero dtype_length or dtype_unit")
        return DTYPES[code].itemsize
    kind = PARAMETRIC[code][1]
    if kind in "Mm":
        if unit not in UNITS:
            raise FormatViolation("unsupported", "ZR-HDR-019", f"unknown datetime unit {unit}")
        if not 1 <= length <= UNIT_COUNT_MAX:
            raise FormatViolation("corrupt", "ZR-HDR-019", f"unit count {length}")
        return 8
    if unit:
        raise FormatViolation("corrupt", "ZR-HDR-019", f"dtype_unit {unit} with dtype {code}")
    if length == 0:
        raise FormatViolation("corrupt", "ZR-HDR-019", "dtype_length 0")
    itemsize = 4 * length if kind == "U" else length
    if itemsize > ITEMSIZE_BYTES_MAX:
        raise FormatViolation("limit", "ZR-HDR-020", f"item size {itemsize} above itemsize_bytes_max")
    return itemsize


def open_store(path: str | os.PathLike[str], *, by_part: bool = False) -> Store:
    """Validates everything the spec lets a reader check without record data (spec section 9).
    With `by_part`, the index of a store with index parts is left to be judged block by block as
    records are read (spec section 9.6); a store without them is judged whole either way."""
    path = os.fspath(path)
    # Step 1: the store path ([ZR-GEN-005]), then header.zrh ([ZR-PUB-004], [ZR-GEN-004]).
    dfd = _open_store_dir(path)
    try:
        return _open_in(dfd, path, by_part)
    finally:
        os.close(dfd)


def _open_in(dfd: int, path: str, by_part: bool) -> Store:
    """open_store's steps 1 (header.zrh) to 6 on the store directory open as `dfd`."""
    header = _store_file(dfd, path, "header.zrh")
    if header is None:
        raise FormatViolation("not_published", "ZR-PUB-004", f"{path} has no header.zrh")
    # Step 2: the header on its own.
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
                "dict_id",
                "shard_sizes",
                "index_checksum",
                "parts",
            )
        },
        entry_size=f["entry_size"],
    )
    # Step 3: the shard files, in shard order.
    for k, want in enumerate(f["shard_sizes"]):
        data = _store_file(dfd, path, f"data-{k:03d}.zrd")
        if data is None:
            raise FormatViolation("corrupt", "ZR-GEN-006", f"shard file data-{k:03d}.zrd missing")
        if len(data) != want:
            raise FormatViolation(
                "corrupt", "ZR-HDR-010", f"data-{k:03d}.zrd has {len(data)} bytes, shard_sizes says {want}"
            )
        store.shards.append(data)
    # Step 4: the index file, then (index parts) the block sums' file.
    index = _store_file(dfd, path, "index.zri")
    if index is None:
        raise FormatViolation("corrupt", "ZR-GEN-006", "index.zri missing")
    if len(index) != f["index_size"]:
        raise FormatViolation(
            "corrupt", "ZR-HDR-011", f"index.zri has {len(index)} bytes, index_size says {f['index_size']}"
        )
    store.index = index
    if store.parts is not None:
        store.parts.block_sums = _block_sums_file(dfd, path, store.parts)
    # The whole index's checksum, step 5 for every entry and step 6; a store with index parts read
    # by part leaves them to each block's first read and to verify (spec section 9.6).
    if store.parts is None or not by_part:
        store.judge_whole_index()
    return store


def _block_sums_file(dfd: int, path: str, parts: Parts) -> bytes:
    """Step 4, index parts: index.zrs present, a regular file ([ZR-GEN-004], [ZR-GEN-006]) and
    exactly 8 bytes per index block long ([ZR-PRT-001])."""
    sums = _store_file(dfd, path, "index.zrs")
    if sums is None:
        raise FormatViolation("corrupt", "ZR-GEN-006", "index.zrs missing")
    if len(sums) != 8 * parts.blocks:
        raise FormatViolation(
            "corrupt",
            "ZR-PRT-001",
            f"index.zrs has {len(sums)} bytes; {parts.blocks} index blocks need {8 * parts.blocks}",
        )
    return sums


def _check_index_sums(store: Store, entries: list[Entry]) -> None:
    """Step 6: the sums over the whole index, [ZR-DAT-001] for each shard, then [ZR-HDR-015]."""
    shard_sums = [0] * store.data_shards
    for e in entries:
        shard_sums[e.shard] += e.stored_size
    for k, total in enumerate(shard_sums):
        if total != store.shard_sizes[k]:
            raise FormatViolation(
                "corrupt",
                "ZR-DAT-001",
                f"records of data-{k:03d}.zrd add up to {total} bytes, the file has {store.shard_sizes[k]}",
            )
    logical_sum = sum(e.logical_size for e in entries)
    if logical_sum != store.logical_bytes:
        raise FormatViolation(
            "corrupt",
            "ZR-HDR-015",
            f"records add up to {logical_sum} logical bytes, logical_bytes says {store.logical_bytes}",
        )


def _decode_entry(store: Store, b: bytes, i: int) -> Entry:
    """Checks one index entry in isolation (spec section 4), in the order of spec section 9.3."""

    where = f"index entry {i}"
    if store.parts is not None:
        where += f" (index block {i >> store.parts.block_shift})"

    def corrupt(rule: str, why: str) -> FormatViolation:
        return FormatViolation("corrupt", rule, f"{where}: {why}")

    offset, stored_size, shard, checksum = _u(b, 0, 8), _u(b, 8, 4), b[12], _u(b, 16, 8)
    if shard >= store.data_shards:
        raise corrupt("ZR-IDX-001", f"shard {shard} of {store.data_shards}")
    if any(b[13:16]):
        raise corrupt("ZR-IDX-003", "non-zero reserved bytes")
    if offset + stored_size > len(store.shards[shard]):
        raise corrupt("ZR-IDX-002", f"bytes {offset}+{stored_size} past the end of the shard")
    itemsize = store.dtype.itemsize
    if store.kind == "dense":
        shape = store.item_shape
    else:
        shape = tuple(_u(b, 24 + 4 * k, 4) for k in range(store.ndim))
        if 0 not in shape and _product(list(shape)) * itemsize > RECORD_SIZE_BYTES_MAX:
            raise FormatViolation("limit", "ZR-IDX-004", f"{where}: shape {shape} exceeds record_size_bytes_max")
        if _extent(shape, itemsize) > EXTENT_BYTES_MAX:
            raise FormatViolation("limit", "ZR-IDX-007", f"{where}: shape {shape} exceeds extent_bytes_max")
        if any(b[24 + 4 * store.ndim :]):
            raise corrupt("ZR-IDX-003", "non-zero padding")
    logical = _product(list(shape)) * itemsize
    if store.codec == "raw" and stored_size != logical:
        raise corrupt("ZR-IDX-004", f"raw stored_size {stored_size}, logical size {logical}")
    return Entry(offset, stored_size, shard, checksum, shape, logical)


def read_store(path: str | os.PathLike[str], *, by_part: bool = False) -> list[np.ndarray]:
    """Opens the store and returns every record, checking everything a reader must."""
    return open_store(path, by_part=by_part).read_all()


__all__ = [
    "DictionaryProblem",
    "ERROR_CODES",
    "ERROR_CODES_1_1",
    "FormatViolation",
    "Parts",
    "Store",
    "open_store",
    "read_store",
]
