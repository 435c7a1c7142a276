"""The conformance cases of format 1.2 (conformance/v1.2/): index parts (spec section 4.1).

Every valid store here has the feature `index_parts` (required_features bit 0), except those that
show that a store without it reads as in 1.1 beside an `index.zrs` it does not name. Index blocks
and sum groups are tiny (shifts of 0 to 2) so that a store of a dozen records has several blocks,
several groups, a short last block and a short last group; the writer defaults (s = 8, g = 10)
appear in a few stores of one block. Invalid stores are built by the reference writer and then
altered, each breaking one rule with every other checksum re-sealed, as in 1.0 and 1.1.

A damaged index part is phase "read" with `bad_records`: a reader that judges the index by part
(spec section 9.6) finds it when it reads a record of that part, and must still return every
other record; a reader that judges the whole index at open rejects the store at open. Breaches
of step 6 and of the whole-index checksum alone are phase "verify": a reader by part returns
every record, and a verification rejects the store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from reference import reader as ref
from reference import writer as rw
from reference.xxh64 import xxh64

# ---- stores with index parts, and the surgery that re-seals them ------------------------------


def dense_records(n: int, gen: Any) -> list[np.ndarray]:
    return [gen.pattern("float32", (2, 3), s) for s in range(n)]


def ragged_records(n: int, gen: Any) -> list[np.ndarray]:
    return [gen.pattern("int16", ((s * 5) % 4,), s) for s in range(n)]


def dense_parts(gen: Any, n: int = 11, shifts: tuple[int, int] = (1, 2), **kw: Any) -> Any:
    """Dense float32 (2, 3), raw, 2 shards, n records. With the default 11 records in blocks of
    2 entries and groups of 4 sums: 6 blocks (block 5 holds record 10 alone) in 2 groups (group 1
    holds blocks 4 and 5 alone)."""
    args: dict[str, Any] = dict(
        kind="dense", dtype="float32", item_shape=(2, 3), data_shards=2, records=dense_records(n, gen),
        index_parts=shifts,
    )
    args.update(kw)
    return gen.Files(rw.build_store(**args))


def ragged_parts(gen: Any, n: int = 13, shifts: tuple[int, int] = (2, 0), **kw: Any) -> Any:
    """Ragged int16 rank 1, raw, 1 shard, n records of 0 to 3 elements. With the default 13 records
    in blocks of 4 entries and groups of 1 sum: 4 blocks (block 3 holds record 12 alone), 4 groups."""
    args: dict[str, Any] = dict(
        kind="ragged", dtype="int16", ndim=1, data_shards=1, records=ragged_records(n, gen), index_parts=shifts
    )
    args.update(kw)
    return gen.Files(rw.build_store(**args))


def group_sums_offset(f: Any) -> int:
    """Where group_sums starts in the header: after item_shape (Dense) and shard_sizes."""
    axes = f.header[18] if f.header[16] == 1 else 0
    return ref.HEADER_FIXED_BYTES + 8 * axes + 8 * f.header[20]


def reseal(f: Any, *, block_sums: bool = True, group_sums: bool = True, index_checksum: bool = True) -> Any:
    """Re-computes, from the bytes as they now are, the block sums (index.zrs from index.zri), the
    group sums (the header's, from index.zrs) and the whole-index checksum, each unless told not
    to; then the header checksum."""
    block_shift, group_shift = f.header[93], f.header[94]
    if block_sums:
        f.f["index.zrs"] = bytearray(rw.index_parts_of(bytes(f.index), f.entry_size(), block_shift, group_shift)[0])
    if group_sums:
        sums = bytes(f.f["index.zrs"])
        step = 8 << group_shift
        off = group_sums_offset(f)
        for t in range(ref.blocks_of(len(sums) // 8, group_shift)):
            f.hset(off + 8 * t, 8, xxh64(sums[t * step : (t + 1) * step]))
    if index_checksum:
        f.hset(64, 8, xxh64(f.index))
    return f.seal()


def swap_entries(f: Any, i: int, j: int) -> Any:
    es = f.entry_size()
    a, b = bytes(f.index[i * es : (i + 1) * es]), bytes(f.index[j * es : (j + 1) * es])
    f.index[i * es : (i + 1) * es], f.index[j * es : (j + 1) * es] = b, a
    return f


def set_block_sum(f: Any, b: int, value: int) -> Any:
    f.f["index.zrs"][8 * b : 8 * b + 8] = value.to_bytes(8, "little")
    return f


# ---- the cases -------------------------------------------------------------------------------


def cases(g: Any, gen: Any) -> None:
    """Appends every case of format 1.2 to generator `g`; `gen` is generate.py's module."""
    g.supersedes.append(
        {
            "case": "v1.1/required_feature_bit_0",
            "by": "required_feature_bit_0_now_index_parts",
            "why": "format 1.2 defines required_features bit 0 (index_parts), so a reader of 1.2 "
            "no longer reports that store as unsupported: it judges the bit's bytes and finds the "
            "header one group sum table too short (corrupt)",
        }
    )
    _valid_cases(g, gen)
    _without_parts_cases(g, gen)
    _header_cases(g, gen)
    _file_cases(g, gen)
    _damaged_part_cases(g, gen)
    _entry_cases(g, gen)
    _whole_index_cases(g, gen)
    _zrecord_cases(g, gen)


def _valid_cases(g: Any, gen: Any) -> None:
    """Stores with index parts, from the reference writer: the writer defaults, several blocks and
    groups with a short last block and a short last group, blocks of one entry, the largest
    shifts, an empty store, a dictionary after the group sums, a dtype of 1.1, minor 0."""
    _valid_default_cases(g, gen)
    _valid_shape_cases(g, gen)


def _valid_default_cases(g: Any, gen: Any) -> None:
    recs = [np.array([1, 2, 3], dtype="<i2"), np.array([-2], dtype="<i2")]
    g.valid(
        "minimal_ragged_raw_parts",
        writer="reference",
        spec=["ZR-GEN-001", "ZR-HDR-003", "ZR-PRT-001", "ZR-PRT-004", "ZR-PRT-005"],
        description="the 2-record store of spec section 10 (v1.1/valid/minimal_ragged_raw) with "
        "index parts and the writer defaults, whose header and index.zrs spec section 10 labels",
        records=recs,
        make=gen.reference_writer(kind="ragged", dtype="<i2", ndim=1, records=recs, index_parts=True),
    )
    recs = dense_records(5, gen)
    g.valid(
        "parts_dense_defaults",
        writer="reference",
        spec=["ZR-PRT-001", "ZR-PRT-004", "ZR-PRT-005", "ZR-PRT-008", "ZR-HDR-018"],
        description="Dense float32 (2, 3), 2 shards, 5 records, with the writer defaults: index "
        "blocks of 2^8 entries and sum groups of 2^10 block sums, so one block and one group",
        records=recs,
        make=gen.reference_writer(kind="dense", dtype="float32", item_shape=(2, 3), data_shards=2,
                                  records=recs, index_parts=True),
    )
    recs = ragged_records(6, gen)
    g.valid(
        "parts_ragged_zstd_defaults",
        writer="reference",
        spec=["ZR-PRT-001", "ZR-PRT-004", "ZR-PRT-005", "ZR-PRT-008"],
        description="Ragged int16 rank 1, codec zstd, 6 records (two empty), the writer defaults: "
        "one block, one group",
        records=recs,
        make=gen.reference_writer(kind="ragged", dtype="int16", ndim=1, codec="zstd", records=recs,
                                  index_parts=True),
    )
    g.valid(
        "parts_empty_store",
        writer="reference",
        spec=["ZR-PRT-001", "ZR-PRT-003", "ZR-HDR-003"],
        description="Dense uint8 (4,) with no records and the writer defaults: no index block, no "
        "sum group, an empty index.zrs and no group_sums in the header (136 + 8 bytes)",
        records=[],
        make=gen.reference_writer(kind="dense", dtype="uint8", item_shape=(4,), records=[], index_parts=True),
    )
    recs = [np.array([[text]], dtype="<U2") for text in ("ab", "", "\u00e9z")]
    g.valid(
        "parts_str_dense",
        writer="reference",
        spec=["ZR-PRT-001", "ZR-HDR-018"],
        description="Dense str U2 (1, 1), a dtype of 1.1, in a store with index parts (format 1.2), "
        "3 records in blocks of 2 entries, one group",
        records=recs,
        make=gen.reference_writer(kind="dense", dtype="<U2", item_shape=(1, 1), records=recs,
                                  index_parts=(1, 10)),
    )


def _valid_shape_cases(g: Any, gen: Any) -> None:
    recs = dense_records(11, gen)
    g.valid(
        "parts_dense_short_last_block_and_group",
        writer="reference",
        spec=["ZR-PRT-001", "ZR-PRT-004", "ZR-PRT-005"],
        description="Dense float32 (2, 3), 2 shards, 11 records in index blocks of 2 entries and "
        "sum groups of 4 block sums: 6 blocks, the last holding record 10 alone, in 2 groups, the "
        "last holding blocks 4 and 5 alone",
        records=recs,
        make=lambda p: rw.write_files(p, dense_parts(gen).done()),
    )
    recs = ragged_records(13, gen)
    g.valid(
        "parts_ragged_groups_of_one_sum",
        writer="reference",
        spec=["ZR-PRT-001", "ZR-PRT-004", "ZR-PRT-005"],
        description="Ragged int16 rank 1, 13 records (some empty) in index blocks of 4 entries and "
        "sum groups of 1 block sum: 4 blocks and 4 groups, the last block holding record 12 alone",
        records=recs,
        make=lambda p: rw.write_files(p, ragged_parts(gen).done()),
    )
    recs = [gen.pattern("uint8", (3,), s) for s in range(5)]
    g.valid(
        "parts_blocks_of_one_entry",
        writer="reference",
        spec=["ZR-PRT-001", "ZR-PRT-002", "ZR-PRT-004", "ZR-PRT-005"],
        description="Dense uint8 (3,), 5 records, index_block_shift 0 and index_group_shift 1: 5 "
        "blocks of one entry, 3 groups, the last of one block sum",
        records=recs,
        make=gen.reference_writer(kind="dense", dtype="uint8", item_shape=(3,), records=recs, index_parts=(0, 1)),
    )
    recs = [gen.pattern("uint8", (3,), s) for s in range(3)]
    g.valid(
        "parts_shifts_at_max",
        writer="reference",
        spec=["ZR-PRT-002", "ZR-PRT-003"],
        description="Dense uint8 (3,), 3 records, index_block_shift and index_group_shift 48 "
        "(index_block_shift_max, index_group_shift_max): one block, one group",
        records=recs,
        make=gen.reference_writer(kind="dense", dtype="uint8", item_shape=(3,), records=recs, index_parts=(48, 48)),
    )
    _valid_dictionary_and_minor_cases(g, gen)


def _valid_dictionary_and_minor_cases(g: Any, gen: Any) -> None:
    recs = [gen.text_record(k, 30 + k) for k in range(9)]
    dictionary = bytes(gen.text_record(5, 100))
    g.valid(
        "parts_zstd_dict_after_group_sums",
        writer="reference",
        spec=["ZR-PRT-001", "ZR-PRT-004", "ZR-HDR-003", "ZR-HDR-005"],
        description="Ragged uint8, codec zstd_dict with a 100-byte raw-content dictionary, 9 records "
        "in blocks of 2 entries and groups of 2 sums: the 3 group sums lie between shard_sizes and "
        "the dictionary, and 4 bytes of padding follow it",
        records=recs,
        make=gen.reference_writer(kind="ragged", dtype="uint8", ndim=1, codec="zstd_dict",
                                  dictionary=dictionary, records=recs, index_parts=(1, 1)),
    )
    recs = dense_records(3, gen)
    g.valid(
        "parts_under_minor_0",
        writer="reference",
        spec=["ZR-HDR-018", "ZR-PRT-001"],
        description="a store with index parts whose format_minor is 0: its writer should have "
        "written 2, but the minor decides nothing for a reader, the feature bit does",
        records=recs,
        make=gen.reference_writer(kind="dense", dtype="float32", item_shape=(2, 3), records=recs,
                                  index_parts=(1, 1), format_minor=0),
    )


def _without_parts_cases(g: Any, gen: Any) -> None:
    """A store without index_parts reads as in 1.1: an index.zrs beside it is no store file and is
    ignored ([ZR-PRT-007], [ZR-GEN-007]), and bytes 93 and 94 are reserved ([ZR-HDR-005])."""
    recs = [gen.pattern("float32", (2, 3), s) for s in range(4)]
    files = gen.dense_base().done()

    def stray_file(store: Path) -> None:
        rw.write_files(store, files)
        (store / "index.zrs").write_bytes(b"not the block sums of anything")

    g.valid(
        "stray_index_zrs_without_parts",
        writer="reference",
        spec=["ZR-PRT-007", "ZR-GEN-007"],
        description="a store of format 1.0 (no index_parts) beside a 30-byte index.zrs that sums "
        "nothing: the header does not name it, so readers ignore it",
        records=recs,
        make=stray_file,
    )

    def stray_link(store: Path) -> None:
        rw.write_files(store, files)
        os.symlink("gone", store / "index.zrs")

    g.valid(
        "stray_index_zrs_link_without_parts",
        writer="reference",
        spec=["ZR-PRT-007", "ZR-GEN-007"],
        description="a store of format 1.0 beside an index.zrs that is a dangling symbolic link: "
        "not a store file of a store without index_parts, so not judged",
        records=recs,
        make=stray_link,
    )
    for byte, value in ((93, 8), (94, 10)):
        g.invalid(
            f"byte_{byte}_set_without_parts",
            error="corrupt",
            phase="open",
            spec=["ZR-HDR-005", "ZR-PRT-007"],
            description=f"a store without index_parts whose byte {byte} is {value} (a plausible "
            "shift; re-sealed): without the feature it is reserved, as in 1.1",
            files=gen.dense_base().hset(byte, 1, value).seal().done(),
        )
    f = gen.dense_base().hset(80, 8, 1).seal()
    g.invalid(
        "required_feature_bit_0_now_index_parts",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-003", "ZR-PRT-003", "ZR-HDR-017"],
        description="the store of v1.1/required_feature_bit_0, which a reader of 1.1 rejects as "
        "unsupported: to a reader of 1.2 it is a store with index parts of shifts 0 and 0, 4 "
        "records in 4 blocks and 4 groups, whose header lacks the 32 bytes of group_sums",
        files=f.done(),
    )


def _header_cases(g: Any, gen: Any) -> None:
    """The header of a store with index parts (step 2): feature bits, reserved bytes, the shifts,
    the number of groups, the header's size with group_sums. Each is (name, error, spec IDs,
    description, the header fields set as (offset, size, value)) on `dense_parts`, re-sealed."""
    cases = [
        ("parts_with_unknown_feature_bit_1", "unsupported", ["ZR-HDR-017"],
         "required_features bits 0 and 1 in a store with index parts: bit 1 is defined by no minor "
         "yet (re-sealed)", [(80, 8, 3)]),
        ("parts_reserved_byte_95", "corrupt", ["ZR-HDR-005"],
         "byte 95, the first of reserved1 in a store with index parts, set (re-sealed)", [(95, 1, 1)]),
        ("parts_reserved_byte_before_shift_above_max", "corrupt", ["ZR-HDR-005", "ZR-PRT-002", "ZR-ERR-003"],
         "byte 127 set and index_block_shift 60: the reserved bytes are judged before the shifts",
         [(127, 1, 1), (93, 1, 60)]),
        ("block_shift_above_max", "limit", ["ZR-PRT-002", "ZR-LIM-001"],
         "index_block_shift 49, above index_block_shift_max 48 (re-sealed)", [(93, 1, 49)]),
        ("group_shift_above_max", "limit", ["ZR-PRT-002", "ZR-LIM-001"],
         "index_group_shift 255, above index_group_shift_max 48 (re-sealed)", [(94, 1, 255)]),
        # The number of sum groups is judged from record_count and the shifts before the
        # header's size ([ZR-PRT-003]), so a small store with blocks and groups of one can break it.
        ("groups_above_max", "limit", ["ZR-PRT-003", "ZR-LIM-001", "ZR-ERR-003"],
         "record_count 65,537 with shifts 0 and 0: 65,537 sum groups, above index_groups_max "
         "65,536; judged before the header's size, which has room for 2",
         [(93, 1, 0), (94, 1, 0), (24, 8, 2**16 + 1)]),
        ("groups_at_max_header_too_short", "corrupt", ["ZR-PRT-003", "ZR-HDR-003", "ZR-ERR-003"],
         "record_count 65,536 with shifts 0 and 0: exactly index_groups_max groups, which passes; "
         "the header's size, with room for 2 group sums instead of 65,536, does not",
         [(93, 1, 0), (94, 1, 0), (24, 8, 2**16)]),
        ("record_count_above_max_with_parts", "limit", ["ZR-HDR-014", "ZR-PRT-003", "ZR-ERR-003"],
         "record_count 2^48 + 1 with the writer default shifts (8 and 10): 2^30 + 1 sum groups, "
         "above index_groups_max (found first; record_count_max would give the same code)",
         [(93, 1, 8), (94, 1, 10), (24, 8, 2**48 + 1)]),
    ]
    for name, error, spec, what, fields in cases:
        f = dense_parts(gen)
        for off, size, value in fields:
            f.hset(off, size, value)
        g.invalid(name, error=error, phase="open", spec=spec, description=what, files=f.seal().done())
    _header_size_cases(g, gen)


def _header_size_cases(g: Any, gen: Any) -> None:
    """[ZR-HDR-003] with group_sums: the header holds exactly 8 bytes per sum group. Each case
    replaces bytes [at, at + cut) of the header (after item_shape and shard_sizes) with `put`."""
    for name, at, cut, put, what in (
        ("header_without_group_sums", 0, 16, b"", "a store with index parts of 2 sum groups whose "
         "header leaves out group_sums (header_size 16 bytes smaller, re-sealed)"),
        ("header_with_extra_group_sum", 16, 0, bytes(8), "a store with 2 sum groups whose header "
         "holds a third group sum of 0 (header_size 8 bytes larger, re-sealed)"),
    ):
        f = dense_parts(gen)
        off = group_sums_offset(f) + at
        f.header[off : off + cut] = put
        f.hset(12, 4, len(f.header))
        g.invalid(name, error="corrupt", phase="open", spec=["ZR-HDR-003"], description=what,
                  files=f.seal().done())


def _file_cases(g: Any, gen: Any) -> None:
    """Step 4 for index.zrs: present, a regular file, exactly 8 bytes per index block."""

    def relink(target: str) -> Any:
        def post(store: Path) -> None:
            if target != "gone":
                os.rename(store / "index.zrs", store / target)
            else:
                (store / "index.zrs").unlink()
            os.symlink(target, store / "index.zrs")

        return post

    def as_directory(store: Path) -> None:
        (store / "index.zrs").unlink()
        (store / "index.zrs").mkdir()
        (store / "index.zrs" / "README").write_text("a directory, not a store file\n")

    posts = [
        ("index_zrs_missing", ["ZR-GEN-006"], "index.zrs, which index_parts makes a store file, is missing",
         lambda store: (store / "index.zrs").unlink()),
        ("index_zrs_is_symlink", ["ZR-GEN-004", "ZR-GEN-006"],
         "index.zrs is a symbolic link to the valid block sums beside it", relink("sums.real")),
        ("index_zrs_dangling_symlink", ["ZR-GEN-004", "ZR-GEN-006"],
         "index.zrs is a dangling symbolic link: present, not missing", relink("gone")),
        ("index_zrs_is_directory", ["ZR-GEN-004", "ZR-GEN-006"], "index.zrs is a directory (holding one file)",
         as_directory),
    ]
    for name, spec, what, post in posts:
        g.invalid(name, error="corrupt", phase="open", spec=spec, description=what,
                  files=dense_parts(gen).done(), post=post)
    for name, cut, what in (
        ("index_zrs_one_byte_short", -1, "index.zrs is 47 bytes; 6 index blocks need 48"),
        ("index_zrs_one_sum_long", 8, "index.zrs holds a seventh block sum (56 bytes; 6 blocks need 48)"),
    ):
        f = dense_parts(gen)
        sums = f.f["index.zrs"]
        f.f["index.zrs"] = sums[:cut] if cut < 0 else sums + sums[:cut]
        g.invalid(name, error="corrupt", phase="open", spec=["ZR-PRT-001"], description=what, files=f.done())
    f = gen.Files(rw.build_store(kind="dense", dtype="uint8", item_shape=(4,), records=[], index_parts=True))
    f.f["index.zrs"] = bytearray(8)
    g.invalid(
        "index_zrs_not_empty_in_empty_store",
        error="corrupt",
        phase="open",
        spec=["ZR-PRT-001"],
        description="a store of no records (no index block) whose index.zrs holds 8 zero bytes",
        files=f.done(),
    )
    f = swap_entries(dense_parts(gen), 2, 3).seal_index()
    g.invalid(
        "index_zrs_missing_and_block_damaged",
        error="corrupt",
        phase="open",
        spec=["ZR-GEN-006", "ZR-ERR-002"],
        description="index.zrs missing and index block 1's entries swapped: the files are judged "
        "(step 4) before any part, so corrupt, not checksum",
        files=f.done(),
        post=lambda store: (store / "index.zrs").unlink(),
    )


def _damaged_part_cases(g: Any, gen: Any) -> None:
    """Index parts that do not match their sums ([ZR-PRT-004], [ZR-PRT-005]): found when a record of
    the part is read by part, at open by a reader that judges the whole index."""
    f = reseal(swap_entries(dense_parts(gen), 4, 5), block_sums=False, group_sums=False)
    g.invalid(
        "index_block_entries_swapped",
        error="checksum",
        phase="read",
        spec=["ZR-PRT-005", "ZR-ERR-006"],
        description="entries 4 and 5 (index block 2) swapped and the whole-index checksum re-sealed, "
        "the block sum not: every entry passes step 5 and names bytes that match its checksum, so a "
        "reader that skipped the block sum would return record 5 as record 4",
        files=f.done(),
        bad_records=(4, 5),
        bad_part="index block 2",
    )
    f = reseal(set_block_sum(dense_parts(gen), 3, 0x0123456789ABCDEF), block_sums=False)
    g.invalid(
        "index_block_sum_damaged",
        error="checksum",
        phase="read",
        spec=["ZR-PRT-005"],
        description="block sum 3 in index.zrs replaced, its sum group's sum re-sealed: index block 3 "
        "(records 6 and 7) does not match it",
        files=f.done(),
        bad_records=(6, 7),
        bad_part="index block 3",
    )
    f = set_block_sum(dense_parts(gen), 3, 0x0123456789ABCDEF)
    g.invalid(
        "index_block_sum_damaged_group_not_resealed",
        error="checksum",
        phase="read",
        spec=["ZR-PRT-004"],
        description="block sum 3 in index.zrs replaced, nothing re-sealed: sum group 0 (blocks 0 to "
        "3, records 0 to 7) does not match group_sums[0], judged before any of its block sums",
        files=f.done(),
        bad_records=(0, 7),
        bad_part="sum group 0",
    )
    f = dense_parts(gen)
    off = group_sums_offset(f) + 8
    f.hset(off, 8, f.hget(off, 8) ^ 1).seal()
    g.invalid(
        "group_sum_damaged",
        error="checksum",
        phase="read",
        spec=["ZR-PRT-004"],
        description="group_sums[1] in the header has its lowest bit flipped (header re-sealed): the "
        "short last sum group (blocks 4 and 5, records 8 to 10) does not match it",
        files=f.done(),
        bad_records=(8, 10),
        bad_part="sum group 1",
    )
    f = reseal(swap_entries(ragged_parts(gen), 8, 9), block_sums=False, group_sums=False)
    g.invalid(
        "ragged_index_block_entries_swapped",
        error="checksum",
        phase="read",
        spec=["ZR-PRT-005"],
        description="Ragged: entries 8 and 9 (index block 2) swapped, shapes and all, the "
        "whole-index checksum re-sealed, the block sum not",
        files=f.done(),
        bad_records=(8, 11),
        bad_part="index block 2",
    )


def _entry_cases(g: Any, gen: Any) -> None:
    """Step 5 by part: every entry of a block is judged before any of them is used ([ZR-PRT-006]),
    after the block's sums; record data is still judged record by record (steps 7 and 8)."""
    f = dense_parts(gen).eset(10, 14, 1, 1)
    g.invalid(
        "last_block_entry_reserved_sum_not_resealed",
        error="checksum",
        phase="read",
        spec=["ZR-PRT-005", "ZR-PRT-006", "ZR-ERR-003"],
        description="a reserved byte of entry 10, alone in the short last block, set; the "
        "whole-index checksum re-sealed, the block sum not: the block sum is judged before the "
        "entry, so checksum, not corrupt",
        files=reseal(f, block_sums=False, group_sums=False).done(),
        bad_records=(10, 10),
        bad_part="index block 5",
    )
    f = reseal(dense_parts(gen).eset(6, 14, 1, 1))
    g.invalid(
        "entry_reserved_in_block_resealed",
        error="corrupt",
        phase="read",
        spec=["ZR-IDX-003", "ZR-PRT-006"],
        description="a reserved byte of entry 6 set, every sum re-sealed: index block 3 fails step 5, "
        "and record 7, whose own entry is sound, is not read either (its block is judged whole)",
        files=f.done(),
        bad_records=(6, 7),
        bad_part="index block 3",
    )
    f = reseal(ragged_parts(gen).eset(9, 24, 4, 2**31))
    g.invalid(
        "ragged_entry_above_limit_in_block",
        error="limit",
        phase="read",
        spec=["ZR-IDX-004", "ZR-PRT-006"],
        description="Ragged: entry 9's shape is (2^31,) int16, above record_size_bytes_max, every sum "
        "re-sealed: index block 2 (records 8 to 11) fails step 5",
        files=f.done(),
        bad_records=(8, 11),
        bad_part="index block 2",
    )
    f = dense_parts(gen)
    f.f[f"data-{f.eget(3, 12, 1):03d}.zrd"][f.eget(3, 0, 8) + 2] ^= 0x10
    g.invalid(
        "record_checksum_in_parts_store",
        error="checksum",
        phase="read",
        spec=["ZR-SUM-001", "ZR-SUM-002"],
        description="one bit flipped in record 3's stored bytes of a store with index parts: its "
        "parts and entry pass, its own checksum does not",
        files=f.done(),
        bad_records=(3, 3),
        bad_part="record 3",
    )


def _whole_index_cases(g: Any, gen: Any) -> None:
    """What only the whole index shows ([ZR-PRT-009]): the whole-index checksum and step 6. A
    reader by part returns every record; a verification, or a reader that judges the whole index
    at open, rejects the store."""
    f = dense_parts(gen)
    f.hset(64, 8, f.hget(64, 8) ^ 1).seal()
    g.invalid(
        "index_checksum_mismatch_parts_intact",
        error="checksum",
        phase="verify",
        spec=["ZR-HDR-011", "ZR-PRT-009", "ZR-PRT-010"],
        description="index_checksum has its lowest bit flipped (header re-sealed); every part "
        "matches its sum and every entry is sound",
        files=f.done(),
    )
    f = dense_parts(gen)
    f.hset(32, 8, f.hget(32, 8) + 24).seal()
    g.invalid(
        "logical_bytes_mismatch_with_parts",
        error="corrupt",
        phase="verify",
        spec=["ZR-HDR-015", "ZR-PRT-009"],
        description="logical_bytes one record (24 bytes) more than the records add up to "
        "(header re-sealed): step 6, which only the whole index can judge",
        files=f.done(),
    )
    f = dense_parts(gen)
    f.f["data-001.zrd"] += b"\x00"
    f.hset(group_sums_offset(f) - 8, 8, len(f.f["data-001.zrd"])).hset(40, 8, f.hget(40, 8) + 1).seal()
    g.invalid(
        "shard_byte_unclaimed_with_parts",
        error="corrupt",
        phase="verify",
        spec=["ZR-DAT-001", "ZR-PRT-009", "ZR-ERR-005"],
        description="data-001.zrd has one byte more than its records, shard_sizes and stored_bytes "
        "agree with the file (header re-sealed): step 6 ([ZR-DAT-001]), before step 9",
        files=f.done(),
    )
    _whole_index_order_cases(g, gen)


def _whole_index_order_cases(g: Any, gen: Any) -> None:
    """The order of a whole judgement ([ZR-PRT-010]): every group, every block, the whole-index
    checksum, then the entries. A store that breaks a checksum and an entry's rule is reported by a
    verification (and a reader that judges the whole index at open) with the checksum's code, while
    a reader by part meets the entry first when it reads that entry's block (`read_error`)."""
    f = reseal(dense_parts(gen).eset(2, 14, 1, 1))
    f.hset(64, 8, f.hget(64, 8) ^ 1).seal()
    g.invalid(
        "index_checksum_before_entries_when_whole",
        error="checksum",
        phase="verify",
        read_error="corrupt",
        spec=["ZR-PRT-010", "ZR-HDR-011", "ZR-IDX-003"],
        description="a reserved byte of entry 2 set with its block and group sums re-sealed, and "
        "index_checksum wrong (header re-sealed): reading records 2 and 3 by part fails with "
        "corrupt; judging the whole index checks the index checksum before any entry, so checksum",
        files=f.done(),
    )
    f = reseal(dense_parts(gen).eset(2, 14, 1, 1))
    off = group_sums_offset(f) + 8
    f.hset(off, 8, f.hget(off, 8) ^ 1).seal()
    g.invalid(
        "later_group_before_earlier_entry_when_whole",
        error="checksum",
        phase="verify",
        read_error="corrupt",
        spec=["ZR-PRT-010", "ZR-PRT-004", "ZR-IDX-003"],
        description="a reserved byte of entry 2 (index block 1, sum group 0) set with every sum "
        "re-sealed, and group_sums[1] wrong (header re-sealed): reading in record order by part "
        "fails first at record 2 with corrupt; judging the whole index checks every group first, "
        "so checksum",
        files=f.done(),
    )


def _zrecord_cases(g: Any, gen: Any) -> None:
    """Stores with index parts written by zrecord (the Zig core, ZR_WRITE_INDEX_PARTS), each
    checked here to be byte for byte what the reference writer writes for the same records laid
    out the same way ([ZR-PRT-008]): the core's writer defaults are the spec's."""
    # 257 records: two index blocks of the writer defaults, the second of one entry.
    dense = [np.arange(6, dtype="<f4").reshape(2, 3) + 6 * i for i in range(257)]
    tokens = [np.arange(i % 9, dtype="<i2") * (i % 3 - 1) for i in range(12)]
    for name, kw, description in (
        ("parts_zrecord_dense_float32", dict(kind="dense", dtype="float32", records=dense, item_shape=(2, 3),
                                             data_shards=2),
         "Dense float32 (2, 3), 257 records in 2 shards, written by zrecord with index_parts: "
         "2 index blocks (the last of 1 entry), one sum group"),
        ("parts_zrecord_ragged_zstd", dict(kind="ragged", dtype="int16", records=tokens, ndim=1, codec="zstd",
                                           data_shards=3),
         "Ragged int16 rank 1, codec zstd, 12 records (some empty) in 3 shards, written by zrecord "
         "with index_parts: one index block, one sum group"),
        ("parts_zrecord_empty", dict(kind="dense", dtype="uint8", records=[], item_shape=(4,)),
         "Dense uint8 (4,) with no records, written by zrecord with index_parts: an empty index.zrs "
         "and no group sums"),
    ):
        g.valid(
            name,
            writer="zrecord",
            spec=["ZR-PRT-001", "ZR-PRT-004", "ZR-PRT-005", "ZR-PRT-008", "ZR-HDR-018"],
            description=description,
            records=kw["records"],
            make=_zrecord_as_reference(gen, **kw),
        )


def _zrecord_as_reference(gen: Any, *, kind: str, dtype: str, records: list[np.ndarray], **kw: Any) -> Any:
    """zrecord's writer, followed by the check that the reference writer, given the shard of
    each record and (zstd) the frame of each record as zrecord wrote them, writes the same bytes
    in every file."""
    layout = {k: v for k, v in kw.items() if k in ("item_shape", "ndim")}
    write = gen.zrecord_writer(kind, dtype, records, index_parts=True, **kw)

    def make(path: Path) -> None:
        write(path)
        files = {p.name: p.read_bytes() for p in path.iterdir()}
        entry = int.from_bytes(files["header.zrh"][48:52], "little")
        index = files["index.zri"]
        shards, frames = [], []
        for i in range(len(records)):
            e = index[i * entry:(i + 1) * entry]
            offset, size, shard = int.from_bytes(e[0:8], "little"), int.from_bytes(e[8:12], "little"), e[12]
            shards.append(shard)
            frames.append(files[f"data-{shard:03d}.zrd"][offset:offset + size])
        stored = iter(frames)
        want = rw.build_store(kind=kind, dtype=dtype, records=records, codec=kw.get("codec", "raw"),
                              data_shards=kw.get("data_shards", 1), assign=shards.__getitem__,
                              encode=(lambda payload: next(stored)) if kw.get("codec") == "zstd" else None,
                              index_parts=True, **layout)
        assert sorted(want) == sorted(files), (sorted(want), sorted(files))
        for name, data in want.items():
            assert files[name] == data, f"{path}: zrecord's {name} differs from the reference writer's"

    return make
