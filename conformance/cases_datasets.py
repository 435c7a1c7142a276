"""The conformance cases of datasets (spec section 12): conformance/datasets/.

Each case is a dataset folder: its parts (stores built by the reference writer, a few by
zrecord) and its manifests (built by the reference manifest writer, conformance/reference/
dataset.py). A valid case names the version a reader opens (`version`: null for the latest),
its records (one .npy each), its digest and its parts. An invalid case breaks one rule of
spec section 12.4, every checksum it does not concern re-sealed, and gives the code a reader
must report when it opens the dataset (all dataset rules are judged at open: phase "open").

Manifest layout:

    {"format": "zrecord-dataset", "format_version": [1, 3], "error_codes": {...},
     "cases": [{"name", "expect": "valid"|"error", "dataset": "valid/NAME/dataset",
                "version": null|N, "spec": [...], "description", "writer",
                valid: "record_count", "parts", "digest", "records": [paths];
                error: "error", "error_number"}]}
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from reference import dataset as rd
from reference import reader as ref
from reference import writer as rw
from reference.xxh64 import xxh64


def _records(n: int, seed: int) -> list[np.ndarray]:
    return [np.arange(4, dtype=np.float32).reshape(2, 2) * 0.5 + 10 * seed + i for i in range(n)]


def _ragged(n: int, seed: int) -> list[np.ndarray]:
    return [np.arange((seed + i) % 4, dtype=np.int16) - 3 * seed for i in range(n)]


def _part(path: Path, records: list[np.ndarray], **kw: Any) -> None:
    kind = kw.pop("kind", "dense")
    if kind == "dense":
        files = rw.build_store(kind="dense", dtype=kw.pop("dtype", "float32"),
                               item_shape=kw.pop("item_shape", (2, 2)), records=records, **kw)
    else:
        files = rw.build_store(kind="ragged", dtype="int16", ndim=1, records=records, **kw)
    path.parent.mkdir(parents=True, exist_ok=True)
    rw.write_files(path, files)


class DatasetCases:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.cases: list[dict[str, Any]] = []

    def _dir(self, group: str, name: str) -> Path:
        d = self.out / group / name
        assert not d.exists(), name
        d.mkdir(parents=True)
        return d

    def valid(self, name: str, *, spec: list[str], description: str,
              make: Callable[[Path], None], version: int | None = None,
              writer: str = "reference") -> None:
        d = self._dir("valid", name)
        make(d / "dataset")
        ds = rd.open_dataset(d / "dataset", version)
        ds.verify()
        (d / "expected").mkdir()
        paths = []
        for i, rec in enumerate(ds.read_all()):
            p = d / "expected" / f"{i:04d}.npy"
            np.save(p, np.array(rec, order="C"), allow_pickle=False)
            paths.append(p.relative_to(self.out).as_posix())
        self.cases.append({
            "name": name, "expect": "valid", "dataset": (d / "dataset").relative_to(self.out).as_posix(),
            "version": version, "writer": writer, "spec": sorted(set(spec)),
            "description": description, "opened_version": ds.manifest.version,
            "record_count": ds.record_count, "parts": [e.name for e in ds.manifest.entries],
            "digest": ds.digest, "records": paths})

    def invalid(self, name: str, *, error: str, spec: list[str], description: str,
                make: Callable[[Path], None], version: int | None = None) -> None:
        d = self._dir("invalid", name)
        make(d / "dataset")
        self.cases.append({
            "name": name, "expect": "error", "dataset": (d / "dataset").relative_to(self.out).as_posix(),
            "version": version, "writer": "reference", "spec": sorted({*spec, "ZR-ERR-001"}),
            "description": description, "error": error, "error_number": ref.ERROR_CODES_1_1[error],
            "phase": "open"})

    def manifest(self) -> dict[str, Any]:
        return {"$schema": "./cases.schema.json", "format": "zrecord-dataset",
                "format_version": [1, 3], "spec": "spec/format-v1.md",
                "error_codes": ref.ERROR_CODES_1_1, "cases": self.cases}


# ---- bases ----------------------------------------------------------------------------------


def three_parts(path: Path) -> None:
    """Dense float32 (2, 2) raw parts of 3, 0 and 4 records; version 1 names them in order."""
    path.mkdir()
    for name, n, seed in (("a", 3, 1), ("b", 0, 2), ("c", 4, 3)):
        _part(path / name, _records(n, seed))
    rd.write_manifest(str(path), 1, ["a", "b", "c"])


def _altered(change: Callable[[bytearray], None], reseal: bool = True) -> Callable[[Path], None]:
    """`three_parts`, its manifest then changed by `change` (and re-sealed)."""
    def make(path: Path) -> None:
        three_parts(path)
        m = path / rd.manifest_name(1)
        data = bytearray(m.read_bytes())
        change(data)
        if reseal and len(data) >= 16:
            data[-8:] = xxh64(bytes(data[:-8])).to_bytes(8, "little")
        m.write_bytes(bytes(data))
    return make


def _put(at: int, fmt: str, value: int) -> Callable[[bytearray], None]:
    def change(data: bytearray) -> None:
        struct.pack_into(fmt, data, at, value)
    return change


def _rebuilt(edit: Callable[[list[rd.Entry]], list[rd.Entry]], schema: tuple | None = None,
             version: int = 1, file_version: int = 1) -> Callable[[Path], None]:
    """`three_parts` with a manifest built anew from edited entries (and schema)."""
    def make(path: Path) -> None:
        three_parts(path)
        pairs = [rd.entry_of(str(path), n) for n in ("a", "b", "c")]
        data = rd.build_manifest(version, schema or pairs[0][1], edit([e for e, _ in pairs]))
        (path / rd.manifest_name(1)).unlink()
        (path / rd.manifest_name(file_version)).write_bytes(data)
    return make


ENTRY_AT = 96 + 16  # the first entry, after the fixed part and the item shape (2, 2)


# ---- cases ----------------------------------------------------------------------------------


def valid_cases(g: DatasetCases) -> None:
    g.valid("dense_three_parts", spec=["ZR-DS-002", "ZR-DS-006", "ZR-DS-011", "ZR-DS-012"],
            description="three Dense parts (one empty) in order; records numbered across them",
            make=three_parts)

    def ragged(path: Path) -> None:
        path.mkdir()
        _part(path / "first", _ragged(5, 1), kind="ragged", codec="zstd")
        _part(path / "sub" / "dir" / "second", _ragged(3, 2), kind="ragged", codec="zstd")
        rd.write_manifest(str(path), 1, ["sub/dir/second", "first"])
    g.valid("ragged_parts_in_subfolders", spec=["ZR-DS-006", "ZR-DS-012"],
            description="Ragged zstd parts, one in a subfolder, listed in another order than "
                        "their names sort", make=ragged)

    def versions(path: Path) -> None:
        three_parts(path)
        _part(path / "d", _records(2, 4))
        rd.write_manifest(str(path), 2, ["a", "b", "c", "d"])
        rd.write_manifest(str(path), 7, ["d", "a"])
    g.valid("latest_of_three_versions", spec=["ZR-DS-002"],
            description="versions 1, 2 and 7: opening without a version opens 7 (the highest)",
            make=versions)
    g.valid("an_earlier_version", spec=["ZR-DS-002", "ZR-DS-013"], version=2,
            description="the same folder, version 2 asked for: its four parts", make=versions)

    def ignored_entries(path: Path) -> None:
        three_parts(path)
        (path / "notes.txt").write_text("not part of the dataset\n")
        (path / ".dataset-00000002.zrm.zr-tmp-xyz").write_bytes(b"half a manifest")
        (path / "dataset-1.zrm").write_bytes(b"not a manifest's name")
        _part(path / "unlisted", _records(1, 9))
    g.valid("other_entries_ignored", spec=["ZR-DS-002"],
            description="a temporary manifest, names that are no manifest's and a store no "
                        "manifest names lie beside the dataset", make=ignored_entries)

    def dictionaries(path: Path) -> None:
        path.mkdir()
        for name, seed in (("x", 1), ("y", 2)):
            recs = _records(3, seed)
            _part(path / name, recs, codec="zstd", data_shards=2)
        rd.write_manifest(str(path), 1, ["x", "y"])
    g.valid("zstd_parts_with_two_shards", spec=["ZR-DS-011"],
            description="zstd parts of two shards each", make=dictionaries)

    _valid_part_format_cases(g)

    def by_zrecord(path: Path) -> None:
        import zrecord

        path.mkdir()
        for name, seed in (("p0", 5), ("p1", 6)):
            with zrecord.Dense.create(path / name, np.float32, (2, 2), codec="raw", data_shards=1,
                                      index_parts=False) as w:
                w.append(np.stack(_records(2, seed)))
        zrecord.publish_dataset(path, ["p0", "p1"])
        ours = (path / rd.manifest_name(1)).read_bytes()
        pairs = [rd.entry_of(str(path), n) for n in ("p0", "p1")]
        theirs = rd.build_manifest(1, pairs[0][1], [e for e, _ in pairs])
        assert ours == theirs, "zrecord's manifest differs from the reference writer's"
    g.valid("written_by_zrecord", spec=["ZR-DS-013"], writer="zrecord",
            description="parts and manifest written by zrecord; the manifest is byte for byte "
                        "what the reference writer builds", make=by_zrecord)


def _valid_part_format_cases(g: DatasetCases) -> None:
    def index_parts(path: Path) -> None:
        # Parts of format 1.2 (index parts, spec 4.1): a reader by part judges their index
        # blocks as it reads them, and the manifest names them as any other part.
        path.mkdir()
        _part(path / "small", _records(3, 1), index_parts=(0, 0))
        _part(path / "large", _records(40, 2), index_parts=(2, 1), data_shards=2)
        _part(path / "default_shifts", _records(5, 3), index_parts=True)
        rd.write_manifest(str(path), 1, ["large", "small", "default_shifts"])
    g.valid("parts_with_index_parts", spec=["ZR-DS-011", "ZR-DS-012"],
            description="Dense parts of format 1.2, with index parts of several sizes, in "
                        "another order than written", make=index_parts)


def invalid_cases(g: DatasetCases) -> None:
    _invalid_location_cases(g)
    _invalid_manifest_cases(g)
    _invalid_entry_cases(g)
    _invalid_part_cases(g)


def _invalid_location_cases(g: DatasetCases) -> None:
    g.invalid("nothing_there", error="not_found", spec=["ZR-DS-001"],
              description="no entry at the dataset's path", make=lambda p: None)
    g.invalid("a_file", error="not_published", spec=["ZR-DS-001"],
              description="a regular file at the dataset's path",
              make=lambda p: p.write_bytes(b"x"))

    def no_manifest(path: Path) -> None:
        three_parts(path)
        (path / rd.manifest_name(1)).unlink()
    g.invalid("no_manifest", error="not_published", spec=["ZR-DS-002"],
              description="parts, but no manifest", make=no_manifest)
    g.invalid("version_not_there", error="not_found", spec=["ZR-DS-002"], version=2,
              description="version 2 asked for; only version 1 exists", make=three_parts)

    def linked(path: Path) -> None:
        three_parts(path)
        m = path / rd.manifest_name(1)
        os.rename(m, path / "real.zrm")
        os.symlink("real.zrm", m)
    g.invalid("manifest_is_a_link", error="corrupt", spec=["ZR-DS-002"],
              description="the manifest is a symbolic link to a valid manifest", make=linked)

    def directory(path: Path) -> None:
        three_parts(path)
        (path / rd.manifest_name(1)).unlink()
        (path / rd.manifest_name(1)).mkdir()
        # Not empty: git keeps no empty directory, and the case must survive a clone.
        (path / rd.manifest_name(1) / "keep").write_text("a directory, not a manifest\n")
    g.invalid("manifest_is_a_directory", error="corrupt", spec=["ZR-DS-002"],
              description="a directory in the manifest's place", make=directory)


def _invalid_manifest_cases(g: DatasetCases) -> None:
    def at(offset: int, value: bytes) -> Callable[[bytearray], None]:
        def change(d: bytearray) -> None:
            d[offset:offset + len(value)] = value
        return change

    def cut(n: int) -> Callable[[bytearray], None]:
        def change(d: bytearray) -> None:
            del d[n:]
        return change
    cases: list[tuple[str, str, str, str, Callable[[bytearray], None], bool]] = [
        ("bad_magic", "bad_magic", "ZR-DS-003", "the magic's fourth byte changed", at(3, b"X"), True),
        ("seven_bytes", "bad_magic", "ZR-DS-003", "a manifest of 7 bytes", cut(7), False),
        ("ten_bytes", "corrupt", "ZR-DS-003", "the magic and 2 bytes", cut(10), False),
        ("major_2", "unsupported_version", "ZR-DS-004", "format_major 2", _put(8, "<H", 2), True),
        ("major_0_and_bad_checksum", "unsupported_version", "ZR-DS-004",
         "format_major 0 and a wrong checksum: the version is judged first", _put(8, "<H", 0), False),
        ("size_field_wrong", "corrupt", "ZR-DS-005", "manifest_size 8 more than the file",
         lambda d: struct.pack_into("<Q", d, 16, len(d) + 8), True),
        ("truncated", "corrupt", "ZR-DS-005", "the last 8 bytes cut off", cut(-8), False),
        ("checksum", "checksum", "ZR-DS-005", "a byte of the version changed, not re-sealed",
         at(25, b"\x01"), False),
        ("unknown_kind", "unsupported", "ZR-DS-005", "kind 3", at(56, b"\x03"), True),
        ("unknown_dtype", "unsupported", "ZR-DS-005", "dtype code 99", at(57, b"\x63"), True),
        ("unknown_codec", "unsupported", "ZR-DS-005", "codec code 3", at(59, b"\x03"), True),
        ("unknown_codec_and_reserved", "unsupported", "ZR-DS-005",
         "codec 3 and reserved2 non-zero: codes are judged before reserved bytes",
         lambda d: (d.__setitem__(59, 3), d.__setitem__(90, 1)), True),
        ("reserved0", "corrupt", "ZR-DS-005", "reserved0 non-zero", at(12, b"\x01"), True),
        ("reserved1", "corrupt", "ZR-DS-005", "reserved1 non-zero", at(39, b"\x80"), True),
        ("reserved2", "corrupt", "ZR-DS-005", "the last byte of reserved2 non-zero", at(95, b"\x01"), True),
        ("version_differs_from_name", "corrupt", "ZR-DS-007",
         "the file dataset-00000001.zrm holds version 2", _put(24, "<Q", 2), True),
        ("no_parts", "limit", "ZR-DS-008", "part_count 0", _put(32, "<I", 0), True),
        ("too_many_parts", "limit", "ZR-DS-008", "part_count 65,537", _put(32, "<I", 65537), True),
        ("ndim_33", "limit", "ZR-DS-008", "ndim 33", at(58, b"\x21"), True),
        ("more_parts_than_entries", "corrupt", "ZR-DS-009", "part_count 4 with three entries",
         _put(32, "<I", 4), True),
        ("fewer_parts_than_entries", "corrupt", "ZR-DS-009",
         "part_count 2 with three entries: bytes follow the last entry read", _put(32, "<I", 2), True),
        ("record_count_differs", "corrupt", "ZR-DS-010", "record_count one more than the entries' sum",
         _put(40, "<Q", 8), True),
        ("stored_bytes_differs", "corrupt", "ZR-DS-010", "stored_bytes one less than the entries' sum",
         lambda d: struct.pack_into("<Q", d, 48, struct.unpack_from("<Q", d, 48)[0] - 1), True),
    ]
    for name, error, rule, description, change, reseal in cases:
        g.invalid(name, error=error, spec=[rule], description=description,
                  make=_altered(change, reseal))
    def ragged_ndim_0(path: Path) -> None:
        three_parts(path)
        pairs = [rd.entry_of(str(path), n) for n in ("a", "b", "c")]
        data = rd.build_manifest(1, (2, 1, 0, 0, 0, 0, ()), [e for e, _ in pairs])
        (path / rd.manifest_name(1)).write_bytes(data)
    g.invalid("ragged_ndim_0", error="corrupt", spec=["ZR-DS-008"],
              description="a Ragged schema of ndim 0", make=ragged_ndim_0)


def _invalid_entry_cases(g: DatasetCases) -> None:
    def rename(name: str) -> Callable[[list[rd.Entry]], list[rd.Entry]]:
        def edit(entries: list[rd.Entry]) -> list[rd.Entry]:
            entries[1].name = name
            return entries
        return edit
    for case, name, why in (("name_dot_dot", "../b", "a component '..'"),
                            ("name_hidden", ".b", "a name starting with '.'"),
                            ("name_empty_component", "x//b", "an empty component"),
                            ("name_trailing_slash", "b/", "a trailing '/'"),
                            ("name_space", "b c", "a space"),
                            ("name_absolute", "/b", "a leading '/'"),
                            ("name_twice", "a", "the name of the entry before"),
                            ("name_trailing_newline", "b\n", "a newline after its last character"),
                            ("name_non_ascii", "b\u00e9", "a letter outside ASCII (UTF-8 'é')")):
        g.invalid(case, error="corrupt", spec=["ZR-DS-006"], make=_rebuilt(rename(name)),
                  description=f"the second entry's name has {why}")
    g.invalid("name_length_0", error="corrupt", spec=["ZR-DS-009"],
              description="the first entry's name_length is 0",
              make=_altered(_put(ENTRY_AT + 24, "<H", 0)))
    g.invalid("name_past_the_end", error="corrupt", spec=["ZR-DS-009"],
              description="the last entry's name_length runs into the checksum",
              make=_altered(lambda d: struct.pack_into("<H", d, len(d) - 8 - 8 - 32 + 24, 9)))
    g.invalid("entry_reserved", error="corrupt", spec=["ZR-DS-009"],
              description="a reserved byte of the first entry is non-zero",
              make=_altered(_put(ENTRY_AT + 31, "<B", 1)))
    g.invalid("name_padding", error="corrupt", spec=["ZR-DS-009"],
              description="the padding after the first entry's name is non-zero",
              make=_altered(_put(ENTRY_AT + 32 + 1, "<B", 0x41)))

    def huge(entries: list[rd.Entry]) -> list[rd.Entry]:
        entries[0].record_count = 2**48 + 1
        return entries
    g.invalid("part_records_over_limit", error="limit", spec=["ZR-DS-010"], make=_rebuilt(huge),
              description="an entry gives 2^48 + 1 records (sums consistent)")

    def many(entries: list[rd.Entry]) -> list[rd.Entry]:
        return [rd.Entry(f"p{k}", 2**48, 0, 0) for k in range(257)]
    g.invalid("dataset_records_over_limit", error="limit", spec=["ZR-DS-010"], make=_rebuilt(many),
              description="257 entries of 2^48 records each: more than 2^56 in all")


def _invalid_part_cases(g: DatasetCases) -> None:
    def missing(path: Path) -> None:
        three_parts(path)
        shutil.rmtree(path / "c")
    g.invalid("part_missing", error="corrupt", spec=["ZR-DS-011"], make=missing,
              description="part c's folder is gone")

    def unpublished(path: Path) -> None:
        three_parts(path)
        (path / "c" / "header.zrh").unlink()
    g.invalid("part_not_published", error="corrupt", spec=["ZR-DS-011"], make=unpublished,
              description="part c has no header.zrh")

    def replaced(path: Path) -> None:
        three_parts(path)
        shutil.rmtree(path / "c")
        _part(path / "c", _records(4, 8))
    g.invalid("part_replaced", error="checksum", spec=["ZR-DS-011"], make=replaced,
              description="part c is another store of the same size and schema")

    def reordered(path: Path) -> None:
        three_parts(path)
        os.rename(path / "a", path / "t")
        os.rename(path / "c", path / "a")
        os.rename(path / "t", path / "c")
    g.invalid("parts_swapped", error="checksum", spec=["ZR-DS-011"], make=reordered,
              description="parts a and c swapped on disk")

    def bad_header(path: Path) -> None:
        three_parts(path)
        h = path / "b" / "header.zrh"
        h.write_bytes(b"\x00" + h.read_bytes()[1:])
    g.invalid("part_bad_magic", error="bad_magic", spec=["ZR-DS-011"], make=bad_header,
              description="part b's header does not start with the magic: the part's own code")

    def other_schema(path: Path) -> None:
        three_parts(path)
        _part(path / "ints", [np.zeros((2, 2), np.int32)] * 4, dtype="int32")
        pairs = [rd.entry_of(str(path), n) for n in ("a", "ints")]
        data = rd.build_manifest(1, pairs[0][1], [e for e, _ in pairs])
        (path / rd.manifest_name(1)).write_bytes(data)
    g.invalid("part_of_another_schema", error="corrupt", spec=["ZR-DS-011"], make=other_schema,
              description="the second part is int32, the manifest's schema float32 (its entry "
                          "right)")

    _invalid_schema_cases(g)

    def counts(entries: list[rd.Entry]) -> list[rd.Entry]:
        entries[0].record_count += 1
        entries[2].record_count -= 1
        return entries
    g.invalid("part_counts_differ", error="corrupt", spec=["ZR-DS-011"], make=_rebuilt(counts),
              description="part a's entry gives one record more, c's one less (sums consistent, "
                          "header checksums right)")


def _invalid_schema_cases(g: DatasetCases) -> None:
    """A part whose schema differs from the manifest's in one field other than dtype (the
    manifest written from the first part's schema, the entries right)."""
    def other(name: str, **kw: Any) -> Callable[[Path], None]:
        def make(path: Path) -> None:
            three_parts(path)
            _part(path / name, _records(2, 7) if "item_shape" not in kw else
                  [np.zeros(kw["item_shape"], np.float32)] * 2, **kw)
            pairs = [rd.entry_of(str(path), n) for n in ("a", name)]
            data = rd.build_manifest(1, pairs[0][1], [e for e, _ in pairs])
            (path / rd.manifest_name(1)).write_bytes(data)
        return make
    for case, kw, why in (("part_of_another_item_shape", {"item_shape": (4,)}, "item shape (4,)"),
                          ("part_of_another_codec", {"codec": "zstd"}, "codec zstd")):
        g.invalid(case, error="corrupt", spec=["ZR-DS-011"], make=other("odd", **kw),
                  description=f"the second part has {why}, the manifest's schema the first "
                              "part's (float32 (2, 2) raw); its entry right")


# ---- writing the folder ------------------------------------------------------------------------


def generate(out: Path) -> None:
    g = DatasetCases(out)
    valid_cases(g)
    invalid_cases(g)
    (out / "cases.json").write_text(json.dumps(g.manifest(), indent=1) + "\n")


if __name__ == "__main__":  # pragma: no cover - generate.py runs it
    sys.exit("run conformance/generate.py")
