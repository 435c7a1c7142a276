"""Reference reader and writer of datasets (spec section 12): manifests naming published stores.

Written from the spec alone, beside the reference store reader; never imports zrecord.

    ds = open_dataset(path)            # the latest version; open_dataset(path, version=2)
    ds.read(i), ds.read_all(), ds.verify(), ds.digest
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

import numpy as np

from .reader import DTYPES, PARAMETRIC, FormatViolation, Store, dtype_params, open_store
from .xxh64 import xxh64

MAGIC = bytes([0x89, 0x5A, 0x52, 0x44, 0x53, 0x0D, 0x0A, 0x1A])
KINDS = {"dense": 1, "ragged": 2}
CODECS = {"raw": 0, "zstd": 1, "zstd_dict": 2}
PARTS_MAX = 65536
NAME_MAX = 1024
STORE_RECORDS_MAX = 2**48
DATASET_RECORDS_MAX = 2**56
SIZE_MAX = 96 + 8 * 32 + PARTS_MAX * (32 + NAME_MAX) + 8
# Whole names only (fullmatch: "$" alone also matches before a final newline), ASCII digits
# only ("\d" matches any script's).
MANIFEST_NAME = re.compile(r"dataset-([0-9]{8})\.zrm", re.ASCII)
COMPONENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", re.ASCII)
VERSION_MAX = 99_999_999


def _le(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at:at + size], "little")


def _fail(code: str, rule: str, message: str) -> FormatViolation:
    return FormatViolation(code, rule, message)


@dataclass
class Entry:
    name: str
    record_count: int
    stored_bytes: int
    header_checksum: int


@dataclass
class Manifest:
    version: int
    kind: int
    dtype: int
    ndim: int
    codec: int
    dtype_length: int
    dtype_unit: int
    item_shape: tuple[int, ...]
    entries: list[Entry]


def manifest_name(version: int) -> str:
    return f"dataset-{version:08d}.zrm"


def schema_of(store: Store) -> tuple:
    """A store's schema in the fields of spec section 12.2."""
    code, length, unit = dtype_params(store.dtype)
    shape = tuple(store.item_shape) if store.kind == "dense" else ()
    return (KINDS[store.kind], code, store.ndim, CODECS[store.codec], length, unit, shape)


def header_checksum(path: str) -> int:
    """The store's header checksum: the last u64 of its header.zrh (after open judged it)."""
    with open(os.path.join(path, "header.zrh"), "rb") as f:
        data = f.read()
    return _le(data, len(data) - 8, 8)


def valid_name(name: str) -> bool:
    raw = name.encode("utf-8")
    if len(raw) < 1 or len(raw) > NAME_MAX:
        return False
    return all(COMPONENT.fullmatch(c) and len(c) <= 255 for c in name.split("/"))


# ---- writing (spec 12.2, 12.3) ----------------------------------------------------------------


def build_manifest(version: int, schema: tuple, entries: list[Entry]) -> bytes:
    """The bytes of a manifest; nothing is checked (the conformance generator alters them)."""
    kind, dtype, ndim, codec, length, unit, shape = schema
    body = b"".join(int(d).to_bytes(8, "little") for d in shape)
    for e in entries:
        raw = e.name.encode("utf-8")
        body += (e.record_count.to_bytes(8, "little") + e.stored_bytes.to_bytes(8, "little")
                 + e.header_checksum.to_bytes(8, "little") + len(raw).to_bytes(2, "little")
                 + bytes(6) + raw + bytes((8 - len(raw) % 8) % 8))
    size = 96 + len(body) + 8
    fixed = (MAGIC + (1).to_bytes(2, "little") + (3).to_bytes(2, "little") + bytes(4)
             + size.to_bytes(8, "little") + version.to_bytes(8, "little")
             + len(entries).to_bytes(4, "little") + bytes(4)
             + sum(e.record_count for e in entries).to_bytes(8, "little")
             + sum(e.stored_bytes for e in entries).to_bytes(8, "little")
             + bytes([kind, dtype, ndim, codec]) + length.to_bytes(4, "little") + bytes([unit])
             + bytes(31))
    data = fixed + body
    return data + xxh64(data).to_bytes(8, "little")


def entry_of(dataset: str, name: str) -> tuple[Entry, tuple]:
    """The entry and schema of the published store `name` of the dataset at `dataset`."""
    path = os.path.join(dataset, name)
    store = open_store(path)
    return Entry(name, store.record_count, store.stored_bytes, header_checksum(path)), schema_of(store)


def write_manifest(dataset: str, version: int, names: list[str]) -> bytes:
    """Write manifest `version` of the dataset naming the stores `names` (spec 12.5: complete
    under a temporary name, then linked into place without replacing anything)."""
    pairs = [entry_of(dataset, n) for n in names]
    data = build_manifest(version, pairs[0][1], [e for e, _ in pairs])
    tmp = os.path.join(dataset, "." + manifest_name(version) + ".zr-tmp-ref")
    with open(tmp, "wb") as f:
        f.write(data)
    try:
        os.link(tmp, os.path.join(dataset, manifest_name(version)))
    finally:
        os.unlink(tmp)
    return data


# ---- reading (spec 12.4) ----------------------------------------------------------------------


def decode_manifest(data: bytes, version: int) -> Manifest:
    """Steps 3.1 to 3.11 of spec section 12.4, in order."""
    if len(data) < 8 or data[:8] != MAGIC:
        raise _fail("bad_magic", "ZR-DS-003", "no manifest magic")
    if len(data) < 12:
        raise _fail("corrupt", "ZR-DS-003", "too short for the version")
    if _le(data, 8, 2) != 1:
        raise _fail("unsupported_version", "ZR-DS-004", f"format_major {_le(data, 8, 2)}")
    n = len(data)
    if n < 104 or n > SIZE_MAX or n % 8 != 0 or _le(data, 16, 8) != n:
        raise _fail("corrupt", "ZR-DS-005", f"manifest size {n}")
    if xxh64(data[:-8]) != _le(data, n - 8, 8):
        raise _fail("checksum", "ZR-DS-005", "manifest checksum")
    kind, dtype, ndim, codec = data[56], data[57], data[58], data[59]
    if kind not in (1, 2):
        raise _fail("unsupported", "ZR-DS-005", f"kind {kind}")
    if dtype not in DTYPES and dtype not in PARAMETRIC:
        raise _fail("unsupported", "ZR-DS-005", f"dtype {dtype}")
    if codec not in (0, 1, 2):
        raise _fail("unsupported", "ZR-DS-005", f"codec {codec}")
    if _le(data, 12, 4) or _le(data, 36, 4) or any(data[65:96]):
        raise _fail("corrupt", "ZR-DS-005", "reserved bytes")
    if _le(data, 24, 8) != version:
        raise _fail("corrupt", "ZR-DS-007", f"version {_le(data, 24, 8)} in the file of {version}")
    count = _le(data, 32, 4)
    if count < 1 or count > PARTS_MAX:
        raise _fail("limit", "ZR-DS-008", f"part_count {count}")
    if ndim > 32:
        raise _fail("limit", "ZR-DS-008", f"ndim {ndim}")
    if kind == 2 and ndim == 0:
        raise _fail("corrupt", "ZR-DS-008", "Ragged ndim 0")
    m = Manifest(version, kind, dtype, ndim, codec, _le(data, 60, 4), data[64], (), [])
    _entries(data, m, count)
    _sums(data, m)
    return m


def _entries(data: bytes, m: Manifest, count: int) -> None:
    """Step 3.10: the item shape and the entries fill the manifest exactly."""
    end = len(data) - 8
    at = 96
    if m.kind == 1:
        if at + 8 * m.ndim > end:
            raise _fail("corrupt", "ZR-DS-009", "item shape past the end")
        m.item_shape = tuple(_le(data, at + 8 * i, 8) for i in range(m.ndim))
        at += 8 * m.ndim
    names = set()
    for k in range(count):
        if at + 32 > end:
            raise _fail("corrupt", "ZR-DS-009", f"entry {k} past the end")
        length = _le(data, at + 24, 2)
        padded = (length + 7) // 8 * 8
        if length < 1 or length > NAME_MAX or at + 32 + padded > end:
            raise _fail("corrupt", "ZR-DS-009", f"entry {k} name length {length}")
        if any(data[at + 26:at + 32]) or any(data[at + 32 + length:at + 32 + padded]):
            raise _fail("corrupt", "ZR-DS-009", f"entry {k} reserved or padding")
        try:
            name = data[at + 32:at + 32 + length].decode("utf-8")
        except UnicodeDecodeError:
            raise _fail("corrupt", "ZR-DS-006", f"entry {k} name not UTF-8") from None
        if not valid_name(name) or name in names:
            raise _fail("corrupt", "ZR-DS-006", f"entry {k} name {name!r}")
        names.add(name)
        m.entries.append(Entry(name, _le(data, at, 8), _le(data, at + 8, 8), _le(data, at + 16, 8)))
        at += 32 + padded
    if at != end:
        raise _fail("corrupt", "ZR-DS-009", f"{end - at} bytes after the last entry")


def _sums(data: bytes, m: Manifest) -> None:
    """Step 3.11."""
    for k, e in enumerate(m.entries):
        if e.record_count > STORE_RECORDS_MAX:
            raise _fail("limit", "ZR-DS-010", f"part {k} records")
    total = sum(e.record_count for e in m.entries)
    if total > DATASET_RECORDS_MAX:
        raise _fail("limit", "ZR-DS-010", f"{total} records")
    if total != _le(data, 40, 8) or sum(e.stored_bytes for e in m.entries) != _le(data, 48, 8):
        raise _fail("corrupt", "ZR-DS-010", "sums")


class Dataset:
    def __init__(self, path: str, m: Manifest, stores: list[Store]) -> None:
        self.path = path
        self.manifest = m
        self.stores = stores
        self.starts = [0]
        for e in m.entries:
            self.starts.append(self.starts[-1] + e.record_count)
        self.record_count = self.starts[-1]
        sums = b"".join(e.header_checksum.to_bytes(8, "little") for e in m.entries)
        self.digest = f"{xxh64(sums):016x}"

    def read(self, i: int) -> np.ndarray:
        if not 0 <= i < self.record_count:
            raise IndexError(i)
        k = max(j for j in range(len(self.stores)) if self.starts[j] <= i and
                self.starts[j + 1] > i)
        return self.stores[k].read(i - self.starts[k])

    def read_all(self) -> list[np.ndarray]:
        return [r for s in self.stores for r in s.read_all()]

    def verify(self) -> None:
        for s in self.stores:
            s.verify()


def _listing(path: str) -> list[str]:
    """Step 1: the dataset's directory (as [ZR-GEN-005])."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise _fail("not_found", "ZR-DS-001", "nothing at " + path) from None
    except NotADirectoryError:
        raise _fail("not_published", "ZR-DS-001", path + " is not a directory") from None
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def _read_manifest(path: str, version: int | None) -> tuple[bytes, int]:
    """Step 2: the manifest of `version`, or of the highest version present."""
    names = _listing(path)
    if version is None:
        found = [int(mm.group(1)) for mm in map(MANIFEST_NAME.fullmatch, names) if mm and int(mm.group(1)) > 0]
        if not found:
            raise _fail("not_published", "ZR-DS-002", "no manifest in " + path)
        version = max(found)
    if not 1 <= version <= VERSION_MAX:  # [ZR-DS-002]: no file can hold another version
        raise _fail("not_found", "ZR-DS-002", f"version {version} is not in 1..{VERSION_MAX}")
    full = os.path.join(path, manifest_name(version))
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        raise _fail("not_found", "ZR-DS-002", "no manifest " + full) from None
    if not stat.S_ISREG(st.st_mode):
        raise _fail("corrupt", "ZR-DS-002", full + " is not a regular file")
    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read(SIZE_MAX + 1), version


def open_dataset(path: str | os.PathLike[str], version: int | None = None, *,
                 by_part: bool = False) -> Dataset:
    """Steps 1 to 4 of spec section 12.4."""
    path = os.fspath(path)
    data, version = _read_manifest(path, version)
    m = decode_manifest(data, version)
    stores = []
    schema = (m.kind, m.dtype, m.ndim, m.codec, m.dtype_length, m.dtype_unit, m.item_shape)
    for k, e in enumerate(m.entries):
        where = os.path.join(path, e.name)
        try:
            store = open_store(where, by_part=by_part)
        except FormatViolation as exc:
            if exc.code in ("not_found", "not_published"):
                raise _fail("corrupt", "ZR-DS-011", f"part {k} ({e.name}) is not published") from None
            raise
        if header_checksum(where) != e.header_checksum:
            raise _fail("checksum", "ZR-DS-011", f"part {k} ({e.name}) is another store")
        if (store.record_count, store.stored_bytes) != (e.record_count, e.stored_bytes):
            raise _fail("corrupt", "ZR-DS-011", f"part {k} ({e.name}) counts")
        if schema_of(store) != schema:
            raise _fail("corrupt", "ZR-DS-011", f"part {k} ({e.name}) schema")
        stores.append(store)
    return Dataset(path, m, stores)
