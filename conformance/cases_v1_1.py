"""The conformance cases of format 1.1 (conformance/v1.1/), appended to those of 1.0.

Each case cites the requirement IDs of spec/format-v1.md it exercises or breaks; most are new
in 1.1 (the dtypes of section 3.3, the feature bits, the check order of section 9, the frame
and dictionary rules of sections 6.2 and 6.3, the store path and file types). Like 1.0's, they
are data from two writers: the zrecord package and the reference writer; invalid stores are
built by the reference writer and then altered.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from reference import dictionary as refdict
from reference import reader as ref
from reference import writer as rw

# ---- record contents ------------------------------------------------------------------------


def pattern_bytes(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """A record of `shape` whose bytes are an arithmetic pattern (every byte value occurs)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = np.array([(k * 167 + seed * 59 + 11) % 256 for k in range(n)], dtype=np.uint8)
    return raw.view(dt).reshape(shape).copy() if n else np.zeros(shape, dt)


def datetimes(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """datetime64/timedelta64 values with NaT, the extremes and ordinary ticks."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    ticks = [(k * 2654435761 + seed * 40503) % 2**40 - 2**39 for k in range(n)]
    specials = [-(2**63), -(2**63) + 1, 2**63 - 1, 0]  # NaT, the smallest, the largest, the epoch
    if seed == 0:
        ticks[: min(n, 4)] = specials[: min(n, 4)]
    return np.array(ticks, dtype="<i8").view(dt).reshape(shape)


def strings(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """U<n> values: text, an empty string, and (seed 0) code units that are not Unicode scalar
    values (a surrogate, one above U+10FFFF), which the format stores unchanged ([ZR-GEN-008])."""
    dt = np.dtype(dtype)
    chars = dt.itemsize // 4
    n = int(np.prod(shape, dtype=np.int64))
    units = np.array([(0x41 + (k * 7 + seed) % 26) if (k % 5) else 0x3B1 + seed for k in range(n * chars)],
                     dtype="<u4")
    if n:
        units[:chars] = 0  # the empty string
    if seed == 0 and n >= 2:
        units[chars] = 0xD800
        units[chars + chars - 1] = 0x110000
    return units.view(dt).reshape(shape)


def values_of(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    kind = np.dtype(dtype).kind
    if kind in "Mm":
        return datetimes(dtype, shape, seed)
    if kind == "U":
        return strings(dtype, shape, seed)
    return pattern_bytes(dtype, shape, seed)


# ---- hand-built zstd dictionaries and frames -----------------------------------------------


class _Bits:
    def __init__(self) -> None:
        self.bits: list[int] = []

    def write(self, n: int, value: int) -> None:
        self.bits += [(value >> k) & 1 for k in range(n)]

    def bytes(self) -> bytes:
        out = bytearray((len(self.bits) + 7) // 8)
        for k, b in enumerate(self.bits):
            out[k // 8] |= b << (k % 8)
        return bytes(out)


def fse_description(log: int, probs: list[int]) -> bytes:
    """An FSE table description (RFC 8878 section 4.1.1) of `probs` at accuracy log `log`: the
    inverse of the reading algorithm of spec section 6.3 (zero runs as repeat flags)."""
    w = _Bits()
    w.write(4, log - 5)
    remaining, threshold, nbits = (1 << log) + 1, 1 << log, log + 1
    k = 0
    while remaining > 1:
        prob = probs[k]
        k += 1
        value = prob + 1
        largest = 2 * threshold - 1 - remaining
        if value < largest:
            w.write(nbits - 1, value)
        elif value < threshold:
            w.write(nbits, value)
        else:
            w.write(nbits, value + largest)
        remaining -= abs(prob)
        if prob == 0:
            zeros = 0
            while k < len(probs) and probs[k] == 0:
                zeros += 1
                k += 1
            while zeros >= 3:
                w.write(2, 3)
                zeros -= 3
            w.write(2, zeros)
        while 1 < remaining < threshold:
            nbits -= 1
            threshold >>= 1
    assert k == len(probs), (k, probs)
    return w.bytes()


FLAT_TABLE = fse_description(5, [32])  # one symbol holding every state


def zstd_dictionary(
    *,
    dict_id: int = 7,
    huffman: bytes = bytes([129, 0x11]),
    offsets: bytes = FLAT_TABLE,
    match_lengths: bytes = FLAT_TABLE,
    literal_lengths: bytes = FLAT_TABLE,
    reps: tuple[int, int, int] = (1, 4, 8),
    content: bytes = b"0123456789abcdef" * 4,
) -> bytes:
    """A zstd-format dictionary (RFC 8878 section 5) from its parts; by default a well-formed
    one: two direct Huffman weights of 1 (the implied third is 2), flat one-symbol FSE tables,
    repeat offsets 1, 4, 8 and 64 bytes of content."""
    return (
        refdict.DICTIONARY_MAGIC
        + dict_id.to_bytes(4, "little")
        + huffman
        + offsets
        + match_lengths
        + literal_lengths
        + b"".join(r.to_bytes(4, "little") for r in reps)
        + content
    )


def frame(payload: bytes, *, window_descriptor: int | None = None, dict_id: int | None = None,
          fhd_extra: int = 0, magic: bytes = b"\x28\xb5\x2f\xfd") -> bytes:
    """One zstd frame of one raw block holding `payload` (at most 128 KiB), content size in 4
    bytes; with a window descriptor unless `window_descriptor` is None (single segment); naming
    dictionary `dict_id` in 4 bytes if given."""
    single = window_descriptor is None
    fhd = (2 << 6) | (0x20 if single else 0) | (3 if dict_id is not None else 0) | fhd_extra
    out = bytearray(magic + bytes([fhd]))
    if not single:
        out.append(window_descriptor)
    if dict_id is not None:
        out += dict_id.to_bytes(4, "little")
    out += len(payload).to_bytes(4, "little")
    out += (1 | (len(payload) << 3)).to_bytes(3, "little")
    out += payload
    return bytes(out)


# ---- the cases -------------------------------------------------------------------------------

NEW_DTYPES = ["<M8[ns]", "<m8[s]", "|S3", "<U2", "|V4"]


# Case names are lower case: "M" (months) and "m" (minutes) need words.
UNIT_WORDS = {"Y": "years", "M": "months", "W": "weeks", "D": "days", "h": "hours", "m": "minutes",
              "s": "seconds", "ms": "ms", "us": "us", "ns": "ns", "ps": "ps", "fs": "fs", "as": "as"}


def cases(g: Any, gen: Any) -> None:
    """Appends every case of format 1.1 to generator `g`; `gen` is generate.py's module."""
    _dtype_cases(g, gen)
    _header_cases(g, gen)
    _index_cases(g, gen)
    _dictionary_cases(g, gen)
    _frame_cases(g, gen)
    _path_cases(g, gen)
    _settled_cases(g, gen)
    _block_size_cases(g, gen)
    _zstd_layer_cases(g, gen)


def _dtype_cases(g: Any, gen: Any) -> None:
    """The dtypes of format 1.1 (spec section 3.3): valid stores of every new dtype and unit, then
    dtype parameters a reader must refuse."""
    _new_dtype_cases(g, gen)
    _datetime_unit_cases(g, gen)
    _dtype_length_cases(g, gen)
    _any_bytes_cases(g, gen)
    _format_minor_cases(g, gen)
    _minimal_store_case(g, gen)
    _invalid_dtype_parameter_cases(g, gen)
    _invalid_dtype_size_cases(g, gen)


def _new_dtype_cases(g: Any, gen: Any) -> None:
    """Every dtype new in 1.1, Dense and Ragged, raw and zstd, written by zrecord."""
    for descr in NEW_DTYPES:
        dt = np.dtype(descr)
        tag = {"M": "datetime64_ns", "m": "timedelta64_s", "S": "bytes_s3", "U": "str_u2", "V": "void_v4"}[dt.kind]
        for codec in ("raw", "zstd"):
            recs = [values_of(descr, (2, 3), s) for s in range(3)]
            g.valid(
                f"dense_{tag}_{codec}",
                writer="zrecord",
                spec=["ZR-HDR-019", "ZR-HDR-018", "ZR-GEN-008", "ZR-GEN-003"],
                description=f"Dense {codec} store of dtype {dt.str}, item_shape (2, 3), written by "
                "zrecord" + (" (NaT and the extreme ticks included)" if dt.kind in "Mm" else "")
                + (" (code units that are not Unicode scalar values included)" if dt.kind == "U" else ""),
                records=recs,
                make=gen.zrecord_writer("dense", dt, recs, item_shape=(2, 3), codec=codec),
            )
            recs = [values_of(descr, (n,), s) for s, n in enumerate([3, 0, 5, 1])]
            g.valid(
                f"ragged_{tag}_{codec}",
                writer="zrecord",
                spec=["ZR-HDR-019", "ZR-IDX-004", "ZR-GEN-008"],
                description=f"Ragged {codec} store of dtype {dt.str}, rank 1, one empty record, written by zrecord",
                records=recs,
                make=gen.zrecord_writer("ragged", dt, recs, ndim=1, codec=codec, data_shards=2),
            )


def _datetime_unit_cases(g: Any, gen: Any) -> None:
    """Every datetime unit, with counts, from the reference writer."""
    units = ["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as"]
    for k, unit in enumerate(units):
        kind = "M" if k % 2 == 0 else "m"
        count = (1, 5, 1000)[k % 3]
        descr = f"<{kind}8[{'' if count == 1 else count}{unit}]"
        recs = [values_of(descr, (n, 2), s) for s, n in enumerate([2, 1, 0])]
        g.valid(
            f"ragged_{'datetime' if kind == 'M' else 'timedelta'}64_{count}_{UNIT_WORDS[unit]}_reference",
            writer="reference",
            spec=["ZR-HDR-019", "ZR-GEN-008"],
            description=f"Ragged raw store of dtype {descr} (unit code {k + 1}, count {count}), rank 2, "
            "written by the reference writer",
            records=recs,
            make=gen.reference_writer(kind="ragged", dtype=descr, ndim=2, records=recs, data_shards=2),
        )


def _dtype_length_cases(g: Any, gen: Any) -> None:
    """Bytes, str and void dtypes of the smallest and of larger dtype_lengths, from the reference
    writer."""
    for descr in ("|S1", "|S255", "<U1", "<U33", "|V1", "|V17"):
        dt = np.dtype(descr)
        recs = [values_of(descr, (n,), s) for s, n in enumerate([2, 0, 3])]
        g.valid(
            f"ragged_{dt.kind.lower()}{dt.itemsize // (4 if dt.kind == 'U' else 1)}_reference",
            writer="reference",
            spec=["ZR-HDR-019", "ZR-GEN-008"],
            description=f"Ragged raw store of dtype {descr} (dtype_length "
            f"{dt.itemsize // (4 if dt.kind == 'U' else 1)}), written by the reference writer",
            records=recs,
            make=gen.reference_writer(kind="ragged", dtype=descr, ndim=1, records=recs),
        )


def _any_bytes_cases(g: Any, gen: Any) -> None:
    """Bytes that are valid whatever they hold ([ZR-GEN-008]): bool bytes other than 0 and 1,
    and NaN payloads."""
    raw = np.array([0, 1, 2, 255, 128, 1, 0, 7], dtype=np.uint8)
    recs = [raw[:4].view(np.bool_).copy(), raw[4:].view(np.bool_).copy()]
    g.valid(
        "dense_bool_any_byte",
        writer="reference",
        spec=["ZR-GEN-008"],
        description="Dense bool records holding the bytes 0, 1, 2, 255, 128 and 7: a bool element "
        "is one byte, true unless 0, and readers return it unchanged",
        records=recs,
        make=gen.reference_writer(kind="dense", dtype="bool", item_shape=(4,), records=recs),
    )
    nans = np.array([0x7FC00001, 0x7F800001, 0xFFFFFFFF, 0x00000001], dtype="<u4").view("<f4")
    g.valid(
        "dense_float32_nan_payloads",
        writer="reference",
        spec=["ZR-GEN-008"],
        description="Dense float32 record of quiet and signalling NaNs with payloads and a "
        "subnormal: returned bit for bit",
        records=[nans.copy()],
        make=gen.reference_writer(kind="dense", dtype="<f4", item_shape=(4,), records=[nans.copy()]),
    )


def _format_minor_cases(g: Any, gen: Any) -> None:
    """format_minor is informational ([ZR-HDR-018]): a 1.1 dtype under minor 0, or minor 9."""
    recs = [values_of("<U2", (2,), s) for s in range(2)]
    g.valid(
        "str_dtype_under_minor_0",
        writer="reference",
        spec=["ZR-HDR-018"],
        description="a U2 store whose format_minor says 0: readers do not judge a store by its minor",
        records=recs,
        make=gen.reference_writer(kind="dense", dtype="<U2", item_shape=(2,), records=recs, format_minor=0),
    )
    recs = [values_of("|S3", (2,), s) for s in range(2)]
    g.valid(
        "bytes_dtype_under_minor_9",
        writer="reference",
        spec=["ZR-HDR-002", "ZR-HDR-018"],
        description="an S3 store of format 1.9 that uses nothing beyond 1.1: a reader accepts a "
        "greater minor whose codes and feature bits it knows",
        records=recs,
        make=gen.reference_writer(kind="dense", dtype="|S3", item_shape=(2,), records=recs, format_minor=9),
    )


def _minimal_store_case(g: Any, gen: Any) -> None:
    """The store of the hex dump of spec section 10."""
    recs = [np.array([1, 2, 3], dtype="<i2"), np.array([-2], dtype="<i2")]
    g.valid(
        "minimal_ragged_raw",
        writer="reference",
        spec=["ZR-GEN-001", "ZR-HDR-003", "ZR-IDX-002", "ZR-DAT-001"],
        description="the 2-record Ragged int16 raw store whose every byte spec section 10 labels",
        records=recs,
        make=gen.reference_writer(kind="ragged", dtype="<i2", ndim=1, records=recs),
    )


def _invalid_dtype_parameter_cases(g: Any, gen: Any) -> None:
    """Units, counts and dtype_lengths that a dtype code does not allow ([ZR-HDR-019]), each
    written into a valid store of that dtype."""
    base = {"kind": "dense", "item_shape": (2,), "data_shards": 1}

    def dtype_store(descr: str, **kw: Any) -> Any:
        recs = [values_of(descr, (2,), s) for s in range(2)]
        return gen.Files(rw.build_store(dtype=descr, records=recs, **{**base, **kw}))

    broken = [
        ("datetime_unit_0", "<M8[ns]", 92, 1, 0, "unsupported", "dtype datetime64 with unit code 0 (reserved: NumPy's generic unit)"),
        ("datetime_unit_14", "<M8[ns]", 92, 1, 14, "unsupported", "dtype datetime64 with unit code 14, beyond the 13 units"),
        ("timedelta_unit_255", "<m8[s]", 92, 1, 255, "unsupported", "dtype timedelta64 with unit code 255"),
        ("datetime_count_0", "<M8[ns]", 88, 4, 0, "corrupt", "dtype datetime64[ns] with a unit count of 0"),
        ("datetime_count_above_max", "<M8[ns]", 88, 4, 2**31, "corrupt", "dtype datetime64[ns] with a unit count of 2^31"),
        ("bytes_length_0", "|S3", 88, 4, 0, "corrupt", "dtype bytes (S) with dtype_length 0 (zero-itemsize)"),
        ("str_length_0", "<U2", 88, 4, 0, "corrupt", "dtype str (U) with dtype_length 0"),
        ("void_length_0", "|V4", 88, 4, 0, "corrupt", "dtype void (V) with dtype_length 0"),
        ("bytes_with_unit", "|S3", 92, 1, 10, "corrupt", "dtype bytes (S3) with a non-zero dtype_unit"),
        ("int32_with_dtype_length", "<i4", 88, 4, 4, "corrupt", "dtype int32 (a 1.0 dtype) with dtype_length 4"),
        ("float32_with_dtype_unit", "<f4", 92, 1, 10, "corrupt", "dtype float32 with dtype_unit 10"),
    ]
    for name, descr, off, size, value, error, what in broken:
        f = dtype_store(descr)
        g.invalid(
            name,
            error=error,
            phase="open",
            spec=["ZR-HDR-019", "ZR-ERR-003"],
            description=f"{what} (re-sealed)",
            files=f.hset(off, size, value).seal().done(),
        )


def _invalid_dtype_size_cases(g: Any, gen: Any) -> None:
    """Item sizes above itemsize_bytes_max ([ZR-HDR-020]), and the first dtype code 1.1 reserves."""
    for name, descr, length in (("str_itemsize_above_max", "<U2", 2**29), ("bytes_itemsize_above_max", "|S3", 2**31)):
        f = gen.Files(rw.build_store(kind="dense", dtype=descr, item_shape=(0,), records=[]))
        g.invalid(
            name,
            error="limit",
            phase="open",
            spec=["ZR-HDR-020", "ZR-LIM-001"],
            description=f"dtype {descr[1]} with dtype_length {length}: an item size above "
            "itemsize_bytes_max (2^31 - 1), in an empty store of item_shape (0,)",
            files=f.hset(88, 4, length).seal().done(),
        )
    f = gen.Files(rw.build_store(kind="dense", dtype="<i4", item_shape=(2,), records=[]))
    f.hset(17, 1, 20).seal()
    g.invalid(
        "dtype_unknown_20",
        error="unsupported",
        phase="open",
        spec=["ZR-HDR-006"],
        description="dtype code 20, the first reserved code of 1.1 (re-sealed)",
        files=f.done(),
    )


def _header_cases(g: Any, gen: Any) -> None:
    """The header rules 1.1 adds or settles: the version and feature bits, the order of the header
    checks (spec section 9), extents and record_count."""
    _version_and_feature_cases(g, gen)
    _header_check_order_cases(g, gen)
    _extent_cases(g, gen)
    _record_count_and_dict_checksum_cases(g, gen)


def _version_and_feature_cases(g: Any, gen: Any) -> None:
    """The version ([ZR-HDR-016]) and the required feature bits ([ZR-HDR-017]), which are judged
    before the rest of the header."""
    g.invalid(
        "header_10_bytes_major_2",
        error="corrupt",
        phase="open",
        spec=["ZR-ERR-002", "ZR-HDR-003"],
        description="header.zrh is the magic and format_major 2 (10 bytes): it holds the major but "
        "not the whole version (bytes 8 to 11), so it is corrupt, not unsupported_version",
        files={**gen.dense_base().done(), "header.zrh": rw.MAGIC + b"\x02\x00"},
    )
    g.invalid(
        "format_major_0",
        error="unsupported_version",
        phase="open",
        spec=["ZR-HDR-016", "ZR-HDR-002"],
        description="format_major 0 (re-sealed): no version of this format",
        files=gen.dense_base().hset(8, 2, 0).seal().done(),
    )
    for bit in (0, 63):
        g.invalid(
            f"required_feature_bit_{bit}",
            error="unsupported",
            phase="open",
            spec=["ZR-HDR-017"],
            description=f"required_features bit {bit}, which format 1.1 does not define (re-sealed)",
            files=gen.dense_base().hset(80, 8, 1 << bit).seal().done(),
        )
    f = gen.dense_base().hset(80, 8, 1 << 5).hset(100, 1, 1).hset(18, 1, 9).seal()
    g.invalid(
        "required_feature_with_reserved_and_sizes_broken",
        error="unsupported",
        phase="open",
        spec=["ZR-HDR-017", "ZR-ERR-003"],
        description="an unknown required feature (bit 5) beside a non-zero reserved1 byte and an "
        "ndim that does not match header_size: the feature bits are judged first",
        files=f.done(),
    )


def _header_check_order_cases(g: Any, gen: Any) -> None:
    """Codes are judged before the size rule and before reserved bytes ([ZR-ERR-003]); the first
    byte of 1.1's reserved1 ([ZR-HDR-005])."""
    f = gen.dense_base().hset(16, 1, 3).hset(18, 1, 7).seal()
    g.invalid(
        "kind_unknown_header_size_undefined",
        error="unsupported",
        phase="open",
        spec=["ZR-HDR-006", "ZR-ERR-003"],
        description="kind 3 with ndim 7: the size rule of ZR-HDR-003 is undefined for an unknown "
        "kind, and the codes are judged before it",
        files=f.done(),
    )
    f = gen.dense_base().hset(19, 1, 9).hset(22, 1, 1).seal()
    g.invalid(
        "codec_unknown_with_reserved0_set",
        error="unsupported",
        phase="open",
        spec=["ZR-COD-003", "ZR-ERR-003"],
        description="codec 9 and a non-zero reserved0 byte: codes before reserved bytes",
        files=f.done(),
    )
    g.invalid(
        "reserved1_first_byte",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-005"],
        description="byte 93, the first byte of 1.1's reserved1, set (re-sealed)",
        files=gen.dense_base().hset(93, 1, 1).seal().done(),
    )


def _extent_cases(g: Any, gen: Any) -> None:
    """Dense item shapes whose non-zero axes span more than extent_bytes_max ([ZR-HDR-021]), and
    one exactly at it."""
    g.invalid(
        "dense_extent_above_max",
        error="limit",
        phase="open",
        spec=["ZR-HDR-021", "ZR-LIM-001"],
        description="Dense uint8 item_shape (2^40, 2^40, 0): size 0, but no NumPy array has that "
        "shape (its non-zero axes multiply past extent_bytes_max)",
        files=gen.empty_dense(item_shape=(2**40, 2**40, 0)).done(),
    )
    g.invalid(
        "dense_extent_above_max_by_itemsize",
        error="limit",
        phase="open",
        spec=["ZR-HDR-021", "ZR-LIM-001"],
        description="Dense int16 item_shape (2^62, 0): 2^62 elements of 2 bytes span 2^63 bytes",
        files=gen.empty_dense(dtype="int16", item_shape=(2**62, 0)).done(),
    )
    g.valid(
        "dense_extent_at_max",
        writer="reference",
        spec=["ZR-HDR-021"],
        description="Dense uint8 item_shape (2^63 - 1, 0): exactly extent_bytes_max, a valid NumPy shape",
        records=[np.zeros((2**63 - 1, 0), np.uint8)],
        make=gen.reference_writer(kind="dense", dtype="uint8", item_shape=(2**63 - 1, 0),
                                  records=[np.zeros((2**63 - 1, 0), np.uint8)]),
    )


def _record_count_and_dict_checksum_cases(g: Any, gen: Any) -> None:
    """record_count's limit, judged before the index sizes that depend on it ([ZR-HDR-014],
    [ZR-ERR-003]), and a dict_checksum without a dictionary ([ZR-HDR-023])."""
    f = gen.Files(rw.build_store(kind="dense", dtype="uint8", item_shape=(4,), records=[]))
    f.hset(24, 8, 2**60).hset(56, 8, (2**60 * 24) % 2**64).seal()
    g.invalid(
        "record_count_2_60_index_size_wrapped",
        error="limit",
        phase="open",
        spec=["ZR-HDR-014", "ZR-ERR-003"],
        description="record_count 2^60 with index_size record_count x 24 wrapped around 64 bits: "
        "the record_count limit is checked before the product",
        files=f.done(),
    )
    f = gen.Files(rw.build_store(kind="dense", dtype="uint8", item_shape=(4,), records=[]))
    f.hset(24, 8, 2**48 + 1).hset(48, 4, 40).seal()
    g.invalid(
        "record_count_above_max_and_entry_size_wrong",
        error="limit",
        phase="open",
        spec=["ZR-HDR-014", "ZR-HDR-012", "ZR-ERR-003"],
        description="record_count 2^48 + 1 and index_entry_size 40: the limit comes first",
        files=f.done(),
    )
    g.invalid(
        "dict_checksum_without_dictionary",
        error="checksum",
        phase="open",
        spec=["ZR-HDR-023", "ZR-HDR-013"],
        description="codec raw, no dictionary, dict_checksum 5 (re-sealed)",
        files=gen.dense_base().hset(72, 8, 5).seal().done(),
    )


def duplicated_range(gen: Any) -> Any:
    """Four equal float32 (2, 3) records in one shard, record 1 naming record 0's bytes [0, 24):
    the sums add up, every record reads, and bytes [24, 48) lie under no checksum."""
    same = gen.pattern("float32", (2, 3), 0)
    return gen.dense_base(data_shards=1, records=[same] * 4).eset(1, 0, 8, 0)


def _index_cases(g: Any, gen: Any) -> None:
    """Index entries: Ragged extents ([ZR-IDX-007]), the order of the entry checks, and the layout
    of records in their shards ([ZR-IDX-008])."""
    _index_limit_cases(g, gen)
    _layout_cases(g, gen)


def _index_limit_cases(g: Any, gen: Any) -> None:
    """Ragged record extents ([ZR-IDX-007]) and the order of the index entry checks ([ZR-ERR-003])."""
    recs = [np.zeros((2**32 - 1, 2**31, 0), np.uint8), np.arange(2, dtype=np.uint8).reshape(1, 2, 1)]
    g.valid(
        "ragged_extent_at_limit",
        writer="reference",
        spec=["ZR-IDX-007"],
        description="Ragged uint8 record of shape (2^32 - 1, 2^31, 0): its non-zero axes span "
        "2^63 - 2^31 bytes, within extent_bytes_max",
        records=recs,
        make=gen.reference_writer(kind="ragged", dtype="uint8", ndim=3, records=recs),
    )
    f = gen.Files(rw.build(kind="ragged", dtype_code=3, ndim=3, codec_code=0, data_shards=1,
                           records=[rw.Stored((2**32 - 1, 2**32 - 1, 0), 0, b"")]))
    g.invalid(
        "ragged_extent_above_max",
        error="limit",
        phase="open",
        spec=["ZR-IDX-007", "ZR-LIM-001"],
        description="Ragged uint8 record of shape (2^32 - 1, 2^32 - 1, 0): empty, but no NumPy "
        "array has that shape",
        files=f.done(),
    )
    f = gen.Files(rw.build(kind="ragged", dtype_code=2, ndim=1, codec_code=0, data_shards=1,
                           records=[rw.Stored((2**31 + 1,), 0, b"")]))
    f.hset(32, 8, 0).seal()
    g.invalid(
        "raw_ragged_record_above_limit_and_size_mismatch",
        error="limit",
        phase="open",
        spec=["ZR-IDX-004", "ZR-ERR-003"],
        description="codec raw, one int8 record of shape (2^31 + 1,) stored in 0 bytes: it breaks "
        "the size limit and the raw size rule; the limit comes first",
        files=f.done(),
    )
    f = gen.dense_base()
    f.eset(2, 12, 1, 9).eset(2, 0, 8, 2**64 - 1).eset(2, 13, 1, 1)
    g.invalid(
        "entry_shard_out_of_range_first",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-001", "ZR-ERR-003"],
        description="record 2 names shard 9 of 2, a reserved byte and an offset of 2^64 - 1: the "
        "shard is judged first (the range rule needs it)",
        files=f.seal_index().done(),
    )


def _layout_cases(g: Any, gen: Any) -> None:
    """The layout of records in their shards ([ZR-IDX-006], [ZR-IDX-008]), found by a
    whole-store verification."""
    f = duplicated_range(gen)
    g.invalid(
        "ranges_duplicate_record",
        error="corrupt",
        phase="verify",
        spec=["ZR-IDX-008", "ZR-IDX-006", "ZR-ERR-004"],
        description="four equal records; record 1 names bytes [0, 24) of data-000.zrd, as record 0 "
        "does, so bytes [24, 48) lie under no checksum; the sums add up and every record reads",
        files=f.seal_index().done(),
    )
    periodic = np.tile(np.arange(12, dtype=np.uint8), 2)
    f = gen.dense_base(dtype="uint8", item_shape=(24,), data_shards=1, records=[periodic] * 4)
    f.eset(2, 0, 8, 12)
    g.invalid(
        "ranges_overlap_and_gap",
        error="corrupt",
        phase="verify",
        spec=["ZR-IDX-008", "ZR-IDX-006", "ZR-ERR-004"],
        description="four equal uint8 records of period 12; record 2's range starts at byte 12, "
        "half way into record 0's and record 1's, leaving bytes [48, 72) under no checksum; the "
        "sums add up and every record reads",
        files=f.seal_index().done(),
    )
    recs = [gen.pattern("int16", (n,), s) for s, n in enumerate([3, 0, 2])]
    files = gen.Files(rw.build_store(kind="ragged", dtype="int16", ndim=1, records=recs))
    files.eset(1, 0, 8, 2)
    g.valid(
        "empty_record_inside_another",
        writer="reference",
        spec=["ZR-IDX-006", "ZR-IDX-008"],
        description="the empty record 1 has its offset inside record 0's range: an empty range "
        "overlaps nothing",
        records=recs,
        make=lambda p: rw.write_files(p, files.seal_index().done()),
    )


def _dictionary_cases(g: Any, gen: Any) -> None:
    """Dictionaries of codec zstd_dict in the zstd dictionary format (spec section 6.3): valid
    hand-built ones, then ones that break a rule of that format."""
    _valid_dictionary_cases(g, gen)
    _broken_dictionary_cases(g, gen)
    _trained_dictionary_broken_case(g, gen)


def _dictionary_records(gen: Any) -> list[np.ndarray]:
    """The three 40-byte text records of the dictionary cases."""
    return [gen.text_record(k, 40) for k in range(3)]


def _u8_store(records: list[tuple[int, bytes]], codec: int, dictionary: bytes = b"") -> dict[str, bytes]:
    """A Ragged uint8 store of one shard whose records are `records`: (the logical size, the
    stored bytes) of each, of codec code `codec`, with `dictionary`."""
    return rw.build(
        kind="ragged", dtype_code=3, ndim=1, codec_code=codec, data_shards=1,
        records=[rw.Stored((size,), size, stored) for size, stored in records],
        dictionary=dictionary,
    )


def _dictionary_store(gen: Any, dictionary: bytes, stored: list[bytes] | None = None) -> dict[str, bytes]:
    """A Ragged uint8 zstd_dict store of the dictionary case records with `dictionary`, the
    records stored as `stored` (by default frames of raw blocks that name no dictionary)."""
    recs = _dictionary_records(gen)
    frames = stored if stored is not None else [rw.zstd_frame(bytes(r)) for r in recs]
    return _u8_store([(len(r), fr) for r, fr in zip(recs, frames)], 2, dictionary)


def _valid_dictionary_cases(g: Any, gen: Any) -> None:
    """Dictionaries a reader must accept: a hand-built zstd-format one with frames from libzstd,
    one whose repeat offsets reach the whole of its content ([ZR-COD-012]), and 7 bytes that
    start with the magic but are raw content ([ZR-COD-004])."""
    recs = _dictionary_records(gen)
    good = zstd_dictionary()
    assert refdict.check_dictionary(good) is None
    import zstandard

    zdict = zstandard.ZstdCompressionDict(good, dict_type=zstandard.DICT_TYPE_FULLDICT)
    comp = zstandard.ZstdCompressor(level=3, dict_data=zdict, write_content_size=True)
    g.valid(
        "zstd_dict_hand_built",
        writer="reference",
        spec=["ZR-COD-004", "ZR-COD-010", "ZR-COD-011", "ZR-COD-012", "ZR-COD-007"],
        description="a hand-built zstd-format dictionary (ID 7, two direct Huffman weights, "
        "one-symbol FSE tables, repeat offsets 1, 4, 8, 64 bytes of content), frames from "
        "libzstd with it",
        records=recs,
        make=lambda p: rw.write_files(p, _dictionary_store(gen, good, [comp.compress(bytes(r)) for r in recs])),
    )
    edge = zstd_dictionary(reps=(64, 64, 1))
    g.valid(
        "zstd_dict_repeat_offset_equal_to_content",
        writer="reference",
        spec=["ZR-COD-012"],
        description="a zstd-format dictionary whose repeat offsets 64, 64, 1 reach the whole of "
        "its 64 bytes of content (frames of raw blocks that name no dictionary)",
        records=recs,
        make=lambda p: rw.write_files(p, _dictionary_store(gen, edge)),
    )
    short = b"\x37\xa4\x30\xec\x01\x02\x03"
    g.valid(
        "zstd_dict_seven_byte_raw_content",
        writer="reference",
        spec=["ZR-COD-004"],
        description="a 7-byte dictionary that starts with the zstd dictionary magic: shorter than "
        "8 bytes, so raw content",
        records=recs,
        make=lambda p: rw.write_files(p, _dictionary_store(gen, short)),
    )


def _broken_dictionary_cases(g: Any, gen: Any) -> None:
    """Hand-built zstd-format dictionaries that each break one rule of spec section 6.3; the
    reference dictionary checker must name that rule."""
    broken = [
        ("dictionary_id_0", zstd_dictionary(dict_id=0), "ZR-COD-010", "Dictionary_ID 0"),
        ("dictionary_huffman_not_a_tree", zstd_dictionary(huffman=bytes([129, 0x22])),
         "ZR-COD-011", "Huffman weights 2 and 2: no weight-1 pair, not a tree"),
        ("dictionary_huffman_weight_above_12", zstd_dictionary(huffman=bytes([129, 0xD1])),
         "ZR-COD-011", "a Huffman weight of 13"),
        ("dictionary_offsets_log_above_8", zstd_dictionary(offsets=fse_description(9, [512])),
         "ZR-COD-011", "an offsets table of accuracy log 9 (at most 8)"),
        ("dictionary_literal_lengths_37_symbols",
         zstd_dictionary(literal_lengths=fse_description(6, [1] * 36 + [28])),
         "ZR-COD-011", "a literal lengths table with 37 symbols (at most 36: codes 0 to 35)"),
        ("dictionary_fse_truncated", zstd_dictionary(reps=(1, 4, 8), content=b"")[:13],
         "ZR-COD-011", "cut inside its match lengths table"),
        ("dictionary_magic_and_id_only", zstd_dictionary()[:8], "ZR-COD-011", "8 bytes: no entropy tables"),
        ("dictionary_repeat_offset_0", zstd_dictionary(reps=(1, 0, 8)), "ZR-COD-012", "a repeat offset of 0"),
        ("dictionary_repeat_offset_past_content", zstd_dictionary(reps=(1, 4, 65)),
         "ZR-COD-012", "a repeat offset of 65 with 64 bytes of content"),
        ("dictionary_truncated_before_repeat_offsets", zstd_dictionary(content=b"")[:-4],
         "ZR-COD-012", "cut inside its repeat offsets"),
    ]
    for name, dictionary, rule, what in broken:
        problem = refdict.check_dictionary(dictionary)
        assert problem is not None and problem.rule == rule, (name, problem)
        g.invalid(
            name,
            error="corrupt",
            phase="open",
            spec=[rule, "ZR-COD-004"],
            description=f"codec zstd_dict with a zstd-format dictionary with {what}",
            files=_dictionary_store(gen, dictionary),
        )


def _trained_dictionary_broken_case(g: Any, gen: Any) -> None:
    """A dictionary whose Huffman table is compressed by FSE: a trained dictionary, one bit of
    its weights' bitstream changed so that they no longer make a tree ([ZR-COD-011])."""
    trained = bytearray(gen.trained_dictionary())
    assert trained[8] < 128, "a trained dictionary's Huffman weights are FSE-compressed"
    for k in range(1, trained[8] + 1):
        candidate = bytearray(trained)
        candidate[8 + k] ^= 0x10
        problem = refdict.check_dictionary(bytes(candidate))
        if problem is not None and problem.rule == "ZR-COD-011":
            break
    else:
        raise AssertionError("no one-bit change breaks the trained dictionary's weights")
    g.invalid(
        "dictionary_trained_fse_weights_broken",
        error="corrupt",
        phase="open",
        spec=["ZR-COD-011", "ZR-COD-004"],
        description=f"a trained dictionary with bit 4 of byte {8 + k} flipped, inside its "
        "FSE-compressed Huffman weights",
        files=_dictionary_store(gen, bytes(candidate)),
    )


def _frame_cases(g: Any, gen: Any) -> None:
    """The frames of codecs zstd and zstd_dict (spec section 6.2): the window cap, the
    dictionary a frame names, and what is not exactly one zstd frame."""
    trained = gen.trained_dictionary()
    _valid_frame_cases(g, gen, trained)
    _broken_frame_cases(g, gen, trained)
    _skippable_frame_case(g)


def _frame_records(gen: Any) -> list[np.ndarray]:
    """The two 10-byte text records of the frame cases."""
    return [gen.text_record(k, 10) for k in range(2)]


def _frame_store(gen: Any, frames: list[bytes], codec: int = 1, dictionary: bytes = b"") -> dict[str, bytes]:
    """A Ragged uint8 store of the frame case records, stored as `frames`, of codec code `codec`."""
    recs = _frame_records(gen)
    return _u8_store([(len(r), fr) for r, fr in zip(recs, frames)], codec, dictionary)


def _valid_frame_cases(g: Any, gen: Any, trained: bytes) -> None:
    """A window exactly at the cap ([ZR-COD-008]), and zstd_dict frames that do not name the
    store's dictionary (`trained`) but are decoded with it ([ZR-COD-007])."""
    recs = _frame_records(gen)
    ok = rw.zstd_frame(bytes(recs[0]))
    g.valid(
        "zstd_window_at_cap",
        writer="reference",
        spec=["ZR-COD-008"],
        description="a 10-byte record whose frame declares a window of 2^27 (window descriptor "
        "0x88): exactly the cap",
        records=recs,
        make=lambda p: rw.write_files(p, _frame_store(gen, [ok, frame(bytes(recs[1]), window_descriptor=17 << 3)])),
    )
    import zstandard

    plain = zstandard.ZstdCompressor(
        level=3, write_content_size=True, write_dict_id=False,
        dict_data=zstandard.ZstdCompressionDict(trained))
    g.valid(
        "zstd_dict_frames_not_naming_it",
        writer="reference",
        spec=["ZR-COD-007"],
        description="codec zstd_dict with a trained dictionary whose frames leave out its "
        "Dictionary_ID: every frame is decoded with the store's dictionary",
        records=recs,
        make=lambda p: rw.write_files(p, _frame_store(gen, [plain.compress(bytes(r)) for r in recs], 2, trained)),
    )


def _broken_frame_cases(g: Any, gen: Any, trained: bytes) -> None:
    """Record 1 stored as a frame that breaks one rule of spec section 6.2, beside a valid
    record 0; `trained` is the dictionary of the zstd_dict store."""
    recs = _frame_records(gen)
    ok = rw.zstd_frame(bytes(recs[0]))
    dict_id = int.from_bytes(trained[4:8], "little")
    import zstandard

    bad = [
        ("zstd_window_above_cap", frame(bytes(recs[1]), window_descriptor=(17 << 3) | 1), 1, b"",
         "ZR-COD-008", "a 10-byte record whose frame declares a window of 2^27 + 2^24"),
        ("zstd_window_2_tib", frame(bytes(recs[1]), window_descriptor=31 << 3), 1, b"",
         "ZR-COD-008", "a 10-byte record whose frame declares a window of 2^41 (2 TiB)"),
        ("zstd_frame_reserved_bit", frame(bytes(recs[1]), fhd_extra=0x08), 1, b"",
         "ZR-COD-005", "a frame whose header descriptor sets the reserved bit 3"),
        ("zstd_frame_legacy_magic", frame(bytes(recs[1]), magic=b"\x27\xb5\x2f\xfd"), 1, b"",
         "ZR-COD-005", "a frame with the magic of the legacy format v0.7"),
        ("zstd_frame_no_content_size_window", b"\x28\xb5\x2f\xfd\x00\x00" + (1 | (10 << 3)).to_bytes(3, "little") + bytes(recs[1]),
         1, b"", "ZR-COD-006", "a frame with a window descriptor and no content size field"),
        ("zstd_frame_content_checksum_wrong",
         (lambda fr: fr[:-1] + bytes([fr[-1] ^ 0x40]))(zstandard.ZstdCompressor(write_checksum=True).compress(bytes(recs[1]))),
         1, b"", "ZR-COD-009", "a frame whose content checksum (zstd's own) is wrong"),
        ("zstd_dict_frame_names_other_dictionary",
         frame(bytes(recs[1]), dict_id=(dict_id + 1) % 2**32 or 1), 2, trained,
         "ZR-COD-007", "codec zstd_dict with a trained dictionary: record 1's frame names another Dictionary_ID"),
        ("zstd_frame_names_dictionary", frame(bytes(recs[1]), dict_id=dict_id), 1, b"",
         "ZR-COD-007", "codec zstd: record 1's frame names a dictionary, which a zstd store cannot supply"),
    ]
    for name, fr, codec, dictionary, rule, what in bad:
        g.invalid(
            name,
            error="decode",
            phase="read",
            spec=[rule, "ZR-IDX-005"],
            description=what,
            files=_frame_store(gen, [ok, fr], codec, dictionary),
        )


def _skippable_frame_case(g: Any) -> None:
    """An empty record stored as a skippable frame, which is not a zstd frame ([ZR-COD-005])."""
    skip = b"\x50\x2a\x4d\x18" + (0).to_bytes(4, "little")
    g.invalid(
        "zstd_skippable_frame_for_empty_record",
        error="decode",
        phase="read",
        spec=["ZR-COD-005", "ZR-IDX-005"],
        description="an empty record stored as an empty skippable frame: not a zstd frame",
        files=rw.build(kind="ragged", dtype_code=3, ndim=1, codec_code=1, data_shards=1,
                       records=[rw.Stored((0,), 0, skip)]),
    )


def _path_cases(g: Any, gen: Any) -> None:
    """The store path and the types of the store files (spec section 2)."""
    _store_path_cases(g, gen)
    _store_file_link_cases(g, gen)
    _store_file_directory_cases(g, gen)
    _ignored_entry_cases(g, gen)


def _store_path_cases(g: Any, gen: Any) -> None:
    """What lies at the store path itself: nothing, a dangling link, a file ([ZR-GEN-005])."""

    def nothing(store: Path) -> None:
        pass

    g.invalid(
        "store_path_missing",
        error="not_found",
        phase="open",
        spec=["ZR-GEN-005"],
        description="nothing exists at the store path",
        files=None,
        post=nothing,
    )
    g.invalid(
        "store_path_dangling_link",
        error="not_found",
        phase="open",
        spec=["ZR-GEN-005"],
        description="the store path is a symbolic link to nothing",
        files=None,
        post=lambda store: os.symlink("elsewhere", store),
    )
    g.invalid(
        "store_path_is_file",
        error="not_published",
        phase="open",
        spec=["ZR-GEN-005"],
        description="the store path is a regular file (a copy of a header.zrh)",
        files=None,
        post=lambda store: store.write_bytes(gen.dense_base().header),
    )


def _store_file_link_cases(g: Any, gen: Any) -> None:
    """Store files that are symbolic links ([ZR-GEN-004], [ZR-GEN-006])."""

    def relink(name: str, target: str) -> Any:
        def post(store: Path) -> None:
            if (store / name).exists():
                os.rename(store / name, store / target)
            os.symlink(target, store / name)

        return post

    links = [
        ("header_is_symlink", "header.zrh", "header.real", "header.zrh is a symbolic link to a valid header beside it"),
        ("header_dangling_symlink", "header.zrh", "gone", "header.zrh is a dangling symbolic link: present, not missing"),
        ("index_is_symlink", "index.zri", "index.real", "index.zri is a symbolic link to the valid index beside it"),
        ("shard_is_symlink", "data-001.zrd", "shard.real", "data-001.zrd is a symbolic link to the valid shard beside it"),
        ("shard_dangling_symlink", "data-001.zrd", "gone", "data-001.zrd is a dangling symbolic link"),
    ]
    for name, file, target, what in links:
        post = relink(file, target)
        if target == "gone":
            def post(store: Path, file: str = file) -> None:
                (store / file).unlink()
                os.symlink("gone", store / file)
        g.invalid(
            name,
            error="corrupt",
            phase="open",
            spec=["ZR-GEN-004", "ZR-GEN-006"],
            description=what,
            files=gen.dense_base().done(),
            post=post,
        )


def _store_file_directory_cases(g: Any, gen: Any) -> None:
    """Store files that are directories ([ZR-GEN-004], [ZR-GEN-006])."""

    def as_directory(name: str) -> Any:
        def post(store: Path) -> None:
            (store / name).unlink()
            (store / name).mkdir()
            (store / name / "README").write_text("a directory, not a store file\n")

        return post

    for name, file in (("header_is_directory", "header.zrh"), ("index_is_directory", "index.zri")):
        g.invalid(
            name,
            error="corrupt",
            phase="open",
            spec=["ZR-GEN-004", "ZR-GEN-006"],
            description=f"{file} is a directory (holding one file)",
            files=gen.dense_base().done(),
            post=as_directory(file),
        )


def _ignored_entry_cases(g: Any, gen: Any) -> None:
    """Valid stores beside entries that readers ignore ([ZR-GEN-007]), or behind a symbolic link
    ([ZR-GEN-005])."""
    recs = [gen.pattern("float32", (2, 3), s) for s in range(4)]
    files = gen.dense_base().done()

    def with_extras(store: Path) -> None:
        rw.write_files(store, files)
        (store / "notes.txt").write_text("not part of the store\n")
        (store / "data-002.zrd").write_bytes(b"a shard the header does not name")
        (store / ".hidden").mkdir()
        (store / ".hidden" / "x").write_text("x\n")
        os.symlink("notes.txt", store / "a-link")

    g.valid(
        "extra_entries_ignored",
        writer="reference",
        spec=["ZR-GEN-007"],
        description="a 2-shard store beside a text file, a data-002.zrd the header does not name, "
        "a directory and a symbolic link: readers ignore them",
        records=recs,
        make=with_extras,
    )

    def behind_link(store: Path) -> None:
        rw.write_files(store.parent / "real", files)
        os.symlink("real", store)

    g.valid(
        "store_path_is_symlink",
        writer="reference",
        spec=["ZR-GEN-004", "ZR-GEN-005"],
        description="the store path is a symbolic link to the store directory beside it: followed",
        records=recs,
        make=behind_link,
    )


# ---- choices an independent reader found open, settled ([H2]) -------------------------------


def sequence_block(literals: bytes, offset: int, match_length: int) -> bytes:
    """A last Compressed block (RFC 8878 section 3.1.1.3) of one sequence: `literals` as raw
    literals, then a match of `match_length` (3 to 34) bytes from `offset` (at least 1) bytes
    back. The three symbol types use RLE_Mode, whose tables read no state bits, so the
    bitstream holds only the offset's extra bits under its end mark."""
    assert len(literals) < 32 and 3 <= match_length <= 34 and offset >= 1
    offset_value = offset + 3  # values 1 to 3 are repeat codes
    offset_code = offset_value.bit_length() - 1
    bits = (1 << offset_code) | (offset_value - (1 << offset_code))
    body = (bytes([len(literals) << 3]) + literals  # Raw_Literals_Block, 1-byte header
            + bytes([1, 0b01010100, len(literals), offset_code, match_length - 3])
            + bits.to_bytes((bits.bit_length() + 7) // 8, "little"))
    return compressed_block(body)


def windowed_header(content_size: int) -> bytes:
    """A frame header with a window descriptor of 1 KiB (exponent 0) and a 4-byte content
    size: blocks up to 1 KiB are within Block_Maximum_Size ([ZR-COD-013])."""
    return b"\x28\xb5\x2f\xfd" + bytes([2 << 6, 0]) + content_size.to_bytes(4, "little")


def raw_block(payload: bytes, last: bool) -> bytes:
    return (int(last) | (len(payload) << 3)).to_bytes(3, "little") + payload


def executed(history: bytes, literals: bytes, offset: int, match_length: int) -> bytes:
    """What sequence_block's sequence appends to `history` (RFC 8878 section 3.1.1.4)."""
    out = bytearray(history + literals)
    for _ in range(match_length):
        out.append(out[-offset])
    return bytes(out)


def _settled_cases(g: Any, gen: Any) -> None:
    # Point 1: a dtype that takes no unit, with a dtype_unit that is no unit code at all. The
    # known-unit check of step 2.8 is for datetime64 and timedelta64 only ([ZR-HDR-019]).
    for name, descr, what in (("int32_with_unknown_unit_200", "<i4", "int32 (a 1.0 dtype)"),
                              ("bytes_with_unknown_unit_200", "|S3", "bytes (S3)")):
        recs = [values_of(descr, (2,), s) for s in range(2)]
        f = gen.Files(rw.build_store(kind="dense", dtype=descr, item_shape=(2,), data_shards=1, records=recs))
        g.invalid(
            name,
            error="corrupt",
            phase="open",
            spec=["ZR-HDR-019", "ZR-ERR-003"],
            description=f"dtype {what} with dtype_unit 200, which is no unit code: a dtype that "
            "takes no unit must have dtype_unit 0, so this is corrupt, not an unknown unit "
            "(unsupported) (re-sealed)",
            files=f.hset(92, 1, 200).seal().done(),
        )
    # Point 4: the layout (step 9) is verified before any record's checksum (step 7).
    f = duplicated_range(gen)
    f.eset(3, 16, 8, f.eget(3, 16, 8) ^ 1)
    g.invalid(
        "ranges_gap_and_record_checksum",
        error="corrupt",
        phase="verify",
        read_error="checksum",
        spec=["ZR-IDX-008", "ZR-ERR-004", "ZR-ERR-005", "ZR-SUM-001"],
        description="four equal records; record 1 names record 0's range, leaving bytes [24, 48) "
        "under no checksum, and record 3's checksum is wrong: reading record 3 fails with "
        "checksum, and a verification, which checks the layout first, reports corrupt",
        files=f.seal_index().done(),
    )
    # Point 5: magic and version are judged from the first 12 bytes, before the file's size.
    files = gen.dense_base().done()
    garbage = b"this file is not a zrecord header\n"
    files["header.zrh"] = garbage + bytes(ref.HEADER_SIZE_BYTES_MAX_1_1 + 1 - len(garbage))
    g.invalid(
        "header_oversized_without_magic",
        error="bad_magic",
        phase="open",
        spec=["ZR-HDR-001", "ZR-HDR-022", "ZR-ERR-003"],
        description="header.zrh is 16,779,649 bytes (header_size_bytes_max + 1) of text and "
        "zeros: the magic is judged from its first bytes before its size, so bad_magic, not corrupt",
        files=files,
    )
    _settled_frame_cases(g, gen)


def _settled_frame_cases(g: Any, gen: Any) -> None:
    # Point 7: matches on which decoders differ, settled by [ZR-COD-014].
    first = gen.text_record(0, 10)
    lits = b"abcd"

    def store(last: bytes, codec: int, dictionary: bytes = b"", size: int = 8) -> dict[str, bytes]:
        return rw.build(
            kind="ragged", dtype_code=3, ndim=1, codec_code=codec, data_shards=1,
            records=[rw.Stored((10,), 10, rw.zstd_frame(bytes(first))), rw.Stored((size,), size, last)],
            dictionary=dictionary,
        )

    g.invalid(
        "zstd_match_before_frame_start",
        error="decode",
        phase="read",
        spec=["ZR-COD-014", "ZR-COD-015", "ZR-IDX-005"],
        description="codec zstd: record 1's frame (window 1 KiB) has 4 literals, then a match "
        "from offset 5, one byte before the frame's first",
        files=store(windowed_header(8) + sequence_block(lits, 5, 4), 1),
    )
    dictionary = b"0123456789ABCDEF"
    g.invalid(
        "zstd_dict_match_before_dictionary",
        error="decode",
        phase="read",
        spec=["ZR-COD-014", "ZR-COD-015", "ZR-IDX-005", "ZR-COD-007"],
        description="codec zstd_dict with a 16-byte raw-content dictionary: record 1's frame has "
        "4 literals, then a match from offset 21, one byte before the dictionary's first",
        files=store(windowed_header(8) + sequence_block(lits, 21, 4), 2, dictionary),
    )
    at_start = executed(dictionary, lits, 20, 4)[len(dictionary):]
    recs = [first, np.frombuffer(at_start, np.uint8).copy()]
    files = store(windowed_header(8) + sequence_block(lits, 20, 4), 2, dictionary)
    g.valid(
        "zstd_dict_match_at_dictionary_start",
        writer="reference",
        spec=["ZR-COD-014", "ZR-COD-015", "ZR-COD-007"],
        description="codec zstd_dict with a 16-byte raw-content dictionary: record 1's frame has "
        "4 literals, then a match from offset 20, the dictionary's first byte: within the history",
        records=recs,
        make=lambda p: rw.write_files(p, files),
    )
    history = bytes((k * 7) % 251 for k in range(2048))
    record = executed(history, lits, 1500, 4)
    frame = (windowed_header(len(record)) + raw_block(history[:1024], False)
             + raw_block(history[1024:], False) + sequence_block(lits, 1500, 4))
    recs_far = [first, np.frombuffer(record, np.uint8).copy()]
    far = store(frame, 1, size=len(record))
    g.valid(
        "zstd_match_beyond_window_within_record",
        writer="reference",
        spec=["ZR-COD-014", "ZR-COD-015", "ZR-COD-013"],
        description="codec zstd: a 2,056-byte record whose frame declares a 1 KiB window, holds "
        "two raw blocks of 1 KiB, then a match from offset 1,500: farther back than the window, "
        "within the record, so valid (offsets are bounded by the history, not the window)",
        records=recs_far,
        make=lambda p: rw.write_files(p, far),
    )


def _block_size_cases(g: Any, gen: Any) -> None:
    # [ZR-COD-013] Block_Maximum_Size, min(window, 128 KiB), bounds every block. libzstd's
    # one-shot decoder checks no Raw or RLE block against it, and before 1.5.6 no Compressed
    # block either.
    first = gen.text_record(0, 10)
    payload = bytes(range(256)) * 8

    def store(last: bytes, size: int) -> dict[str, bytes]:
        return rw.build(
            kind="ragged", dtype_code=3, ndim=1, codec_code=1, data_shards=1,
            records=[rw.Stored((10,), 10, rw.zstd_frame(bytes(first))), rw.Stored((size,), size, last)],
        )

    def block(block_type: int, size: int, last: bool = True) -> bytes:
        return (int(last) | (block_type << 1) | (size << 3)).to_bytes(3, "little")

    rle_literals = (1 | (1 << 2) | (2000 << 4)).to_bytes(2, "little") + b"z" + b"\x00"
    single_8 = b"\x28\xb5\x2f\xfd\xa0" + (8).to_bytes(4, "little")  # single segment: window 8
    bad = [
        ("zstd_raw_block_above_block_maximum_size", windowed_header(2048) + block(0, 2048) + payload,
         2048, "a Raw block of 2,048 bytes in a frame whose window is 1 KiB"),
        ("zstd_rle_block_above_block_maximum_size", windowed_header(2048) + block(1, 2048) + b"x",
         2048, "an RLE block repeating a byte 2,048 times in a frame whose window is 1 KiB"),
        ("zstd_compressed_block_larger_than_window", single_8 + sequence_block(b"abcd", 2, 4), 8,
         "a single-segment frame of content size 8 (its window) holding an 11-byte Compressed block"),
        ("zstd_compressed_block_decoding_past_window",
         windowed_header(2000) + block(2, len(rle_literals)) + rle_literals, 2000,
         "a 5-byte Compressed block of 2,000 RLE literals in a frame whose window is 1 KiB"),
    ]
    for name, frame, size, what in bad:
        g.invalid(
            name,
            error="decode",
            phase="read",
            spec=["ZR-COD-013", "ZR-COD-015", "ZR-IDX-005"],
            description=f"codec zstd: record 1 is {what}: above Block_Maximum_Size",
            files=store(frame, size),
        )
    ok = store(windowed_header(2048) + block(0, 1024, False) + payload[:1024] + block(0, 1024) + payload[1024:], 2048)
    g.valid(
        "zstd_blocks_at_block_maximum_size",
        writer="reference",
        spec=["ZR-COD-013"],
        description="codec zstd: a 2,048-byte record in two Raw blocks of 1 KiB, exactly the "
        "frame's window",
        records=[first, np.frombuffer(payload, np.uint8).copy()],
        make=lambda p: rw.write_files(p, ok),
    )


# ---- the zstd layer of section 6.2, settled ([H3]) ------------------------------------------


def compressed_block(body: bytes) -> bytes:
    """A last Compressed block holding `body` (a literals section and a sequences section)."""
    return (1 | (2 << 1) | (len(body) << 3)).to_bytes(3, "little") + body


def huffman_literals_block(weights: list[int], count: int) -> tuple[bytes, bytes]:
    """A last Compressed block of `count` (1 to 7) literals and no sequences: one Huffman-coded
    stream (Size_Format 0) under a tree of direct weights `weights` (RFC 8878 section 4.2.1.1),
    whose implied last symbol has the largest weight and so the one-bit code "1"; every
    literal is that symbol. Returns the block and the literals it decodes to."""
    assert 1 <= count <= 7
    description = direct_weights(weights)
    stream = bytes([(2 << count) - 1])  # `count` one-bits under the end mark
    size = len(description) + len(stream)
    header = (2 | (count << 4) | (size << 14)).to_bytes(3, "little")  # Compressed, one stream
    return compressed_block(header + description + stream + b"\x00"), bytes([len(weights)]) * count


def direct_weights(weights: list[int]) -> bytes:
    """A Huffman tree description of direct weights: 127 + their count, then two a byte, the
    first in the high half (an odd count leaves the last low half 0)."""
    padded = [*weights, 0][: len(weights) + len(weights) % 2]
    return bytes([127 + len(weights)]) + bytes((padded[k] << 4) | padded[k + 1] for k in range(0, len(padded), 2))


def tree_of_depth(depth: int) -> list[int]:
    """Direct weights of a tree of `depth`: weights depth-1 down to 1, then 1 again; their
    2^(w-1) add up to 2^(depth-1), so the implied last weight is `depth`."""
    return list(range(depth - 1, 0, -1)) + [1]


def offsets_fse_block(literals: bytes, offset: int, match_length: int, probs: list[int]) -> bytes:
    """Like sequence_block, but the offsets use FSE_Compressed_Mode with table `probs` (accuracy
    log 5): the bitstream holds the offset state, chosen to decode the sequence's offset code,
    then the offset's extra bits, under the end mark (the one sequence updates no state)."""
    offset_value = offset + 3
    code = offset_value.bit_length() - 1
    state = next(k for k, (sym, _, _) in enumerate(refdict._decoding_table(probs, 5)) if sym == code)
    bits = (1 << (5 + code)) | (state << code) | (offset_value - (1 << code))
    body = (bytes([len(literals) << 3]) + literals
            + bytes([1, 0b01100100, len(literals)]) + fse_description(5, probs) + bytes([match_length - 3])
            + bits.to_bytes((bits.bit_length() + 7) // 8, "little"))
    return compressed_block(body)


def _zstd_layer_cases(g: Any, gen: Any) -> None:
    first = gen.text_record(0, 10)

    def store(frames: list[tuple[bytes, bytes]], codec: int = 1, dictionary: bytes = b"") -> dict[str, bytes]:
        stored = [(10, rw.zstd_frame(bytes(first))), *((len(out), frame) for frame, out in frames)]
        return _u8_store(stored, codec, dictionary)

    def valid(name: str, frames: list[tuple[bytes, bytes]], spec: list[str], what: str, **kw: Any) -> None:
        files = store(frames, **kw)
        recs = [first] + [np.frombuffer(out, np.uint8).copy() for _, out in frames]
        g.valid(name, writer="reference", spec=spec, description=what, records=recs,
                make=lambda p: rw.write_files(p, files))

    def invalid(name: str, frame: bytes, size: int, spec: list[str], what: str) -> None:
        g.invalid(name, error="decode", phase="read", spec=[*spec, "ZR-COD-015", "ZR-IDX-005"],
                  description=f"codec zstd: record 1 is {what}", files=store([(frame, bytes(size))]))

    _sequences_header_cases(valid, invalid)
    _huffman_depth_cases(valid, invalid)
    _offset_code_cases(valid, invalid)
    _empty_record_window_cases(valid, invalid)


def _sequences_header_cases(valid: Any, invalid: Any) -> None:
    # [ZR-COD-016] libzstd up to 1.5.5 ignores the reserved bits, and reads a Number_of_Sequences
    # of 0 in two bytes as the start of a sequences section; 1.5.6 on does the opposite.
    lits = b"abcd"
    frame = windowed_header(8) + sequence_block(lits, 2, 4)
    at = len(frame) - 5  # Symbol_Compression_Modes: before the three RLE symbols and a 1-byte stream
    assert frame[at] == 0b01010100
    valid("zstd_one_sequence_raw_literals", [(frame, executed(b"", lits, 2, 4))], ["ZR-COD-016"],
          "codec zstd: record 1 is four raw literals and one sequence, every symbol type in RLE_Mode "
          "(Symbol_Compression_Modes 0x54, its reserved bits 0)")
    for bits in (1, 2):
        invalid(f"zstd_sequences_reserved_bits_{bits}", frame[:at] + bytes([frame[at] | bits]) + frame[at + 1:], 8,
                ["ZR-COD-016"], f"the same frame with Symbol_Compression_Modes 0x{0x54 | bits:02x}: its "
                "reserved bits are not 0")
    raw = bytes([len(lits) << 3]) + lits
    valid("zstd_zero_sequences_in_one_byte", [(windowed_header(4) + compressed_block(raw + b"\x00"), lits)],
          ["ZR-COD-016"], "codec zstd: record 1 is a Compressed block of four raw literals and a "
          "Number_of_Sequences of 0, the one byte 00 that ends the block")
    invalid("zstd_zero_sequences_in_two_bytes", windowed_header(4) + compressed_block(raw + b"\x80\x00"), 4,
            ["ZR-COD-016"], "a Compressed block of four raw literals and a Number_of_Sequences of 0 "
            "written in two bytes (80 00)")
    invalid("zstd_bytes_after_zero_sequences", windowed_header(4) + compressed_block(raw + b"\x00\x00"), 4,
            ["ZR-COD-016"], "a Compressed block of four raw literals, a Number_of_Sequences of 0, and a "
            "byte after it")


def _huffman_depth_cases(valid: Any, invalid: Any) -> None:
    # [ZR-COD-017] One depth limit, 12, for the Huffman trees of frames and of dictionaries:
    # every libzstd release accepts 12 and refuses 13, and RFC 8878 says 11.
    frames = [huffman_literals_block(tree_of_depth(d), 7) for d in (11, 12)]
    valid("zstd_huffman_depth_11_and_12", [(windowed_header(7) + b, out) for b, out in frames],
          ["ZR-COD-017"], "codec zstd: records 1 and 2 are seven literals each, Huffman-coded "
          "under trees of depth 11 and 12 (direct weights; every literal the one-bit symbol)")
    block, _ = huffman_literals_block(tree_of_depth(13), 7)
    invalid("zstd_huffman_depth_13", windowed_header(7) + block, 7, ["ZR-COD-017"],
            "seven literals Huffman-coded under a tree of depth 13")
    dictionary = zstd_dictionary(huffman=direct_weights(tree_of_depth(12)))
    assert refdict.check_dictionary(dictionary) is None
    payload = b"a record of raw blocks"
    valid("zstd_dict_huffman_depth_12", [(frame(payload), payload)], ["ZR-COD-017", "ZR-COD-011"],
          "codec zstd_dict: a hand-built zstd-format dictionary whose literals Huffman tree has depth "
          "12; record 1 is a frame of one raw block", codec=2, dictionary=dictionary)


def _offset_code_cases(valid: Any, invalid: Any) -> None:
    # [ZR-COD-018] Offset codes 0 to 31, in every table, used or not.
    lits = b"abcd"
    table_31 = [0, 0, 31] + [0] * 28 + [1]
    valid("zstd_offsets_table_with_code_31", [(windowed_header(8) + offsets_fse_block(lits, 2, 4, table_31),
                                               executed(b"", lits, 2, 4))], ["ZR-COD-018"],
          "codec zstd: record 1 is four raw literals and one sequence of offset code 2, its offsets "
          "table (FSE_Compressed_Mode, accuracy log 5) giving code 31 one state")
    table_32 = [0, 0, 31] + [0] * 29 + [1]
    invalid("zstd_offsets_table_with_code_32", windowed_header(8) + offsets_fse_block(lits, 2, 4, table_32), 8,
            ["ZR-COD-018"], "four raw literals and one sequence of offset code 2, its offsets table "
            "giving code 32 one state (no sequence uses it)")


def _empty_record_window_cases(valid: Any, invalid: Any) -> None:
    # [ZR-COD-008] window_size_max of a record of size 0: 2^ceil(log2 0) is undefined, so the
    # spec rounds 0 up to 1, and the 2^27 floor decides.
    valid("zstd_empty_record_window_at_cap", [(frame(b"", window_descriptor=17 << 3), b"")], ["ZR-COD-008"],
          "codec zstd: record 1 is empty, its frame one empty raw block behind a window descriptor "
          "of 2^27 bytes, exactly window_size_max of a record of size 0")
    invalid("zstd_empty_record_window_above_cap", frame(b"", window_descriptor=(17 << 3) | 1), 0, ["ZR-COD-008"],
            "empty, its frame one empty raw block behind a window descriptor of 2^27 + 2^24 bytes, "
            "above window_size_max of a record of size 0")
