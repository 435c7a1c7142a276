"""Generates the conformance vectors of format 1.0 (conformance/v1/), of format 1.1
(conformance/v1.1/) and of format 1.2 (conformance/v1.2/), and of datasets (conformance/datasets/,
spec section 12, conformance/cases_datasets.py), and checks them.

    python conformance/generate.py           # (re)write v1/, v1.1/ and v1.2/ (valid, invalid, cases.json)
    python conformance/generate.py --check   # regenerate into a temporary folder and compare

The cases of 1.0 and 1.1 are frozen: 1.1 adds its own in v1.1/ (conformance/cases_v1_1.py), 1.2
in v1.2/ (conformance/cases_v1_2.py), and a reader of 1.2 passes all three folders, except the
cases that v1.2/cases.json lists as superseded (a feature bit that 1.1 left unknown and 1.2
defines).

Vectors are data, frozen once released: `--check` must report no difference, and a change to
an existing case is a change to the format's contract. Cases are only ever appended.

Valid cases come from two writers: the zrecord package (its native core) and the reference
writer of conformance/reference/, which builds the bytes from the spec alone; each case names
its writer. Invalid cases start from a reference-built store and break exactly one rule of the
spec, re-sealing every checksum the break does not concern, so that the error a reader must
raise follows from the spec alone (spec section 9 fixes the order for the few that cannot
break only one rule). Everything is deterministic: records are arithmetic patterns, not
random draws; compressed frames come from fixed zstd levels.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
V1 = HERE / "v1"
V1_1 = HERE / "v1.1"
V1_2 = HERE / "v1.2"
DATASETS = HERE / "datasets"
sys.path.insert(0, str(HERE))

from reference import reader as ref  # noqa: E402
from reference import writer as rw  # noqa: E402
from reference.xxh64 import xxh64  # noqa: E402

# Spec section 3.3's dtypes in code order, from the reference reader's table (the independent
# copy written from the spec).
DTYPE_NAMES = [ref.DTYPES[code].name for code in sorted(ref.DTYPES)]
DTYPE_CODE = {name: code for code, name in enumerate(DTYPE_NAMES, start=1)}
CODEC_CODE = {"raw": 0, "zstd": 1, "zstd_dict": 2}


# ---- deterministic record contents ---------------------------------------------------------


def pattern(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """A record of `shape` whose values depend only on (dtype, shape, seed), extremes included."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    words = [(k * 2654435761 + seed * 40503 + 12345) % 2**64 for k in range(n)]
    if dt.kind == "b":
        flat = np.array([w % 3 == 0 for w in words], dtype=bool)
    elif dt.kind in "iu":
        raw = np.array(words, dtype=np.uint64).astype(f"<u{dt.itemsize}")
        flat = raw.view(dt.newbyteorder("<")).copy()
        info = np.iinfo(dt)
        if n >= 2 and seed == 0:
            flat[0], flat[1] = info.min, info.max
    else:
        real_dt = np.dtype(f"<f{dt.itemsize // 2}") if dt.kind == "c" else dt
        base = np.array([(w % 20001 - 10000) / 64.0 for w in words], dtype=np.float64)
        specials = [
            np.nan,
            np.inf,
            -np.inf,
            -0.0,
            float(np.finfo(real_dt).max),
            float(np.finfo(real_dt).tiny) / 2,
        ]
        if seed == 0:
            for k, v in enumerate(specials[: min(n, len(specials))]):
                base[k] = v
        flat = base.astype(real_dt)
        if dt.kind == "c":
            imag = (np.array([(w >> 17) % 999 for w in words], dtype=np.float64) / 8).astype(real_dt)
            flat = (flat.astype(dt) + 1j * imag.astype(dt)).astype(dt)
    return flat.reshape(shape)


def text_record(k: int, size: int | None = None) -> np.ndarray:
    """A JSON-like text record (compressible, dictionary-friendly) as uint8."""
    body = (
        f'{{"id": {k}, "name": "item-{k % 17}", "tags": ["alpha", "beta", "gamma"], '
        f'"score": {(k * 37) % 101}, "ok": {"true" if k % 2 else "false"}}}'
    )
    raw = body.encode()
    if size is not None:
        raw = (raw * (size // len(raw) + 1))[:size]
    return np.frombuffer(raw, dtype=np.uint8).copy()


# ---- the generator ------------------------------------------------------------------------


class Generator:
    def __init__(self, out: Path, version: tuple[int, int] = (1, 0)) -> None:
        self.out = out
        self.version = version
        self.cases: list[dict[str, Any]] = []
        self._names: set[str] = set()
        # Cases of an earlier folder whose expectation this folder's format changes (v1.2 on).
        self.supersedes: list[dict[str, str]] = []

    def _case_dir(self, group: str, name: str) -> Path:
        assert name not in self._names, name
        self._names.add(name)
        d = self.out / group / name
        d.mkdir(parents=True)
        return d

    def valid(
        self,
        name: str,
        *,
        writer: str,
        spec: list[str],
        description: str,
        records: list[np.ndarray],
        make: Callable[[Path], None],
    ) -> None:
        """A valid case: `make(store_path)` writes the store, `records` are what it holds."""
        d = self._case_dir("valid", name)
        make(d / "store")
        store = ref.open_store(d / "store")
        if self.version >= (1, 1):
            store.verify()
        paths = []
        (d / "expected").mkdir()
        for i, rec in enumerate(records):
            p = d / "expected" / f"{i:04d}.npy"
            np.save(p, np.array(rec, order="C"), allow_pickle=False)
            paths.append(p.relative_to(self.out).as_posix())
        self.cases.append(
            {
                "name": name,
                "expect": "valid",
                "store": (d / "store").relative_to(self.out).as_posix(),
                "writer": writer,
                "spec": sorted(set(spec)),
                "description": description,
                "kind": store.kind,
                "dtype": store.dtype.name,
                **(self._dtype_fields(store) if self.version >= (1, 1) else {}),
                **(self._parts_fields(store) if self.version >= (1, 2) else {}),
                "ndim": store.ndim,
                "item_shape": list(store.item_shape) if store.kind == "dense" else None,
                "codec": store.codec,
                "data_shards": store.data_shards,
                "format_version": list(store.format_version),
                "record_count": store.record_count,
                "records": paths,
            }
        )

    @staticmethod
    def _dtype_fields(store: Any) -> dict[str, Any]:
        """Format 1.1's manifest names a dtype by its code's name (spec section 3.3) with its
        parameters and its NumPy descr."""
        code, length, unit = ref.dtype_params(store.dtype)
        name = ref.PARAMETRIC[code][0] if code in ref.PARAMETRIC else store.dtype.name
        return {"dtype": name, "dtype_descr": store.dtype.str, "dtype_length": length,
                "dtype_unit": ref.UNITS.get(unit)}

    @staticmethod
    def _parts_fields(store: Any) -> dict[str, Any]:
        """Format 1.2's manifest gives a valid store's index parts (spec section 4.1), or null."""
        parts = store.parts
        if parts is None:
            return {"index_parts": None}
        return {"index_parts": {"block_shift": parts.block_shift, "group_shift": parts.group_shift,
                                "blocks": parts.blocks, "groups": len(parts.group_sums)}}

    def invalid(
        self,
        name: str,
        *,
        error: str,
        phase: str,
        spec: list[str],
        description: str,
        files: dict[str, bytes] | None,
        post: Callable[[Path], None] | None = None,
        read_error: str | None = None,
        bad_records: tuple[int, int] | None = None,
        bad_part: str | None = None,
    ) -> None:
        """An invalid case: a store of `files` that a reader must reject with `error`.

        `post(store_path)` may alter the written directory in ways `files` cannot express; with
        `files` None nothing is written but what `post` makes. `read_error` (phase "verify"
        only) is the code with which reading a record fails, for a store whose records also
        break a rule of their own (spec section 9.4). `bad_records` (phase "read", 1.2) are the
        first and last record whose read fails with `error` in a reader that judges the index by
        part (spec section 9.6), every other record reading; `bad_part` names the part at fault.
        """
        assert read_error is None or phase == "verify", name
        assert bad_records is None or phase == "read", name
        d = self._case_dir("invalid", name)
        if files is None:
            pass
        elif "header.zrh" in files:
            rw.write_files(d / "store", files)
        else:
            _write_unpublished(d / "store", files)
        if post is not None:
            post(d / "store")
        self.cases.append(
            {
                "name": name,
                "expect": "error",
                "store": (d / "store").relative_to(self.out).as_posix(),
                "writer": "reference",
                "spec": sorted({*spec, "ZR-ERR-001"}),
                "description": description,
                "error": error,
                "error_number": ref.ERROR_CODES_1_1[error],
                "phase": phase,
                **({"read_error": read_error, "read_error_number": ref.ERROR_CODES_1_1[read_error]}
                   if read_error is not None else {}),
                **({"bad_records": list(bad_records)} if bad_records is not None else {}),
                **({"bad_part": bad_part} if bad_part is not None else {}),
            }
        )

    def manifest(self) -> dict[str, Any]:
        return {
            "$schema": "./cases.schema.json",
            "format": "zrecord",
            "format_version": list(self.version),
            "spec": "spec/format-v1.md",
            "error_codes": ref.ERROR_CODES_1_1 if self.version >= (1, 1) else ref.ERROR_CODES,
            **({"supersedes": self.supersedes} if self.version >= (1, 2) else {}),
            "cases": self.cases,
        }


def _write_unpublished(path: Path, files: dict[str, bytes]) -> None:
    path.mkdir()
    for name, data in sorted(files.items()):
        (path / name).write_bytes(data)


# ---- byte surgery for invalid cases -------------------------------------------------------


class Files:
    """A store's files, editable, with helpers that re-seal the checksums."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.f = {k: bytearray(v) for k, v in files.items()}

    @property
    def header(self) -> bytearray:
        return self.f["header.zrh"]

    @property
    def index(self) -> bytearray:
        return self.f["index.zri"]

    def hget(self, off: int, size: int) -> int:
        return int.from_bytes(self.header[off : off + size], "little")

    def hset(self, off: int, size: int, value: int) -> Files:
        self.header[off : off + size] = value.to_bytes(size, "little")
        return self

    def entry_size(self) -> int:
        return self.hget(48, 4)

    def eset(self, i: int, off: int, size: int, value: int) -> Files:
        base = i * self.entry_size() + off
        self.index[base : base + size] = value.to_bytes(size, "little")
        return self

    def eget(self, i: int, off: int, size: int) -> int:
        base = i * self.entry_size() + off
        return int.from_bytes(self.index[base : base + size], "little")

    def seal_index(self) -> Files:
        """Index checksum into the header, then the header checksum."""
        self.hset(64, 8, xxh64(self.index))
        return self.seal()

    def seal(self) -> Files:
        self.header[-8:] = xxh64(self.header[:-8]).to_bytes(8, "little")
        return self

    def reseal_record(self, i: int) -> Files:
        """Re-computes record i's checksum after its stored bytes changed."""
        off, size, shard = self.eget(i, 0, 8), self.eget(i, 8, 4), self.eget(i, 12, 1)
        self.eset(i, 16, 8, xxh64(self.f[f"data-{shard:03d}.zrd"][off : off + size]))
        return self.seal_index()

    def done(self) -> dict[str, bytes]:
        return {k: bytes(v) for k, v in self.f.items()}


def dense_base(**kw: Any) -> Files:
    """A small Dense float32 (2, 3) raw store of 4 records in 2 shards."""
    args: dict[str, Any] = dict(
        kind="dense",
        dtype="float32",
        item_shape=(2, 3),
        data_shards=2,
        records=[pattern("float32", (2, 3), s) for s in range(4)],
    )
    args.update(kw)
    return Files(rw.build_store(**args))


def ragged_base(**kw: Any) -> Files:
    """A small Ragged int16 rank-1 raw store of 4 records (lengths 3, 1, 0, 2), 1 shard."""
    args: dict[str, Any] = dict(
        kind="ragged",
        dtype="int16",
        ndim=1,
        data_shards=1,
        records=[pattern("int16", (n,), s) for s, n in enumerate([3, 1, 0, 2])],
    )
    args.update(kw)
    return Files(rw.build_store(**args))


def empty_dense(**kw: Any) -> Files:
    args: dict[str, Any] = dict(kind="dense", dtype="uint8", item_shape=(4,), data_shards=1, records=[])
    args.update(kw)
    return Files(rw.build_store(**args))


# ---- the cases ----------------------------------------------------------------------------


def zrecord_writer(
    kind: str,
    dtype: Any,
    records: list[np.ndarray],
    *,
    item_shape: tuple = (),
    ndim: int = 1,
    codec: str = "raw",
    data_shards: int = 1,
    dict_bytes: bytes | None = None,
    index_parts: bool = False,
) -> Callable[[Path], None]:
    """Writes the store with the installed zrecord; `index_parts` only for the cases of 1.2 (the
    cases of v1 and v1.1 are stores without index parts, byte for byte as released)."""

    def make(path: Path) -> None:
        import zrecord

        if kind == "dense":
            w = zrecord.Dense.create(
                path,
                dtype,
                item_shape,
                codec=codec,
                data_shards=data_shards,
                dict_bytes=dict_bytes,
                sync=False,
                index_parts=index_parts,
            )
            with w:
                if records:
                    w.append(np.stack(records).reshape(len(records), *item_shape))
        else:
            ragged_writer = zrecord.Ragged.create(
                path,
                dtype,
                ndim,
                codec=codec,
                data_shards=data_shards,
                dict_bytes=dict_bytes,
                sync=False,
                index_parts=index_parts,
            )
            with ragged_writer:
                ragged_writer.append(records)

    return make


def reference_writer(**kw: Any) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        rw.write_store(path, **kw)

    return make


def trained_dictionary() -> bytes:
    import zrecord

    samples = [text_record(k) for k in range(3000)]
    return zrecord.train_dict(samples, dict_size=1024)


def valid_cases(g: Generator) -> None:
    """The valid cases of format 1.0. They are frozen, and the manifest lists cases in the order
    they are made, so these calls keep the order of the released vectors."""
    _valid_dtype_cases(g)
    _valid_dense_shape_cases(g)
    _valid_empty_store_cases(g)
    _valid_ragged_shape_cases(g)
    _valid_rank_max_cases(g)
    _valid_shard_cases(g)
    _valid_newer_minor_case(g)
    _valid_32k_record_cases(g)
    _valid_zstd_cases(g)
    _valid_zstd_frame_form_cases(g)
    _valid_zstd_dict_cases(g)
    _valid_zstd_incompressible_case(g)


def _valid_dtype_cases(g: Generator) -> None:
    """Every dtype of spec section 3.3: Dense stores written by zrecord, a few as Ragged stores
    written by the reference writer."""
    # One Dense raw store per dtype of spec section 3.3, written by zrecord.
    for dtype in DTYPE_NAMES:
        recs = [pattern(dtype, (2, 3), s) for s in range(3)]
        g.valid(
            f"dense_{dtype}",
            writer="zrecord",
            spec=["ZR-HDR-006", "ZR-GEN-002", "ZR-GEN-003", "ZR-SUM-001"],
            description=f"Dense raw store of dtype {dtype} (code {DTYPE_CODE[dtype]}), "
            "item_shape (2, 3), extreme values included",
            records=recs,
            make=zrecord_writer("dense", dtype, recs, item_shape=(2, 3)),
        )
    # The same dtypes as Ragged, written by the reference writer (round-robin shards).
    for dtype in ("bool", "int32", "float16", "complex128"):
        recs = [pattern(dtype, (n, 2), s) for s, n in enumerate([2, 0, 5, 1])]
        g.valid(
            f"ragged_{dtype}_reference",
            writer="reference",
            spec=["ZR-HDR-006", "ZR-GEN-002", "ZR-GEN-003", "ZR-IDX-004"],
            description=f"Ragged raw store of dtype {dtype}, rank 2, one empty record, "
            "records assigned round robin to 2 shards by the reference writer",
            records=recs,
            make=reference_writer(kind="ragged", dtype=dtype, ndim=2, records=recs, data_shards=2),
        )


def _valid_dense_shape_cases(g: Generator) -> None:
    """Dense item shapes: a scalar (rank 0), rank 3, and shapes with a zero axis, whose records
    hold no bytes."""
    recs = [pattern("float64", (), s) for s in range(5)]
    g.valid(
        "dense_item_shape_scalar",
        writer="zrecord",
        spec=["ZR-HDR-003", "ZR-IDX-004"],
        description="Dense store with item_shape () (ndim 0): every record is one scalar",
        records=recs,
        make=zrecord_writer("dense", "float64", recs, item_shape=()),
    )
    g.valid(
        "dense_item_shape_scalar_reference",
        writer="reference",
        spec=["ZR-HDR-003"],
        description="Dense item_shape () store written by the reference writer",
        records=recs,
        make=reference_writer(kind="dense", dtype="float64", records=recs),
    )
    recs = [pattern("int32", (2, 3, 4), s) for s in range(3)]
    g.valid(
        "dense_rank3",
        writer="zrecord",
        spec=["ZR-GEN-003"],
        description="Dense int32 item_shape (2, 3, 4): C element order",
        records=recs,
        make=zrecord_writer("dense", "int32", recs, item_shape=(2, 3, 4)),
    )
    recs = [np.zeros((3, 0), np.float32) for _ in range(4)]
    g.valid(
        "dense_zero_size_records",
        writer="zrecord",
        spec=["ZR-IDX-004", "ZR-HDR-010"],
        description="Dense item_shape (3, 0): four records of zero bytes, empty shard",
        records=recs,
        make=zrecord_writer("dense", "float32", recs, item_shape=(3, 0)),
    )
    recs = [np.zeros((2**40, 0), np.uint8) for _ in range(2)]
    g.valid(
        "dense_huge_axis_beside_zero",
        writer="reference",
        spec=["ZR-HDR-009"],
        description="Dense item_shape (2^40, 0): an axis far above any limit beside a zero "
        "axis makes an empty record, not an overflow",
        records=recs,
        make=reference_writer(kind="dense", dtype="uint8", item_shape=(2**40, 0), records=recs),
    )


def _valid_empty_store_cases(g: Generator) -> None:
    """Stores of no records ([ZR-HDR-011]), one of them at record_size_bytes_max."""
    g.valid(
        "dense_empty_store",
        writer="zrecord",
        spec=["ZR-HDR-011"],
        description="Dense store with no records: empty index.zri and shard file",
        records=[],
        make=zrecord_writer("dense", "float32", [], item_shape=(3,)),
    )
    g.valid(
        "dense_record_size_at_limit_empty",
        writer="reference",
        spec=["ZR-HDR-009", "ZR-LIM-001"],
        description="Dense uint8 item_shape (2^31,): record size exactly "
        "record_size_bytes_max is allowed (no records, so the vector stays small)",
        records=[],
        make=reference_writer(kind="dense", dtype="uint8", item_shape=(2**31,), records=[]),
    )
    g.valid(
        "ragged_empty_store",
        writer="zrecord",
        spec=["ZR-HDR-011", "ZR-HDR-012"],
        description="Ragged rank-2 store with no records",
        records=[],
        make=zrecord_writer("ragged", "uint16", [], ndim=2),
    )


def _valid_ragged_shape_cases(g: Generator) -> None:
    """Ragged record shapes: empty records among others, zero axes, and dim_max beside a zero axis."""
    recs = [pattern("int64", (n,), s) for s, n in enumerate([0, 1, 2, 7, 0, 3])]
    g.valid(
        "ragged_int64_rank1",
        writer="zrecord",
        spec=["ZR-IDX-004"],
        description="Ragged int64 rank 1 with empty records first and in the middle",
        records=recs,
        make=zrecord_writer("ragged", "int64", recs, ndim=1),
    )
    recs = [pattern("float32", s_, k) for k, s_ in enumerate([(0, 3), (2, 0), (3, 4), (1, 1)])]
    g.valid(
        "ragged_zero_size_axes",
        writer="zrecord",
        spec=["ZR-IDX-004"],
        description="Ragged float32 rank 2 with records of shape (0, 3) and (2, 0)",
        records=recs,
        make=zrecord_writer("ragged", "float32", recs, ndim=2),
    )
    recs = [np.zeros((0,), np.uint8) for _ in range(3)]
    g.valid(
        "ragged_all_empty",
        writer="zrecord",
        spec=["ZR-IDX-002", "ZR-DAT-001"],
        description="Ragged store whose every record is empty: a zero-byte shard",
        records=recs,
        make=zrecord_writer("ragged", "uint8", recs, ndim=1),
    )
    recs = [
        np.zeros((2**32 - 1, 0), np.uint8),
        np.zeros((0, 2**32 - 1), np.uint8),
        np.arange(6, dtype=np.uint8).reshape(2, 3),
    ]
    g.valid(
        "ragged_dim_max_beside_zero",
        writer="reference",
        spec=["ZR-IDX-004", "ZR-LIM-001"],
        description="Ragged records with an axis of dim_max (2^32 - 1) beside a zero axis",
        records=recs,
        make=reference_writer(kind="ragged", dtype="uint8", ndim=2, records=recs),
    )


def _valid_rank_max_cases(g: Generator) -> None:
    """Stores of rank ndim_max (32), Dense and Ragged ([ZR-HDR-008])."""
    shape32 = (1,) * 31 + (2,)
    recs = [pattern("uint8", shape32, s) for s in range(2)]
    g.valid(
        "dense_ndim_max",
        writer="zrecord",
        spec=["ZR-HDR-008"],
        description="Dense store of rank ndim_max (32)",
        records=recs,
        make=zrecord_writer("dense", "uint8", recs, item_shape=shape32),
    )
    recs = [pattern("uint8", (1,) * 30 + (n, 2), s) for s, n in enumerate([1, 0, 3])]
    g.valid(
        "ragged_ndim_max",
        writer="reference",
        spec=["ZR-HDR-008", "ZR-HDR-012"],
        description="Ragged store of rank 32: 152-byte index entries",
        records=recs,
        make=reference_writer(kind="ragged", dtype="uint8", ndim=32, records=recs),
    )


def _valid_shard_cases(g: Generator) -> None:
    """Shards: more than one, more than records, data_shards_max of them, and records laid out
    in an order of their own."""
    recs = [pattern("uint16", (4,), s) for s in range(20)]
    g.valid(
        "dense_7_shards",
        writer="zrecord",
        spec=["ZR-GEN-001", "ZR-HDR-010", "ZR-DAT-001"],
        description="Dense store of 20 records in 7 shards (contiguous runs)",
        records=recs,
        make=zrecord_writer("dense", "uint16", recs, item_shape=(4,), data_shards=7),
    )
    recs = [pattern("int8", (5,), s) for s in range(3)]
    g.valid(
        "dense_more_shards_than_records",
        writer="zrecord",
        spec=["ZR-HDR-007", "ZR-DAT-001"],
        description="Dense store with 8 shards and 3 records: some shards are empty",
        records=recs,
        make=zrecord_writer("dense", "int8", recs, item_shape=(5,), data_shards=8),
    )
    recs = [pattern("uint32", (2,), s) for s in range(4)]
    g.valid(
        "dense_255_shards",
        writer="reference",
        spec=["ZR-HDR-007", "ZR-GEN-001", "ZR-LIM-001"],
        description="data_shards_max (255) shards; the records lie in the last shards",
        records=recs,
        make=reference_writer(
            kind="dense",
            dtype="uint32",
            item_shape=(2,),
            records=recs,
            data_shards=255,
            assign=lambda i: 254 - i % 2,
        ),
    )
    recs = [pattern("complex64", (3,), s) for s in range(6)]
    g.valid(
        "dense_out_of_order_layout",
        writer="reference",
        spec=["ZR-IDX-002", "ZR-DAT-001"],
        description="Records laid out in their shards in reverse logical order: a reader "
        "must follow the index offsets",
        records=recs,
        make=reference_writer(
            kind="dense",
            dtype="complex64",
            item_shape=(3,),
            records=recs,
            data_shards=2,
            layout=list(range(5, -1, -1)),
        ),
    )


def _valid_newer_minor_case(g: Generator) -> None:
    """A greater minor version of the reader's major ([ZR-HDR-002])."""
    recs = [pattern("float32", (2,), s) for s in range(3)]
    g.valid(
        "newer_minor_version",
        writer="reference",
        spec=["ZR-HDR-002"],
        description="format 1.7: a reader MUST accept a greater minor of its major",
        records=recs,
        make=reference_writer(kind="dense", dtype="float32", item_shape=(2,), records=recs, format_minor=7),
    )


def _valid_32k_record_cases(g: Generator) -> None:
    """Records around 32 KiB, where the native core switches from its mapping to pread."""
    recs = [text_record(k, size) for k, size in enumerate([32767, 32768, 32769, 10])]
    g.valid(
        "ragged_records_near_32k",
        writer="zrecord",
        spec=["ZR-IDX-002", "ZR-SUM-001"],
        description="Ragged uint8 records of 32767, 32768, 32769 and 10 bytes",
        records=recs,
        make=zrecord_writer("ragged", "uint8", recs, ndim=1),
    )
    recs = [text_record(k, 32768) for k in range(2)]
    g.valid(
        "dense_records_32k",
        writer="reference",
        spec=["ZR-SUM-001"],
        description="Dense uint8 records of 32 KiB each (2 records, 2 shards)",
        records=recs,
        make=reference_writer(kind="dense", dtype="uint8", item_shape=(32768,), records=recs, data_shards=2),
    )


def _valid_zstd_cases(g: Generator) -> None:
    """Codec zstd ([ZR-COD-001]): frames by zrecord (libzstd) and by the reference writer, empty
    records included."""
    recs = [pattern("int32", (64,), s // 2) for s in range(6)]
    g.valid(
        "dense_zstd",
        writer="zrecord",
        spec=["ZR-COD-001", "ZR-IDX-005", "ZR-SUM-001"],
        description="Dense int32 (64,) with codec zstd (level 3) in 2 shards",
        records=recs,
        make=zrecord_writer("dense", "int32", recs, item_shape=(64,), codec="zstd", data_shards=2),
    )
    recs = [text_record(k, 40000) for k in range(2)]
    g.valid(
        "dense_zstd_large_records",
        writer="zrecord",
        spec=["ZR-IDX-005"],
        description="Dense uint8 records of 40000 bytes with codec zstd",
        records=recs,
        make=zrecord_writer("dense", "uint8", recs, item_shape=(40000,), codec="zstd"),
    )
    recs = [pattern("uint8", (n,), s) for s, n in enumerate([0, 5, 300, 0, 17])]
    g.valid(
        "ragged_zstd",
        writer="zrecord",
        spec=["ZR-COD-001", "ZR-IDX-005"],
        description="Ragged uint8 with codec zstd, empty records included (empty frames)",
        records=recs,
        make=zrecord_writer("ragged", "uint8", recs, codec="zstd", data_shards=3),
    )
    recs = [
        np.full((n,), 0x0707, np.int16) if n % 2 else pattern("int16", (n,), n) for n in (0, 1, 2, 5001, 100)
    ]
    g.valid(
        "ragged_zstd_reference_frames",
        writer="reference",
        spec=["ZR-COD-001", "ZR-IDX-005"],
        description="Ragged int16 with codec zstd, frames built from RFC 8878 by the "
        "reference writer with raw and RLE blocks only",
        records=recs,
        make=reference_writer(
            kind="ragged", dtype="int16", ndim=1, records=recs, codec="zstd", data_shards=2
        ),
    )


def _valid_zstd_frame_form_cases(g: Generator) -> None:
    """Frame forms zrecord does not write but a reader must accept: zstd's content checksum, and
    a window descriptor instead of a single segment."""
    recs = [pattern("float64", (4,), s) for s in range(3)]
    g.valid(
        "dense_zstd_frame_with_checksum",
        writer="reference",
        spec=["ZR-IDX-005"],
        description="codec zstd frames that carry zstd's own content checksum (libzstd "
        "via the zstandard package): any conforming frame must be accepted",
        records=recs,
        make=reference_writer(
            kind="dense",
            dtype="float64",
            item_shape=(4,),
            records=recs,
            codec="zstd",
            encode=_zstd_with_checksum,
        ),
    )
    recs = [pattern("uint16", (n,), n) for n in (0, 3, 300, 1500)]
    g.valid(
        "ragged_zstd_window_descriptor_frames",
        writer="reference",
        spec=["ZR-IDX-005"],
        description="codec zstd frames that are not single-segment: a 1 KiB window descriptor "
        "and a 4-byte content size (the 3000-byte record spans three blocks)",
        records=recs,
        make=reference_writer(
            kind="ragged",
            dtype="uint16",
            ndim=1,
            records=recs,
            codec="zstd",
            encode=lambda p: rw.zstd_frame(p, single_segment=False),
        ),
    )


def _valid_zstd_dict_cases(g: Generator) -> None:
    """Codec zstd_dict ([ZR-COD-002]): a trained dictionary and a raw-content one."""
    dictionary = trained_dictionary()
    recs = [text_record(k, 200) for k in range(5)]
    g.valid(
        "dense_zstd_dict",
        writer="zrecord",
        spec=["ZR-COD-002", "ZR-HDR-013"],
        description="Dense uint8 (200,) with codec zstd_dict and a trained 1 KiB dictionary "
        "(zstd dictionary format, with a dictionary ID)",
        records=recs,
        make=zrecord_writer(
            "dense", "uint8", recs, item_shape=(200,), codec="zstd_dict", data_shards=2, dict_bytes=dictionary
        ),
    )
    recs = [text_record(k) for k in range(6)]
    g.valid(
        "ragged_zstd_dict",
        writer="zrecord",
        spec=["ZR-COD-002", "ZR-HDR-013"],
        description="Ragged uint8 text records with codec zstd_dict and a trained dictionary",
        records=recs,
        make=zrecord_writer("ragged", "uint8", recs, codec="zstd_dict", dict_bytes=dictionary),
    )
    raw_dict = bytes(text_record(1, 333))
    recs = [text_record(k, 90 + k) for k in range(4)]
    g.valid(
        "ragged_zstd_dict_raw_content",
        writer="reference",
        spec=["ZR-COD-002", "ZR-HDR-005", "ZR-HDR-013"],
        description="codec zstd_dict with a 333-byte raw-content dictionary (no dictionary "
        "ID; header padding of 3 bytes), written by the reference writer",
        records=recs,
        make=reference_writer(
            kind="ragged", dtype="uint8", ndim=1, records=recs, codec="zstd_dict", dictionary=raw_dict
        ),
    )


def _valid_zstd_incompressible_case(g: Generator) -> None:
    """Codec zstd on data that does not compress."""
    recs = [pattern("uint8", (512,), s) for s in range(3)]
    g.valid(
        "dense_zstd_incompressible",
        writer="zrecord",
        spec=["ZR-IDX-005"],
        description="codec zstd on data that does not compress (frames of raw blocks)",
        records=recs,
        make=zrecord_writer("dense", "uint8", recs, item_shape=(512,), codec="zstd"),
    )


def _zstd_with_checksum(payload: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3, write_checksum=True, write_content_size=True).compress(payload)


def _zstd_without_content_size(payload: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3, write_content_size=False).compress(payload)


def _frame_with_dict_id(payload: bytes, dict_id: int) -> bytes:
    """A single-segment zstd frame of one raw block that names dictionary `dict_id` (1 byte)."""
    assert len(payload) < 256 and dict_id < 256
    return (
        b"\x28\xb5\x2f\xfd"
        + bytes([0x21, dict_id, len(payload)])
        + (1 | (len(payload) << 3)).to_bytes(3, "little")
        + payload
    )


def invalid_cases(g: Generator) -> None:
    """The invalid cases of format 1.0, frozen and in the order of the released vectors (see
    valid_cases); each group breaks the rules of one part of the spec."""
    _invalid_publish_cases(g)
    _invalid_magic_cases(g)
    _invalid_version_cases(g)
    _invalid_header_size_cases(g)
    _invalid_header_checksum_and_reserved_cases(g)
    _invalid_unknown_code_cases(g)
    _invalid_shard_count_cases(g)
    _invalid_shape_limit_cases(g)
    _invalid_shard_file_cases(g)
    _invalid_index_file_cases(g)
    _invalid_index_field_cases(g)
    _invalid_dictionary_cases(g)
    _invalid_malformed_dictionary_cases(g)
    _invalid_entry_bounds_cases(g)
    _invalid_entry_field_cases(g)
    _invalid_ragged_record_size_cases(g)
    _invalid_record_checksum_cases(g)
    _invalid_zstd_frame_cases(g)
    _invalid_zstd_frame_shape_cases(g)
    _invalid_zstd_dict_frame_case(g)


def _invalid_publish_cases(g: Generator) -> None:
    """A store that was never published ([ZR-PUB-004])."""
    f = dense_base()
    del f.f["header.zrh"]
    g.invalid(
        "not_published",
        error="not_published",
        phase="open",
        spec=["ZR-PUB-004"],
        description="a directory with index.zri and shard files but no header.zrh",
        files=f.done(),
    )


def _invalid_magic_cases(g: Generator) -> None:
    """header.zrh that does not start with the magic ([ZR-HDR-001])."""
    g.invalid(
        "bad_magic",
        error="bad_magic",
        phase="open",
        spec=["ZR-HDR-001"],
        description="first magic byte 0x89 changed to 0x88 (header checksum re-sealed)",
        files=dense_base().hset(0, 1, 0x88).seal().done(),
    )
    g.invalid(
        "bad_magic_empty_header",
        error="bad_magic",
        phase="open",
        spec=["ZR-HDR-001"],
        description="header.zrh is an empty file",
        files={**dense_base().done(), "header.zrh": b""},
    )
    g.invalid(
        "bad_magic_other_file",
        error="bad_magic",
        phase="open",
        spec=["ZR-HDR-001"],
        description="header.zrh holds a PNG signature and text",
        files={**dense_base().done(), "header.zrh": b"\x89PNG\r\n\x1a\n" + b"x" * 200},
    )


def _invalid_version_cases(g: Generator) -> None:
    """A newer major version ([ZR-HDR-002]), judged before any other field of the header, and a
    header too short to hold it."""
    g.invalid(
        "newer_major_version",
        error="unsupported_version",
        phase="open",
        spec=["ZR-HDR-002"],
        description="format_major 2 (header re-sealed)",
        files=dense_base().hset(8, 2, 2).seal().done(),
    )
    f = dense_base().hset(8, 2, 3)
    f.f["header.zrh"] = f.header[:12] + b"\xff" * 60
    g.invalid(
        "newer_major_version_other_layout",
        error="unsupported_version",
        phase="open",
        spec=["ZR-HDR-002", "ZR-ERR-002"],
        description="format_major 3 and a header laid out unlike v1 (72 bytes): the "
        "version is judged before any other field",
        files=f.done(),
    )
    g.invalid(
        "header_too_short_for_version",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-003", "ZR-ERR-002"],
        description="header.zrh is the magic and two more bytes: too short to hold format_major",
        files={**dense_base().done(), "header.zrh": rw.MAGIC + b"\x01\x00"},
    )


def _invalid_header_size_cases(g: Generator) -> None:
    """header.zrh whose size disagrees with header_size or is not a multiple of 8 ([ZR-HDR-003])."""
    f = dense_base()
    f.f["header.zrh"] = f.header[:100]
    g.invalid(
        "header_truncated",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-003"],
        description="header.zrh cut to 100 bytes, shorter than its fixed part",
        files=f.done(),
    )
    f = dense_base()
    f.f["header.zrh"] = f.header[:-16]
    g.invalid(
        "header_truncated_variable_part",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-003"],
        description="header.zrh missing its last 16 bytes (header_size still names the full size)",
        files=f.done(),
    )
    g.invalid(
        "header_size_mismatch",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-003"],
        description="header_size 8 more than the file (re-sealed)",
        files=dense_base().hset(12, 4, len(dense_base().header) + 8).seal().done(),
    )
    f = dense_base()
    f.f["header.zrh"] = f.header[:-8] + bytes(4) + f.header[-8:]
    f.hset(12, 4, len(f.header)).seal()
    g.invalid(
        "header_size_not_multiple_of_8",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-003"],
        description="4 zero bytes before the checksum: header_size "
        "matches the file but is not a multiple of 8 (re-sealed)",
        files=f.done(),
    )


def _invalid_header_checksum_and_reserved_cases(g: Generator) -> None:
    """The header checksum ([ZR-HDR-004]) and its reserved bytes and padding ([ZR-HDR-005])."""
    g.invalid(
        "header_checksum_mismatch",
        error="checksum",
        phase="open",
        spec=["ZR-HDR-004", "ZR-SUM-003"],
        description="one bit of item_shape flipped, header checksum not re-sealed",
        files=dense_base().hset(128, 1, 3).done(),
    )
    g.invalid(
        "reserved0_nonzero",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-005"],
        description="reserved0 byte 22 set to 1 (re-sealed)",
        files=dense_base().hset(22, 1, 1).seal().done(),
    )
    g.invalid(
        "reserved1_nonzero",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-005"],
        description="reserved1 byte 127 set to 0x80 (re-sealed)",
        files=dense_base().hset(127, 1, 0x80).seal().done(),
    )
    f = ragged_base(codec="zstd_dict", dictionary=bytes(text_record(2, 333)))
    f.header[-8 - 3] = 1
    g.invalid(
        "header_padding_nonzero",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-005"],
        description="a non-zero byte in the padding after a 333-byte dictionary (re-sealed)",
        files=f.seal().done(),
    )


def _invalid_unknown_code_cases(g: Generator) -> None:
    """Kind, dtype and codec codes that spec section 3 does not define ([ZR-HDR-006])."""
    for name, value in (("kind_unknown_0", 0), ("kind_unknown_3", 3)):
        g.invalid(
            name,
            error="unsupported",
            phase="open",
            spec=["ZR-HDR-006"],
            description=f"kind {value} (re-sealed)",
            files=dense_base().hset(16, 1, value).seal().done(),
        )
    for name, value in (("dtype_unknown_0", 0), ("dtype_unknown_15", 15), ("dtype_unknown_255", 255)):
        g.invalid(
            name,
            error="unsupported",
            phase="open",
            spec=["ZR-HDR-006"],
            description=f"dtype code {value}, reserved (re-sealed)",
            files=dense_base().hset(17, 1, value).seal().done(),
        )
    g.invalid(
        "codec_unknown",
        error="unsupported",
        phase="open",
        spec=["ZR-HDR-006", "ZR-COD-003"],
        description="codec 3 (re-sealed)",
        files=dense_base().hset(19, 1, 3).seal().done(),
    )


def _invalid_shard_count_cases(g: Generator) -> None:
    """data_shards below its minimum ([ZR-HDR-007]) and index entries that name a shard the store
    does not have ([ZR-IDX-001])."""
    f = empty_dense()
    f.f["header.zrh"] = f.header[:136] + f.header[144:]
    f.hset(12, 4, len(f.header)).hset(20, 1, 0).seal()
    del f.f["data-000.zrd"]
    g.invalid(
        "data_shards_zero",
        error="limit",
        phase="open",
        spec=["ZR-HDR-007", "ZR-LIM-001"],
        description="data_shards 0 (below data_shards_min) in an empty store whose header "
        "is otherwise consistent",
        files=f.done(),
    )
    g.invalid(
        "shard_number_255",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-001"],
        description="an index entry names shard 255 in a 2-shard store; data_shards itself "
        "(a u8) cannot exceed data_shards_max",
        files=dense_base().eset(1, 12, 1, 255).seal_index().done(),
    )
    f = dense_base()
    g.invalid(
        "shard_number_out_of_range",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-001"],
        description="an index entry names shard 2 of a 2-shard store",
        files=f.eset(3, 12, 1, 2).seal_index().done(),
    )


def _invalid_shape_limit_cases(g: Generator) -> None:
    """Ranks and record sizes outside the limits ([ZR-HDR-008], [ZR-HDR-009])."""
    g.invalid(
        "ndim_above_max_dense",
        error="limit",
        phase="open",
        spec=["ZR-HDR-008", "ZR-LIM-001"],
        description="Dense store of rank 33 (item_shape of 33 ones, empty store)",
        files=empty_dense(item_shape=(1,) * 33).done(),
    )
    g.invalid(
        "ndim_above_max_ragged",
        error="limit",
        phase="open",
        spec=["ZR-HDR-008", "ZR-LIM-001"],
        description="Ragged store of rank 33 (160-byte entries, empty store)",
        files=Files(rw.build_store(kind="ragged", dtype="uint8", ndim=33, records=[])).done(),
    )
    g.invalid(
        "ragged_ndim_zero",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-008"],
        description="Ragged store of rank 0 (24-byte entries, empty store)",
        files=Files(rw.build_store(kind="ragged", dtype="uint8", ndim=0, records=[])).done(),
    )
    g.invalid(
        "dense_record_size_above_max",
        error="limit",
        phase="open",
        spec=["ZR-HDR-009", "ZR-LIM-001"],
        description="Dense int64 item_shape (2^28 + 1,): record size 2^31 + 8 bytes (empty store)",
        files=empty_dense(dtype="int64", item_shape=(2**28 + 1,)).done(),
    )
    g.invalid(
        "dense_record_size_overflow",
        error="limit",
        phase="open",
        spec=["ZR-HDR-009", "ZR-LIM-001"],
        description="Dense item_shape (2^32, 2^32, 2): the product overflows 64 bits",
        files=empty_dense(item_shape=(2**32, 2**32, 2)).done(),
    )


def _invalid_shard_file_cases(g: Generator) -> None:
    """Shard files that disagree with the header's sizes ([ZR-HDR-010]) or are missing or not
    regular files ([ZR-GEN-001])."""
    f = dense_base()
    g.invalid(
        "stored_bytes_mismatch",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-010"],
        description="stored_bytes one more than the sum of shard_sizes (re-sealed)",
        files=f.hset(40, 8, f.hget(40, 8) + 1).seal().done(),
    )
    f = dense_base()
    f.f["data-001.zrd"] += b"\x00"
    g.invalid(
        "shard_file_longer",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-010"],
        description="data-001.zrd has one byte more than its shard_sizes entry",
        files=f.done(),
    )
    f = dense_base()
    f.f["data-000.zrd"] = f.f["data-000.zrd"][:-4]
    g.invalid(
        "shard_file_truncated",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-010"],
        description="data-000.zrd lost its last 4 bytes",
        files=f.done(),
    )
    f = dense_base()
    del f.f["data-001.zrd"]
    g.invalid(
        "shard_file_missing",
        error="corrupt",
        phase="open",
        spec=["ZR-GEN-001"],
        description="data-001.zrd of a 2-shard store is missing",
        files=f.done(),
    )

    def shard_as_directory(store: Path) -> None:
        (store / "data-001.zrd").unlink()
        (store / "data-001.zrd").mkdir()
        (store / "data-001.zrd" / "README").write_text("a directory, not a shard file\n")

    g.invalid(
        "shard_file_is_directory",
        error="corrupt",
        phase="open",
        spec=["ZR-GEN-001"],
        description="data-001.zrd is a directory (holding one file), not a regular file",
        files=dense_base().done(),
        post=shard_as_directory,
    )


def _invalid_index_file_cases(g: Generator) -> None:
    """index.zri missing, of the wrong size, or not matching index_checksum ([ZR-HDR-011])."""
    f = dense_base()
    del f.f["index.zri"]
    g.invalid(
        "index_file_missing",
        error="corrupt",
        phase="open",
        spec=["ZR-GEN-001"],
        description="index.zri is missing",
        files=f.done(),
    )
    f = dense_base()
    f.f["index.zri"] = f.index[:-8]
    g.invalid(
        "index_truncated",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-011"],
        description="index.zri lost its last 8 bytes (index_checksum re-sealed to match)",
        files=f.seal_index().done(),
    )
    f = dense_base()
    f.f["index.zri"] = f.index + bytes(24)
    g.invalid(
        "index_longer",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-011"],
        description="index.zri has one zero entry more than record_count (index_checksum re-sealed)",
        files=f.seal_index().done(),
    )
    f = dense_base()
    g.invalid(
        "index_size_field_mismatch",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-011"],
        description="index_size is not record_count x index_entry_size (re-sealed)",
        files=f.hset(56, 8, f.hget(56, 8) + 24).seal().done(),
    )
    f = dense_base()
    g.invalid(
        "index_checksum_mismatch",
        error="checksum",
        phase="open",
        spec=["ZR-HDR-011", "ZR-SUM-003"],
        description="a bit of record 2's checksum flipped in index.zri; index_checksum not updated",
        files=f.eset(2, 16, 1, f.eget(2, 16, 1) ^ 1).done(),
    )


def _invalid_index_field_cases(g: Generator) -> None:
    """Header fields that describe the index and the totals: index_entry_size ([ZR-HDR-012]),
    record_count ([ZR-HDR-014]) and logical_bytes ([ZR-HDR-015])."""
    g.invalid(
        "index_entry_size_wrong",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-012"],
        description="Dense index_entry_size 32 instead of 24 (empty store, re-sealed)",
        files=empty_dense().hset(48, 4, 32).seal().done(),
    )
    f = Files(rw.build_store(kind="ragged", dtype="uint8", ndim=3, records=[]))
    g.invalid(
        "index_entry_size_unpadded",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-012"],
        description="Ragged rank 3 with index_entry_size 36, not rounded up to 40 (empty store, re-sealed)",
        files=f.hset(48, 4, 36).seal().done(),
    )
    f = Files(rw.build_store(kind="dense", dtype="uint8", item_shape=(4,), records=[]))
    f.hset(24, 8, 2**48 + 1).hset(56, 8, (2**48 + 1) * 24).seal()
    g.invalid(
        "record_count_above_max",
        error="limit",
        phase="open",
        spec=["ZR-HDR-014", "ZR-LIM-001", "ZR-ERR-002"],
        description="record_count 2^48 + 1 (index_size consistent with it; the empty "
        "index.zri cannot be, and is judged only after the header)",
        files=f.done(),
    )
    f = dense_base()
    g.invalid(
        "logical_bytes_mismatch",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-015"],
        description="logical_bytes one more than the records' logical sizes (re-sealed)",
        files=f.hset(32, 8, f.hget(32, 8) + 1).seal().done(),
    )


def _invalid_dictionary_cases(g: Generator) -> None:
    """The dictionary in the header: missing, present with codec zstd, or not matching
    dict_checksum ([ZR-HDR-013])."""
    raw_dict = _raw_content_dictionary()
    zd = ragged_base(
        dtype="uint8", records=[text_record(k, 50) for k in range(3)], codec="zstd_dict", dictionary=raw_dict
    )
    f = Files(zd.done())
    hdr = f.header
    f.f["header.zrh"] = hdr[:136] + hdr[136 + 256 : -8] + hdr[-8:]
    f.hset(12, 4, len(f.header)).hset(52, 4, 0).hset(72, 8, 0).seal()
    g.invalid(
        "dictionary_missing",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-013", "ZR-COD-002"],
        description="codec zstd_dict with dict_size 0: the dictionary the frames need is not in the header",
        files=f.done(),
    )
    f = Files(zd.done()).hset(19, 1, 1).seal()
    g.invalid(
        "dictionary_with_codec_zstd",
        error="corrupt",
        phase="open",
        spec=["ZR-HDR-013"],
        description="codec zstd with a 256-byte dictionary in the header",
        files=f.done(),
    )
    f = Files(zd.done())
    f.header[136 + 10] ^= 0xFF
    g.invalid(
        "dictionary_checksum_mismatch",
        error="checksum",
        phase="open",
        spec=["ZR-HDR-013"],
        description="a dictionary byte changed; dict_checksum not updated (header re-sealed)",
        files=f.seal().done(),
    )


def _invalid_malformed_dictionary_cases(g: Generator) -> None:
    """A dictionary of the zstd dictionary format whose entropy tables are not valid
    ([ZR-COD-004]), with and without records that use it."""
    bad_dict = b"\x37\xa4\x30\xec" + (1234).to_bytes(4, "little") + b"\xff" * 200
    frames = rw.encode_records(
        [text_record(k, 30) for k in range(3)], np.dtype("uint8"), rw.zstd_frame, lambda i: 0
    )
    g.invalid(
        "dictionary_malformed",
        error="corrupt",
        phase="open",
        spec=["ZR-COD-004"],
        description="codec zstd_dict whose 208-byte dictionary has the zstd dictionary magic and "
        "ID 1234 but no valid entropy tables",
        files=rw.build(
            kind="ragged",
            dtype_code=3,
            ndim=1,
            codec_code=2,
            data_shards=1,
            records=frames,
            dictionary=bad_dict,
        ),
    )
    g.invalid(
        "dictionary_malformed_empty_store",
        error="corrupt",
        phase="open",
        spec=["ZR-COD-004"],
        description="the malformed dictionary of dictionary_malformed in a store of no records: "
        "it is rejected at open whether or not a record uses it",
        files=rw.build(
            kind="ragged", dtype_code=3, ndim=1, codec_code=2, data_shards=1, records=[], dictionary=bad_dict
        ),
    )


def _invalid_entry_bounds_cases(g: Generator) -> None:
    """Index entries whose offset and stored_size do not lie within their shard ([ZR-IDX-002])."""
    f = dense_base()
    size = f.eget(1, 8, 4)
    shard_size = len(f.f[f"data-{f.eget(1, 12, 1):03d}.zrd"])
    g.invalid(
        "entry_offset_past_end",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-002"],
        description="record 1's offset + stored_size is 1 byte past the end of its shard",
        files=f.eset(1, 0, 8, shard_size - size + 1).seal_index().done(),
    )
    g.invalid(
        "entry_offset_overflow",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-002"],
        description="record 0's offset is 2^64 - 8: offset + stored_size wraps around "
        "64 bits to a small number",
        files=dense_base().eset(0, 0, 8, 2**64 - 8).seal_index().done(),
    )
    f = ragged_base(codec="zstd")
    g.invalid(
        "entry_stored_size_past_end",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-002"],
        description="codec zstd: record 0's stored_size is 2^32 - 1, far past its shard",
        files=f.eset(0, 8, 4, 2**32 - 1).seal_index().done(),
    )
    f = ragged_base()
    g.invalid(
        "entry_empty_record_offset_past_end",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-002"],
        description="record 2 is empty (stored_size 0) but its offset is 1 byte past the "
        "end of its shard; an offset equal to the shard size would be valid",
        files=f.eset(2, 0, 8, len(f.f["data-000.zrd"]) + 1).seal_index().done(),
    )


def _invalid_entry_field_cases(g: Generator) -> None:
    """Index entries with reserved bytes or padding set ([ZR-IDX-003]), and raw records whose
    stored size is not their logical size ([ZR-IDX-004])."""
    g.invalid(
        "entry_reserved_nonzero",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-003"],
        description="reserved byte 14 of record 2's entry set (index re-sealed)",
        files=dense_base().eset(2, 14, 1, 1).seal_index().done(),
    )
    g.invalid(
        "entry_padding_nonzero",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-003"],
        description="Ragged rank 1: padding byte 31 of record 1's 32-byte entry set",
        files=ragged_base().eset(1, 31, 1, 1).seal_index().done(),
    )
    f = ragged_base()
    f.eset(0, 24, 4, 4).eset(1, 24, 4, 0)
    g.invalid(
        "raw_stored_size_not_logical",
        error="corrupt",
        phase="open",
        spec=["ZR-IDX-004"],
        description="codec raw: record 0's shape says 4 int16 (8 bytes) but it stores 6; "
        "record 1 the reverse (logical_bytes unchanged)",
        files=f.seal_index().done(),
    )


def _invalid_ragged_record_size_cases(g: Generator) -> None:
    """Ragged records whose shape is above record_size_bytes_max ([ZR-IDX-004], [ZR-LIM-001])."""
    frame = rw.rle_zstd_frame(0, 2**31 + 1)
    files = rw.build(
        kind="ragged",
        dtype_code=DTYPE_CODE["uint8"],
        ndim=1,
        codec_code=CODEC_CODE["zstd"],
        data_shards=1,
        records=[rw.Stored((2**31 + 1,), 2**31 + 1, frame)],
    )
    g.invalid(
        "ragged_record_size_above_max",
        error="limit",
        phase="open",
        spec=["ZR-IDX-004", "ZR-LIM-001"],
        description="Ragged uint8 zstd record of shape (2^31 + 1,), above "
        "record_size_bytes_max, stored as a valid 64 KiB frame of RLE blocks",
        files=files,
    )
    files = rw.build(
        kind="ragged",
        dtype_code=DTYPE_CODE["uint8"],
        ndim=2,
        codec_code=CODEC_CODE["zstd"],
        data_shards=1,
        records=[rw.Stored((2**32 - 1, 2**32 - 1), 0, rw.zstd_frame(b""))],
    )
    f = Files(files)
    g.invalid(
        "ragged_shape_product_overflow",
        error="limit",
        phase="open",
        spec=["ZR-IDX-004", "ZR-LIM-001"],
        description="Ragged record of shape (2^32 - 1, 2^32 - 1): the product is far "
        "above record_size_bytes_max (logical_bytes left 0)",
        files=f.done(),
    )


def _invalid_record_checksum_cases(g: Generator) -> None:
    """Record checksums, found when the record is read ([ZR-SUM-001], [ZR-SUM-002])."""
    f = dense_base()
    f.f["data-000.zrd"][5] ^= 0x10
    g.invalid(
        "record_checksum_mismatch",
        error="checksum",
        phase="read",
        spec=["ZR-SUM-001", "ZR-SUM-002"],
        description="one bit flipped in record 0's stored bytes",
        files=f.done(),
    )
    f = dense_base(
        records=[text_record(k, 24) for k in range(4)], dtype="uint8", item_shape=(24,), codec="zstd"
    )
    off = f.eget(3, 0, 8) + f.eget(3, 8, 4) - 1
    f.f[f"data-{f.eget(3, 12, 1):03d}.zrd"][off] ^= 0x01
    g.invalid(
        "record_checksum_mismatch_zstd",
        error="checksum",
        phase="read",
        spec=["ZR-SUM-001", "ZR-SUM-002", "ZR-ERR-002"],
        description="codec zstd: the last byte of record 3's frame changed; the checksum "
        "is checked before any decoder sees the bytes",
        files=f.done(),
    )


def _invalid_zstd_frame_cases(g: Generator) -> None:
    """Frames that do not decode to exactly the record's logical size, or that need what the
    store cannot give ([ZR-IDX-005])."""
    _zstd_frame_case(
        g,
        "zstd_frame_content_size_mismatch",
        1,
        "record 1's frame holds 41 bytes; its shape says 40",
        lambda p: rw.zstd_frame(p + b"!"),
    )
    _zstd_frame_case(
        g,
        "zstd_frame_without_content_size",
        2,
        "record 2's frame omits the content size field (spec section 6 requires it)",
        _zstd_without_content_size,
    )
    _zstd_frame_case(
        g,
        "zstd_frame_garbage",
        0,
        "record 0's stored bytes are not a zstd frame (checksum matches)",
        lambda p: b"not a zstd frame",
    )
    _zstd_frame_case(
        g,
        "zstd_frame_trailing_bytes",
        1,
        "record 1's frame is followed by one extra stored byte",
        lambda p: rw.zstd_frame(p) + b"\x00",
    )
    _zstd_frame_case(
        g,
        "zstd_frame_truncated",
        2,
        "record 2's frame lost its last 5 bytes (checksum of what is left)",
        lambda p: rw.zstd_frame(p)[:-5],
    )
    _zstd_frame_case(
        g,
        "zstd_frame_needs_dictionary",
        1,
        "codec zstd: record 1's frame names dictionary ID 7, which no "
        "store of codec zstd can supply",
        lambda p: _frame_with_dict_id(p, 7),
        spec=["ZR-IDX-005", "ZR-COD-002"],
    )


def _invalid_zstd_frame_shape_cases(g: Generator) -> None:
    """Stored bytes that are not exactly one frame, or whose one frame does not agree with
    itself ([ZR-IDX-005])."""
    _zstd_frame_case(
        g,
        "zstd_skippable_frame_first",
        0,
        "a skippable frame (magic 0x184D2A50) before record 0's "
        "frame: the stored bytes are not exactly one zstd frame",
        lambda p: b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"skip" + rw.zstd_frame(p),
    )
    _zstd_frame_case(
        g,
        "zstd_two_frames",
        1,
        "record 1 is stored as two frames of 10 and 30 bytes: their "
        "contents add up, but the stored bytes are not one frame",
        lambda p: rw.zstd_frame(p[:10]) + rw.zstd_frame(p[10:]),
    )
    _zstd_frame_case(
        g,
        "zstd_frame_shorter_than_declared",
        2,
        "record 2's frame declares 40 bytes of content but its only block holds 38",
        lambda p: (
            b"\x28\xb5\x2f\xfd\x20" + bytes([len(p)]) + (1 | ((len(p) - 2) << 3)).to_bytes(3, "little") + p[:-2]
        ),
    )
    _zstd_frame_case(
        g,
        "zstd_frame_checksum_mismatch",
        0,
        "record 0's frame carries zstd's content checksum, "
        "and its last byte is wrong (the record checksum matches the altered bytes)",
        lambda p: _zstd_with_checksum(p)[:-1] + bytes([_zstd_with_checksum(p)[-1] ^ 1]),
    )


def _invalid_zstd_dict_frame_case(g: Generator) -> None:
    """A frame of codec zstd_dict that names a dictionary other than the store's ([ZR-COD-002])."""
    raw_dict = _raw_content_dictionary()
    recs = _frame_case_records()
    stored = rw.encode_records(recs, np.dtype("uint8"), rw.dict_encoder(raw_dict), lambda i: 0)
    stored[0].stored = _frame_with_dict_id(bytes(recs[0]), 9)
    g.invalid(
        "zstd_dict_wrong_dictionary_id",
        error="decode",
        phase="read",
        spec=["ZR-IDX-005", "ZR-COD-002"],
        description="codec zstd_dict with a raw-content dictionary (ID 0): record 0's "
        "frame names dictionary ID 9",
        files=rw.build(
            kind="ragged",
            dtype_code=3,
            ndim=1,
            codec_code=2,
            data_shards=1,
            records=stored,
            dictionary=raw_dict,
        ),
    )


def _raw_content_dictionary() -> bytes:
    """The 256-byte raw-content dictionary (no dictionary ID) of the invalid dictionary cases."""
    return bytes(text_record(3, 256))


def _frame_case_records() -> list[np.ndarray]:
    """The three 40-byte text records of the invalid zstd frame cases."""
    return [text_record(k, 40) for k in range(3)]


def _zstd_frame_case(
    g: Generator,
    name: str,
    which: int,
    description: str,
    frame_of: Callable[[bytes], bytes],
    spec: list[str] | None = None,
) -> None:
    """An invalid case of codec zstd: a Ragged uint8 store of the frame case records whose
    record `which` is stored as `frame_of(its bytes)`, the others as frames of the reference
    writer. The record checksum is that of the stored bytes, so the frame alone breaks a rule,
    found when the record is read."""
    recs = _frame_case_records()
    stored = rw.encode_records(recs, np.dtype("uint8"), rw.zstd_frame, lambda i: 0)
    stored[which].stored = frame_of(bytes(recs[which]))
    g.invalid(
        name,
        error="decode",
        phase="read",
        spec=spec if spec is not None else ["ZR-IDX-005"],
        description=description,
        files=rw.build(kind="ragged", dtype_code=3, ndim=1, codec_code=1, data_shards=1, records=stored),
    )




# ---- main -----------------------------------------------------------------------------------


def generate(out: Path) -> None:
    g = Generator(out)
    valid_cases(g)
    invalid_cases(g)
    text = json.dumps(g.manifest(), indent=1) + "\n"
    (out / "cases.json").write_text(text)


def generate_v1_1(out: Path) -> None:
    import cases_v1_1

    g = Generator(out, (1, 1))
    cases_v1_1.cases(g, sys.modules[__name__])
    text = json.dumps(g.manifest(), indent=1) + "\n"
    (out / "cases.json").write_text(text)


def generate_v1_2(out: Path) -> None:
    import cases_v1_2

    g = Generator(out, (1, 2))
    cases_v1_2.cases(g, sys.modules[__name__])
    text = json.dumps(g.manifest(), indent=1) + "\n"
    (out / "cases.json").write_text(text)


def generate_datasets(out: Path) -> None:
    import cases_datasets

    cases_datasets.generate(out)


GENERATORS = {V1: generate, V1_1: generate_v1_1, V1_2: generate_v1_2, DATASETS: generate_datasets}


def _tree(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every file and symbolic link under `root` (links not followed): path -> its kind and
    contents or target."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(base) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_file():
                out[rel] = ("file", p.read_bytes())
    return out


def check() -> int:
    problems: list[str] = []
    count = 0
    for folder, make in GENERATORS.items():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / folder.name
            out.mkdir()
            make(out)
            want = _tree(out)
            have = {k: v for k, v in _tree(folder).items() if k != "cases.schema.json"}
        where = folder.relative_to(HERE).as_posix()
        problems += [f"missing from conformance/{where}: {p}" for p in sorted(want.keys() - have.keys())]
        problems += [f"not produced by the generator: {where}/{p}" for p in sorted(have.keys() - want.keys())]
        problems += [f"differs: {where}/{p}" for p in sorted(want.keys() & have.keys()) if want[p] != have[p]]
        count += len(want)
    for p in problems:
        print(p)
    print(f"generate.py --check: {count} files, {len(problems)} differences")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="regenerate into a temporary folder and compare with the folders"
    )
    args = parser.parse_args()
    if args.check:
        return check()
    for folder, make in GENERATORS.items():
        folder.mkdir(exist_ok=True)
        for sub in ("valid", "invalid"):
            shutil.rmtree(folder / sub, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            staging = Path(tmp)
            make(staging)
            for sub in ("valid", "invalid"):
                os.rename(staging / sub, folder / sub)
            os.replace(staging / "cases.json", folder / "cases.json")
        print(f"wrote {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
