"""The dataset manifest (spec §12): an immutable, checksummed list of published stores, the
*parts* of one dataset, in order. This module is zrecord's one writer and reader of its bytes.

Invariants of this module:
- ``decode`` judges the manifest's bytes on their own in the order of spec §12.4 (steps 3.1 to
  3.12) and raises the exception of the first rule broken, naming the manifest and the rule;
  nothing here opens a part (``_dataset`` does, step 4).
- ``encode(decode(b)) == b`` for every manifest ``decode`` accepts: one byte layout per list of
  parts, so two writers of the same parts in the same order write the same bytes (less the
  version).
- A dataset's ``digest`` depends on its parts' header checksums in order and on nothing else:
  copies of a dataset, wherever their parts are named or kept, have the same digest, and any
  part replaced, added, removed or moved changes it.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from zrecord import _native
from zrecord._dtypes import (
    CODEC_NAMES,
    KIND_DENSE,
    KIND_RAGGED,
    NDIM_MAX,
    codec_code,
    dtype_code,
    dtype_code_known,
    dtype_from_info,
    item_shape_tuple,
    ndim_value,
)
from zrecord.errors import (
    BadMagicError,
    ChecksumError,
    CorruptStoreError,
    LimitError,
    UnsupportedError,
    UnsupportedVersionError,
)

MAGIC = b"\x89ZRDS\r\n\x1a"
FORMAT = (1, 3)
FIXED_SIZE = 96
ENTRY_SIZE = 32
PARTS_MAX = 1 << 16
NAME_BYTES_MAX = 1024
PART_RECORDS_MAX = 1 << 48
RECORDS_MAX = 1 << 56
VERSION_MAX = 99_999_999
# The largest manifest: the fixed part, a Dense shape of NDIM_MAX axes, PARTS_MAX entries with
# the longest names, the checksum.
SIZE_MAX = FIXED_SIZE + 8 * NDIM_MAX + PARTS_MAX * (ENTRY_SIZE + NAME_BYTES_MAX) + 8

# A manifest's file (or object) name in the dataset's folder: the version in 8 digits.
NAME_PATTERN = re.compile(r"dataset-([0-9]{8})\.zrm")
# A part's name: path components joined by "/", each of these characters, none starting with
# "." (so never "." or "..", nor a writer's temporary folder).
_COMPONENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")

_FIXED = struct.Struct("<8sHHIQQIIQQBBBBIB31s")
_ENTRY = struct.Struct("<QQQH6s")


def file_name(version: int) -> str:
    """The name of version `version`'s manifest: ``dataset-00000001.zrm`` for version 1."""
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)):
        # 2.0 failed in the format string, and True was read as version 1.
        raise TypeError(f"a dataset version is an int in 1..{VERSION_MAX:,}; got {version!r}")
    if not 1 <= version <= VERSION_MAX:
        raise ValueError(f"a dataset version is 1..{VERSION_MAX:,}; got {version}")
    return f"dataset-{version:08d}.zrm"


def version_of(name: str) -> int | None:
    """The version a manifest file name gives, or None for a name that is no manifest's."""
    match = NAME_PATTERN.fullmatch(name)
    version = int(match.group(1)) if match else 0
    return version if version >= 1 else None


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a part (spec [ZR-DS-006]), or None when it can."""
    raw = name.encode("utf-8", "surrogatepass")
    if not 1 <= len(raw) <= NAME_BYTES_MAX:
        return f"it is {len(raw)} bytes long (1..{NAME_BYTES_MAX} allowed)"
    for component in name.split("/"):
        if not _COMPONENT.fullmatch(component):
            return (f"its component {component!r} is not 1..255 of the characters A-Z a-z 0-9 "
                    "'.' '_' '-' not starting with '.'")
    return None


@dataclass(frozen=True)
class Schema:
    """What every part of a dataset shares: the fields of spec §12.2 (codes of §3)."""

    kind: int
    dtype: int
    ndim: int
    codec: int
    dtype_length: int
    dtype_unit: int
    item_shape: tuple[int, ...] | None  # Dense only

    @classmethod
    def of_info(cls, info: dict[str, object]) -> Schema:
        """The schema of a store, from its reader's native ``info()``."""
        kind = int(info["kind"])  # type: ignore[call-overload]
        shape = info["item_shape"]
        return cls(kind, int(info["dtype"]), int(info["ndim"]),  # type: ignore[call-overload]
                   int(info["codec"]), int(info["dtype_length"]),  # type: ignore[call-overload]
                   int(info["dtype_unit"]),  # type: ignore[call-overload]
                   tuple(int(d) for d in shape) if kind == KIND_DENSE and shape is not None  # type: ignore[attr-defined]
                   else None)

    @classmethod
    def of_arguments(cls, dtype: Any, item_shape: Any, ndim: Any, codec: Any,
                     dict_bytes: Any) -> Schema:
        """The schema of a store that ``Dense.create`` (`item_shape` given) or
        ``Ragged.create`` (`ndim`) would write with these arguments, which are checked as they
        check them."""
        _, code, length, unit = dtype_code(dtype)
        codec_number = codec_code(codec, dict_bytes)[0]
        if item_shape is not None:
            shape = item_shape_tuple(item_shape)
            return cls(KIND_DENSE, code, len(shape), codec_number, length, unit, shape)
        return cls(KIND_RAGGED, code, ndim_value(ndim), codec_number, length, unit, None)

    def describe(self) -> str:
        """``Dense uint8 (3, 32, 32) zstd``: the schema as a person reads it."""
        try:
            dtype = str(dtype_from_info(self.dtype, self.dtype_length, self.dtype_unit))
        except (KeyError, ValueError, TypeError):  # a schema no reader could open: its codes
            dtype = f"dtype code {self.dtype}"
        kind = "Dense" if self.kind == KIND_DENSE else "Ragged"
        shape = str(self.item_shape) if self.item_shape is not None else f"ndim={self.ndim}"
        return f"{kind} {dtype} {shape} {CODEC_NAMES.get(self.codec, self.codec)}"


@dataclass(frozen=True)
class Part:
    """One entry of a manifest: the part's name (relative to the dataset) and what its header
    says (spec §12.3)."""

    name: str
    records: int
    stored_bytes: int
    header_checksum: int


@dataclass(frozen=True)
class Manifest:
    """A decoded manifest: its version, the parts' shared schema and the parts in order."""

    version: int
    schema: Schema
    parts: tuple[Part, ...]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.parts)

    @property
    def stored_bytes(self) -> int:
        return sum(p.stored_bytes for p in self.parts)

    @property
    def digest(self) -> str:
        return digest_of(p.header_checksum for p in self.parts)


def digest_of(header_checksums: object) -> str:
    """A dataset's identity ([ZR-DS-012]): XXH64 of its parts' header checksums, each a u64
    little-endian, in order; 16 hex digits."""
    sums = np.fromiter(header_checksums, dtype="<u8")  # type: ignore[call-overload]
    return f"{_native.xxh64(sums.view(np.uint8)):016x}"


def encode(manifest: Manifest) -> bytes:
    """The bytes of `manifest` (spec §12.2, §12.3)."""
    schema = manifest.schema
    shape = schema.item_shape if schema.kind == KIND_DENSE else ()
    body = [b"", struct.pack(f"<{len(shape or ())}Q", *(shape or ()))]
    for part in manifest.parts:
        name = part.name.encode("utf-8")
        body.append(_ENTRY.pack(part.records, part.stored_bytes, part.header_checksum, len(name),
                                bytes(6)))
        body.append(name + bytes(-len(name) % 8))
    size = FIXED_SIZE + sum(len(b) for b in body) + 8
    body[0] = _FIXED.pack(MAGIC, FORMAT[0], FORMAT[1], 0, size, manifest.version,
                          len(manifest.parts), 0, manifest.records, manifest.stored_bytes,
                          schema.kind, schema.dtype, schema.ndim, schema.codec,
                          schema.dtype_length, schema.dtype_unit, bytes(31))
    data = b"".join(body)
    return data + struct.pack("<Q", _xxh64(data))


def _xxh64(data: bytes) -> int:
    return int(_native.xxh64(np.frombuffer(data, dtype=np.uint8)))


def decode(data: bytes, where: str, version: int | None) -> Manifest:
    """The manifest whose bytes are `data`, judged on their own (spec §12.4, steps 3.1 to 3.12;
    `version` is the number its file name gives, None where it was given no name), or the
    exception of the first rule broken. `where` names the manifest in messages."""
    if len(data) < 8 or data[:8] != MAGIC:
        raise BadMagicError(f"{where}: not a dataset manifest: it does not start with the "
                            f"manifest magic {MAGIC!r} [ZR-DS-003]")
    if len(data) < 12:
        raise CorruptStoreError(f"{where}: {len(data)} bytes, too short to hold the format "
                                "version [ZR-DS-003]")
    major, minor = struct.unpack_from("<HH", data, 8)
    if major != FORMAT[0]:
        raise UnsupportedVersionError(f"{where}: manifest format {major}.{minor}; this reader "
                                      f"reads format {FORMAT[0]} [ZR-DS-004]")
    size = struct.unpack_from("<Q", data, 16)[0] if len(data) >= 24 else None
    if not FIXED_SIZE + 8 <= len(data) <= SIZE_MAX or size != len(data) or len(data) % 8:
        raise CorruptStoreError(f"{where}: {len(data)} bytes, where a manifest is "
                                f"{FIXED_SIZE + 8}..{SIZE_MAX} bytes, a multiple of 8, and "
                                f"exactly its manifest_size ({size}) [ZR-DS-005]")
    stored_sum = struct.unpack_from("<Q", data, len(data) - 8)[0]
    if _xxh64(data[:-8]) != stored_sum:
        raise ChecksumError(f"{where}: the manifest does not match its checksum [ZR-DS-005]")
    (_, _, _, reserved0, _, number, count, reserved1, records, stored, kind, dtype, ndim,
     codec, dtype_length, dtype_unit, reserved2) = _FIXED.unpack_from(data, 0)
    schema = Schema(kind, dtype, ndim, codec, dtype_length, dtype_unit, None)
    _judge_codes(schema, where)
    if reserved0 or reserved1 or any(reserved2):
        raise CorruptStoreError(f"{where}: reserved bytes of the manifest are not zero [ZR-DS-005]")
    if version is not None and number != version:
        raise CorruptStoreError(f"{where}: the manifest holds version {number}, its name says "
                                f"{version} [ZR-DS-007]")
    if not 1 <= count <= PARTS_MAX:
        raise LimitError(f"{where}: {count} parts; a dataset has 1..{PARTS_MAX:,} [ZR-DS-008]")
    if ndim > NDIM_MAX:
        raise LimitError(f"{where}: ndim {ndim} exceeds ndim_max {NDIM_MAX} [ZR-DS-008]")
    if kind == KIND_RAGGED and ndim == 0:
        raise CorruptStoreError(f"{where}: a Ragged dataset of ndim 0 [ZR-DS-008]")
    shape, parts = _entries(data, where, schema, count)
    manifest = Manifest(number, Schema(kind, dtype, ndim, codec, dtype_length, dtype_unit, shape),
                        parts)
    _judge_sums(manifest, records, stored, where)
    return manifest


def _judge_codes(schema: Schema, where: str) -> None:
    """Step 3.6: the kind, dtype and codec codes are known."""
    if schema.kind not in (KIND_DENSE, KIND_RAGGED):
        raise UnsupportedError(f"{where}: unknown kind code {schema.kind} [ZR-DS-005]")
    if not dtype_code_known(schema.dtype):
        raise UnsupportedError(f"{where}: unknown dtype code {schema.dtype} [ZR-DS-005]")
    if schema.codec not in CODEC_NAMES:
        raise UnsupportedError(f"{where}: unknown codec code {schema.codec} [ZR-DS-005]")


def _entries(data: bytes, where: str, schema: Schema,
             count: int) -> tuple[tuple[int, ...] | None, tuple[Part, ...]]:
    """Steps 3.10 and 3.11: the item shape and the part entries fill the manifest exactly, and
    each name is a part's name, once."""
    end = len(data) - 8
    at = FIXED_SIZE
    shape: tuple[int, ...] | None = None
    if schema.kind == KIND_DENSE:
        if at + 8 * schema.ndim > end:
            raise CorruptStoreError(f"{where}: the item shape runs past the entries' end [ZR-DS-009]")
        shape = struct.unpack_from(f"<{schema.ndim}Q", data, at)
        at += 8 * schema.ndim
    parts: list[Part] = []
    seen: set[str] = set()
    for k in range(count):
        if at + ENTRY_SIZE > end:
            raise CorruptStoreError(f"{where}: part entry {k} runs past the entries' end [ZR-DS-009]")
        records, stored, checksum, length, reserved = _ENTRY.unpack_from(data, at)
        at += ENTRY_SIZE
        padded = length + (-length % 8)
        if not 1 <= length <= NAME_BYTES_MAX or at + padded > end:
            raise CorruptStoreError(f"{where}: part entry {k} gives a name of {length} bytes "
                                    f"(1..{NAME_BYTES_MAX}, within the manifest) [ZR-DS-009]")
        if any(reserved) or any(data[at + length:at + padded]):
            raise CorruptStoreError(f"{where}: part entry {k}: reserved or padding bytes are "
                                    "not zero [ZR-DS-009]")
        try:
            name = data[at:at + length].decode("utf-8")
        except UnicodeDecodeError:
            name = ""
        problem = name_problem(name) if name else "it is not UTF-8"
        if problem is None and name in seen:
            problem = "an earlier entry names it too"
        if problem is not None:
            raise CorruptStoreError(f"{where}: part entry {k} names {name or data[at:at + length]!r}, "
                                    f"which cannot name a part: {problem} [ZR-DS-006]")
        seen.add(name)
        at += padded
        parts.append(Part(name, records, stored, checksum))
    if at != end:
        raise CorruptStoreError(f"{where}: {end - at} bytes follow the last part entry [ZR-DS-009]")
    return shape, tuple(parts)


def _judge_sums(manifest: Manifest, records: int, stored: int, where: str) -> None:
    """Step 3.12: each part's record count within a store's limit, the dataset's within its
    own, and the sums equal to the fixed part's."""
    for k, part in enumerate(manifest.parts):
        if part.records > PART_RECORDS_MAX:
            raise LimitError(f"{where}: part {k} ({part.name!r}) gives {part.records:,} records; "
                             f"a store holds at most {PART_RECORDS_MAX:,} [ZR-DS-010]")
    if manifest.records > RECORDS_MAX:
        raise LimitError(f"{where}: {manifest.records:,} records in all; a dataset holds at "
                         f"most {RECORDS_MAX:,} [ZR-DS-010]")
    if manifest.records != records or manifest.stored_bytes != stored:
        raise CorruptStoreError(f"{where}: the parts hold {manifest.records:,} records and "
                                f"{manifest.stored_bytes:,} stored bytes, the manifest says "
                                f"{records:,} and {stored:,} [ZR-DS-010]")
