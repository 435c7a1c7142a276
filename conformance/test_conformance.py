"""The zrecord package against the conformance vectors of format 1.0 (v1/cases.json), 1.1
(v1.1/cases.json) and 1.2 (v1.2/cases.json), less the cases v1.2 `supersedes`.

Valid cases: `zrecord.open_store` gives the expected kind, dtype, shape and exact record bytes,
one record at a time and as one batch, and `verify()` passes. Invalid cases: the exact
exception class of the case's error code (spec section 9) is raised when the store is opened
(phase "open"); for phase "read", when its records are read and when it is verified; for phase
"verify", when it is verified (reading its records succeeds, or fails with the case's
`read_error`). zrecord reads a store with index parts by part (spec §9.6) unless asked to
validate its whole index, so a v1.2 case with `bad_records` is run both ways: opened plainly,
it opens, every read of a record in `bad_records` fails with the case's error and every other
record reads; opened with ``validate="full"`` it is rejected at open (damage to the index) or
when the record is read (record data). A rejected checksum names
the case's `bad_part` ([ZR-PRT-011]) either way; a case of phase "verify" may be rejected at
open too, with its error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zrecord
from zrecord import errors

HERE = Path(__file__).resolve().parent
FOLDERS = [HERE / "v1", HERE / "v1.1", HERE / "v1.2"]
# "v1.1/required_feature_bit_0" and the like: cases of an earlier folder whose bytes mean
# something else to a reader of the newest format (conformance/README.md).
SUPERSEDED = {s["case"] for s in json.loads((FOLDERS[-1] / "cases.json").read_text(encoding="utf-8"))["supersedes"]}
CASES: list[tuple[Path, dict[str, Any]]] = [
    (folder, case)
    for folder in FOLDERS
    for case in json.loads((folder / "cases.json").read_text(encoding="utf-8"))["cases"]
    if f"{folder.name}/{case['name']}" not in SUPERSEDED
]
VALID = [(f, c) for f, c in CASES if c["expect"] == "valid"]
INVALID = [(f, c) for f, c in CASES if c["expect"] == "error"]


def _ids(cases: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    return [f"{f.name}/{c['name']}" for f, c in cases]

# Conformance error code -> the exception class zrecord must raise (exactly this class).
EXCEPTIONS: dict[str, type[errors.ZrecordError]] = {
    "not_published": errors.NotPublishedError,
    "bad_magic": errors.BadMagicError,
    "unsupported_version": errors.UnsupportedVersionError,
    "corrupt": errors.CorruptStoreError,
    "checksum": errors.ChecksumError,
    "unsupported": errors.UnsupportedError,
    "limit": errors.LimitError,
    "decode": errors.DecodeError,
    "not_found": errors.StoreNotFoundError,
}


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_manifest_error_codes_match_the_native_codes(folder: Path) -> None:
    manifest = json.loads((folder / "cases.json").read_text(encoding="utf-8"))
    assert set(manifest["error_codes"]) <= set(EXCEPTIONS)
    from zrecord import _native

    names = {number: name for name, number in _native.RESULT_CODES.items()}
    for name, number in manifest["error_codes"].items():
        assert errors.BY_RESULT_NAME[names[number]] is EXCEPTIONS[name], name


@pytest.mark.parametrize(("folder", "case"), VALID, ids=_ids(VALID))
def test_valid(folder: Path, case: dict[str, Any]) -> None:
    want = [np.load(folder / p, allow_pickle=False) for p in case["records"]]
    with zrecord.open_store(folder / case["store"]) as store:
        assert isinstance(store, {"dense": zrecord.Dense, "ragged": zrecord.Ragged}[case["kind"]])
        assert len(store) == case["record_count"] == len(want)
        assert store.dtype == np.dtype(case.get("dtype_descr", case["dtype"]))
        assert store.format_version == tuple(case["format_version"])
        if case["kind"] == "dense":
            assert store.item_shape == tuple(case["item_shape"])
        for i, w in enumerate(want):
            got = store[i]
            assert got.dtype == w.dtype and got.shape == w.shape, i
            assert got.tobytes() == w.tobytes(), i
        if want:
            batch = store[list(range(len(want)))[::-1]]
            for w, got in zip(want[::-1], batch):
                assert got.shape == w.shape and got.tobytes() == w.tobytes()
        store.verify()


def _raises(case: dict[str, Any]) -> Any:
    return pytest.raises(EXCEPTIONS[case["error"]])


def _check_exact(info: Any, case: dict[str, Any]) -> None:
    _check_exception(info.value, case)


def _check_exception(exc: BaseException, case: dict[str, Any]) -> None:
    assert type(exc) is EXCEPTIONS[case["error"]], repr(exc)
    assert str(exc)
    if case["error"] == "checksum" and "bad_part" in case:
        assert case["bad_part"] in str(exc), (case["bad_part"], str(exc))


def _open_or_rejected(path: Path, case: dict[str, Any], validate: str = "cached") -> Any:
    """The store, or None where open rejected it with exactly the case's error."""
    try:
        return zrecord.open_store(path, validate=validate)
    except errors.ZrecordError as exc:
        _check_exception(exc, case)
        return None


def _check_by_part_and_whole(path: Path, case: dict[str, Any]) -> None:
    """[ZR-PRT-009] By part: open succeeds, the records of `bad_records` fail with the case's
    error, every other record reads. Whole ([ZR-PRT-010]): open fails with it, or (damaged
    record data) the read of the first bad record does."""
    first, last = case["bad_records"]
    with zrecord.open_store(path) as store:
        assert store.index_info()["source"] == "by_part"
        for i in range(len(store)):
            if first <= i <= last:
                with _raises(case) as info:
                    store[i]
                _check_exact(info, case)
            else:
                store[i]
    # Whole: damage to the index fails open; damage to a record's data, its read.
    store = _open_or_rejected(path, case, validate="full")
    if store is None:
        return
    with store, _raises(case) as info:
        store[first]
    _check_exact(info, case)


@pytest.mark.parametrize(("folder", "case"), INVALID, ids=_ids(INVALID))
def test_invalid(folder: Path, case: dict[str, Any]) -> None:
    path = folder / case["store"]
    if case["phase"] == "open":
        with _raises(case) as info:
            zrecord.open_store(path)
        _check_exact(info, case)
        return
    if case["phase"] == "verify":
        # Every record reads, or (with `read_error`) a record fails by its own rule; verify
        # checks the layout first and finds it broken ([ZR-IDX-008]). A reader that judges a
        # store's whole index at open may reject it there already (v1.2: steps 4.5 and 6).
        store = _open_or_rejected(path, case)
        if store is None:
            return
        with store:
            if "read_error" in case:
                with pytest.raises(EXCEPTIONS[case["read_error"]]) as read_info:
                    for i in range(len(store)):
                        store[i]
                assert type(read_info.value) is EXCEPTIONS[case["read_error"]], repr(read_info.value)
            else:
                for i in range(len(store)):
                    store[i]
        with zrecord.open_store(path) as store, _raises(case) as info:
            store.verify()
        _check_exact(info, case)
        return
    # Phase "read": a reader may reject the store at open already; zrecord checks record
    # checksums and frames when a record is read or verified.
    if "bad_records" in case:
        _check_by_part_and_whole(path, case)
    for action in ("read", "verify"):
        store = _open_or_rejected(path, case)
        if store is None:
            continue
        with store, _raises(case) as info:
            if action == "verify":
                store.verify()
            for i in range(len(store)):
                store[i]
        _check_exact(info, case)


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_manifest_matches_its_schema(folder: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((folder / "cases.schema.json").read_text(encoding="utf-8"))
    manifest = json.loads((folder / "cases.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(manifest)
    names = [c["name"] for c in manifest["cases"]]
    assert len(names) == len(set(names))


# Valid stores that hold more than a writer makes, on purpose ([ZR-GEN-007], [ZR-PRT-007]).
_EXTRA_ENTRIES = {"extra_entries_ignored", "stray_index_zrs_without_parts", "stray_index_zrs_link_without_parts"}


_WRITTEN = [(f, c) for f, c in VALID if c["name"] not in _EXTRA_ENTRIES]


@pytest.mark.parametrize(("folder", "case"), _WRITTEN, ids=_ids(_WRITTEN))
def test_valid_stores_are_exactly_what_writers_may_produce(folder: Path, case: dict[str, Any]) -> None:
    """Both writers' stores hold exactly the files of [ZR-GEN-001] and no two records' stored
    bytes overlap ([ZR-IDX-006]), which readers check only when they verify a whole store.
    (The stores of `_EXTRA_ENTRIES` hold more on purpose, and are left out.)"""
    import sys

    sys.path.insert(0, str(HERE))
    from reference.reader import open_store as reference_open

    path = folder / case["store"]
    want = {"header.zrh", "index.zri", *(f"data-{k:03d}.zrd" for k in range(case["data_shards"]))}
    if case.get("index_parts"):
        want.add("index.zrs")
    assert {p.name for p in path.iterdir()} == want
    store = reference_open(path)
    for shard in range(store.data_shards):
        ranges = sorted(
            (e.offset, e.offset + e.stored_size)
            for e in store.entries
            if e.shard == shard and e.stored_size > 0
        )
        for (_, end), (start, _) in zip(ranges, ranges[1:]):
            assert end <= start, (shard, ranges)


def _dump_bytes(block: str) -> bytes:
    """The bytes of one annotated hex dump of spec section 10: each line starts with a 3-digit
    offset and the bytes it labels; "00 ... 00 (35 bytes)" stands for a run."""
    import re

    out = bytearray()
    for line in block.splitlines():
        m = re.match(r"^([0-9a-f]{3})\s+((?:[0-9a-f]{2} )+)", line + " ")
        if not m:
            continue
        assert int(m.group(1), 16) == len(out), line
        run = re.match(r"^[0-9a-f]{3}\s+([0-9a-f]{2}) \.\.\. [0-9a-f]{2} \((\d+) bytes\)", line)
        if run:
            out += bytes([int(run.group(1), 16)]) * int(run.group(2))
        else:
            out += bytes.fromhex(m.group(2))
    return bytes(out)


def test_the_hex_dump_of_the_spec_is_the_minimal_vector() -> None:
    """Spec section 10 labels every byte of v1.1/valid/minimal_ragged_raw: its dumps must be
    those bytes ([ZR-GEN-001], [ZR-HDR-003])."""
    import re

    text = (HERE.parent / "spec" / "format-v1.md").read_text(encoding="utf-8")
    section = text[text.index("## 10. A minimal store"):text.index("## 11. ")]
    blocks = re.findall(r"```\n(.*?)```", section, flags=re.S)
    store = HERE / "v1.1" / "valid" / "minimal_ragged_raw" / "store"
    assert _dump_bytes(blocks[0]) == (store / "header.zrh").read_bytes()
    assert _dump_bytes(blocks[1]) == (store / "index.zri").read_bytes()
    shard = re.search(r"`data-000\.zrd`, 8 bytes: `([0-9a-f ]+)` .*? `([0-9a-f ]+)`", section)
    assert shard is not None
    assert bytes.fromhex(shard.group(1) + shard.group(2)) == (store / "data-000.zrd").read_bytes()


def test_the_hex_dumps_of_the_spec_with_parts_are_the_minimal_vector_with_parts() -> None:
    """Spec section 10 labels the header and index.zrs of v1.2/valid/minimal_ragged_raw_parts
    byte by byte; its index.zri and data-000.zrd are those of the store without parts."""
    import re

    text = (HERE.parent / "spec" / "format-v1.md").read_text(encoding="utf-8")
    section = text[text.index("## 10. A minimal store"):text.index("## 11. ")]
    blocks = re.findall(r"```\n(.*?)```", section, flags=re.S)
    store = HERE / "v1.2" / "valid" / "minimal_ragged_raw_parts" / "store"
    plain = HERE / "v1.1" / "valid" / "minimal_ragged_raw" / "store"
    assert _dump_bytes(blocks[2]) == (store / "header.zrh").read_bytes()
    assert _dump_bytes(blocks[3]) == (store / "index.zrs").read_bytes()
    for name in ("index.zri", "data-000.zrd"):
        assert (store / name).read_bytes() == (plain / name).read_bytes()


def test_zrecord_writes_index_parts_byte_for_byte_as_the_reference_writer(tmp_path: Path) -> None:
    """[ZR-PRT-008] The core's writer defaults are the reference writer's: the same records,
    written by zrecord with index_parts=True and by reference/writer.py with index_parts=True,
    give the same bytes in every file (several blocks, a short last block; Dense and Ragged)."""
    import sys

    sys.path.insert(0, str(HERE))
    from reference import writer as rw

    def shards_of(store: Path) -> Any:
        # The shard of each record as zrecord laid it out (contiguous runs per append); within
        # a shard both writers put records in record order.
        index = np.frombuffer((store / "index.zri").read_bytes(), np.uint8)
        entry = int.from_bytes((store / "header.zrh").read_bytes()[48:52], "little")
        return index.reshape(-1, entry)[:, 12].tolist()

    dense = np.arange(700 * 3, dtype=np.float32).reshape(700, 3)
    with zrecord.Dense.create(tmp_path / "z_dense", np.float32, (3,), codec="raw", data_shards=2,
                              index_parts=True, index_cache=None) as w:
        w.append(dense[:300])
        w.append(dense[300:])
    shards = shards_of(tmp_path / "z_dense")
    rw.write_store(tmp_path / "r_dense", kind="dense", dtype=np.float32, records=list(dense), item_shape=(3,),
                   data_shards=2, assign=shards.__getitem__, index_parts=True)
    ragged = [np.arange(i % 5, dtype=np.int16) for i in range(300)]
    with zrecord.Ragged.create(tmp_path / "z_ragged", np.int16, 1, codec="raw", data_shards=3,
                               index_parts=True, index_cache=None) as w:
        w.append(ragged)
    shards = shards_of(tmp_path / "z_ragged")
    rw.write_store(tmp_path / "r_ragged", kind="ragged", dtype=np.int16, records=ragged, ndim=1,
                   data_shards=3, assign=shards.__getitem__, index_parts=True)
    for kind in ("dense", "ragged"):
        ours, theirs = tmp_path / f"z_{kind}", tmp_path / f"r_{kind}"
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
        assert "index.zrs" in {p.name for p in ours.iterdir()}
        for p in theirs.iterdir():
            assert (ours / p.name).read_bytes() == p.read_bytes(), (kind, p.name)


def test_the_reference_reader_judges_the_store_path_by_enoent_and_enotdir(tmp_path: Path) -> None:
    """[ZR-GEN-005] [ZR-GEN-009] The reference reader, like the core: a path through a regular
    file is not_published (ENOTDIR), a loop of links and a name too long are errors of the
    system (OSError), not not_found."""
    import errno
    import os
    import sys

    sys.path.insert(0, str(HERE))
    from reference.reader import FormatViolation
    from reference.reader import open_store as reference_open

    (tmp_path / "file").write_bytes(b"not a store")
    with pytest.raises(FormatViolation) as info:
        reference_open(tmp_path / "file" / "store")
    assert info.value.code == "not_published"
    with pytest.raises(FormatViolation) as info:
        reference_open(tmp_path / "missing" / "store")
    assert info.value.code == "not_found"
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    for path, code in ((tmp_path / "a", errno.ELOOP), (tmp_path / ("x" * 300), errno.ENAMETOOLONG)):
        with pytest.raises(OSError) as os_info:
            reference_open(path)
        assert os_info.value.errno == code and not isinstance(os_info.value, FormatViolation)


def test_the_reference_reader_bounds_every_block_by_block_maximum_size(tmp_path: Path) -> None:
    """[ZR-COD-013] Raw, RLE and Compressed blocks above Block_Maximum_Size (min(window,
    128 KiB)) are decode, although libzstd's one-shot decoder takes Raw and RLE ones (and,
    before 1.5.6, Compressed ones); two blocks of exactly the window read."""
    import sys

    sys.path.insert(0, str(HERE))
    import cases_v1_1 as cases
    from reference import writer as rw
    from reference.reader import FormatViolation
    from reference.reader import open_store as reference_open

    def block(block_type: int, size: int, last: bool = True) -> bytes:
        return (int(last) | (block_type << 1) | (size << 3)).to_bytes(3, "little")

    payload = bytes(range(256)) * 8
    single_8 = b"\x28\xb5\x2f\xfd\xa0" + (8).to_bytes(4, "little")  # single segment: window 8
    frames = {
        "raw": (cases.windowed_header(2048) + block(0, 2048) + payload, 2048),
        "rle": (cases.windowed_header(2048) + block(1, 2048) + b"x", 2048),
        "compressed": (single_8 + cases.sequence_block(b"abcd", 2, 4), 8),
        "ok": (cases.windowed_header(2048) + block(0, 1024, False) + payload[:1024]
               + block(0, 1024) + payload[1024:], 2048),
    }
    for name, (frame, size) in frames.items():
        rw.write_files(tmp_path / name, rw.build(kind="ragged", dtype_code=3, ndim=1, codec_code=1,
                                                 data_shards=1, records=[rw.Stored((size,), size, frame)]))
        store = reference_open(tmp_path / name)
        if name == "ok":
            assert store.read(0).tobytes() == payload
            continue
        with pytest.raises(FormatViolation) as info:
            store.read(0)
        assert (info.value.code, info.value.rule) == ("decode", "ZR-COD-013"), name


def test_a_match_into_a_dictionarys_tables_reads_as_the_whole_dictionary(tmp_path: Path) -> None:
    """[ZR-COD-019] (e): a match that reaches before a zstd-format dictionary's content but not
    before its first byte is left to the decoder; a reader that returns the record returns the
    bytes of the whole dictionary as history. zrecord and the reference reader (both through a
    prepared dictionary) return it; one byte farther back is decode for both ([ZR-COD-014])."""
    import sys

    sys.path.insert(0, str(HERE))
    import cases_v1_1 as cases
    from reference import writer as rw
    from reference.reader import FormatViolation
    from reference.reader import open_store as reference_open

    dictionary = cases.zstd_dictionary()  # 28 bytes of magic, ID, tables and repeat offsets
    tables = len(dictionary) - 64
    literals = b"abcd"
    for name, reach in (("magic", tables), ("before", tables + 1)):
        offset = len(literals) + 64 + reach
        frame = cases.windowed_header(8) + cases.sequence_block(literals, offset, 4)
        rw.write_files(tmp_path / name, rw.build(kind="ragged", dtype_code=3, ndim=1, codec_code=2, data_shards=1,
                                                 records=[rw.Stored((8,), 8, frame)], dictionary=dictionary))
        if name == "magic":
            want = cases.executed(dictionary, literals, offset, 4)[len(dictionary):]
            assert want[4:] == dictionary[:4]
            with zrecord.open_store(tmp_path / name) as store:
                assert store[0].tobytes() == want
            assert reference_open(tmp_path / name).read(0).tobytes() == want
            continue
        with zrecord.open_store(tmp_path / name) as store, pytest.raises(errors.DecodeError):
            store[0]
        with pytest.raises(FormatViolation) as info:
            reference_open(tmp_path / name).read(0)
        assert info.value.code == "decode"


# ---- datasets (spec section 12): conformance/datasets/ ----------------------------------------

DATASETS = HERE / "datasets"
DATASET_CASES: list[dict[str, Any]] = json.loads((DATASETS / "cases.json").read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("case", DATASET_CASES, ids=[c["name"] for c in DATASET_CASES])
def test_dataset_case(case: dict[str, Any]) -> None:
    """A valid dataset opens with the version, digest, parts and exact records of the case (as
    one batch and record by record); an invalid one raises the exact class of its code at open,
    naming the part for a rule of step 4."""
    path = DATASETS / case["dataset"]
    if case["expect"] == "error":
        with pytest.raises(errors.ZrecordError) as info:
            zrecord.open_dataset(path, version=case["version"]).close()
        assert type(info.value) is EXCEPTIONS[case["error"]], (type(info.value), str(info.value))
        if "ZR-DS-011" in case["spec"]:
            assert "part " in str(info.value)
        return
    with zrecord.open_dataset(path, version=case["version"]) as ds:
        assert (ds.version, ds.digest, len(ds)) == (case["opened_version"], case["digest"], case["record_count"])
        assert list(ds.part_names) == case["parts"]
        want = [np.load(DATASETS / p, allow_pickle=False) for p in case["records"]]
        batch = ds[np.arange(len(ds))]
        for i, w in enumerate(want):
            for got in (ds[i], batch[i]):
                assert got.dtype == w.dtype and got.shape == w.shape and got.tobytes() == w.tobytes(), i
        ds.verify()


def test_the_datasets_manifest_matches_its_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((DATASETS / "cases.schema.json").read_text(encoding="utf-8"))
    manifest = json.loads((DATASETS / "cases.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(manifest)
    assert len({c["name"] for c in manifest["cases"]}) == len(manifest["cases"])
