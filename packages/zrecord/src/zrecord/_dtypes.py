"""Schema validation: dtype codes and their parameters (spec/format-v1.md §3.3), codecs and
shapes.

Schemas are explicit and never inferred: every function here rejects what it cannot store
exactly, with a message that says what was given and what is accepted.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, SupportsIndex

import numpy as np

from zrecord import _native
from zrecord.errors import CodecError, LimitError, SchemaError

if TYPE_CHECKING:
    from zrecord._types import Codec, DictBytes

# The native core's constants (zrecord.h, through the binding's one table of them).
_C = _native.CONSTANTS
KIND_DENSE = _C["ZR_KIND_DENSE"]
KIND_RAGGED = _C["ZR_KIND_RAGGED"]



def _dtype_tables() -> tuple[dict[int, np.dtype[Any]], dict[int, str]]:
    """spec §3.3, from the native core's one table: code -> dtype for the dtypes of fixed item
    size (little-endian storage; one-byte types have no byte order), and code -> NumPy kind
    ('M', 'm', 'S', 'U', 'V') for the parametric ones of format 1.1, whose unit or length the
    header gives."""
    fixed: dict[int, np.dtype[Any]] = {}
    parametric: dict[int, str] = {}
    for code, name, itemsize in _native.dtype_table():
        dt = np.dtype(name)
        if dt.kind in "MmSUV":
            parametric[code] = dt.kind
            continue
        if dt.itemsize != itemsize:
            raise ImportError(f"zrecord: the native core gives dtype {name!r} (code {code}) "
                              f"itemsize {itemsize}, NumPy {dt.itemsize}; the build is broken")
        # np.dtype("<i4") is NumPy's own descriptor of int32 on a little-endian host (byte order
        # "="), where dt.newbyteorder("<") would be a new object equal to it. Every array a
        # reader returns shares this one: a new descriptor is a shared object whose reference
        # count threads update at once for every scalar they take from such arrays (on a
        # free-threaded CPython), where NumPy's own is immortal.
        fixed[code] = np.dtype(dt.newbyteorder("<").str) if itemsize > 1 else dt
    return fixed, parametric


_DTYPES, _PARAMETRIC = _dtype_tables()
_CODES: dict[np.dtype[Any], int] = {dt: code for code, dt in _DTYPES.items()}
_KIND_CODES: dict[str, int] = {kind: code for code, kind in _PARAMETRIC.items()}
# datetime64/timedelta64 unit codes (spec §3.3), from the core: code -> NumPy unit name.
_UNITS: dict[int, str] = dict(_native.datetime_units())
_UNIT_CODES: dict[str, int] = {name: code for code, name in _UNITS.items()}
# NumPy keeps a datetime unit count and an item size in a C int.
UNIT_COUNT_MAX = _C["ZR_UNIT_COUNT_MAX"]
ITEMSIZE_BYTES_MAX = _C["ZR_ITEMSIZE_BYTES_MAX"]

# Codec name -> the codec code a store's header holds (spec/format-v1.md), from zrecord.h.
CODE_OF_CODEC = {"raw": _C["ZR_CODEC_RAW"], "zstd": _C["ZR_CODEC_ZSTD"],
                 "zstd_dict": _C["ZR_CODEC_ZSTD_DICT"]}
CODEC_NAMES = {code: name for name, code in CODE_OF_CODEC.items()}
CODECS: tuple[str, ...] = tuple(CODE_OF_CODEC)
"""The codec names ``create(..., codec=...)`` and ``check_store_options`` accept, in the order
of their codes: ``("raw", "zstd", "zstd_dict")``. A tool that offers the codecs (a command
line's choices, a message) takes them from here rather than keeping its own list."""

NDIM_MAX = _C["ZR_NDIM_MAX"]
DATA_SHARDS_MAX = _C["ZR_DATA_SHARDS_MAX"]
RECORD_SIZE_BYTES_MAX = _C["ZR_RECORD_SIZE_BYTES_MAX"]
DICT_SIZE_BYTES_MAX = _C["ZR_DICT_SIZE_BYTES_MAX"]
# Flags of zr_writer_open and zr_staging_publish, and of zr_reader_open_ex.
WRITE_NO_SYNC = _C["ZR_WRITE_NO_SYNC"]
# Index parts (format 1.2, spec §4.1); zr_writer_open only.
WRITE_INDEX_PARTS = _C["ZR_WRITE_INDEX_PARTS"]
OPEN_CACHE_BYPASS = _C["ZR_OPEN_CACHE_BYPASS"]
OPEN_VALIDATE_INDEX = _C["ZR_OPEN_VALIDATE_INDEX"]
OPEN_CHECK_EVERY_READ = _C["ZR_OPEN_CHECK_EVERY_READ"]
OPEN_WHOLE_INDEX = _C["ZR_OPEN_WHOLE_INDEX"]
# NumPy indexes arrays with a signed pointer-sized integer and refuses any shape whose non-zero
# axes multiply (times the itemsize) past it, even when another axis is zero. The format allows
# such empty records; they are refused at the Python boundary with a LimitError.
NUMPY_SIZE_MAX = int(np.iinfo(np.intp).max)

_ACCEPTED = (", ".join(str(dt) for dt in _DTYPES.values())
             + ", datetime64[unit], timedelta64[unit], S<n>, U<n>, V<n>")


def dtype_code_known(code: int) -> bool:
    """Whether `code` is a dtype code of spec §3.3 (whatever its parameters)."""
    return code in _DTYPES or code in _PARAMETRIC


def dtype_from_info(code: int, length: int = 0, unit: int = 0) -> np.dtype[Any]:
    """The NumPy dtype of a store's dtype code and parameters (spec §3.3), as the native core
    validated them."""
    kind = _PARAMETRIC.get(code)
    if kind is None:
        return _DTYPES[code]
    if kind in "Mm":
        count = "" if length == 1 else str(length)
        return np.dtype(f"<{kind}8[{count}{_UNITS[unit]}]")
    return np.dtype(f"<U{length}") if kind == "U" else np.dtype(f"{kind}{length}")


def dtype_code(dtype: Any) -> tuple[np.dtype[Any], int, int, int]:
    """Validate a schema dtype; return it normalised (little-endian) with its format code and
    its parameters dtype_length and dtype_unit (spec §3.3; 0 and 0 for the dtypes of 1.0)."""
    if dtype is None:
        raise SchemaError(f"dtype is required and is never inferred; got None (accepted: {_ACCEPTED})")
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise SchemaError(f"dtype {dtype!r} is not a NumPy dtype (accepted: {_ACCEPTED})") from exc
    if dt.kind in "TO":
        # NumPy 2's variable-width strings (StringDType, kind "T") and Python objects hold
        # references, not bytes a store could keep.
        raise SchemaError(f"dtype {dt} holds references to Python objects or variable-width "
                          "strings, not fixed-size bytes; store strings as fixed-width "
                          f"'U<n>' or bytes 'S<n>' (accepted: {_ACCEPTED})")
    if dt.fields is not None:
        raise SchemaError(f"structured dtype {dt} is not supported (accepted: {_ACCEPTED})")
    if dt.subdtype is not None:
        raise SchemaError(f"subarray dtype {dt} is not supported; put the sub-shape into "
                          f"item_shape instead (accepted: {_ACCEPTED})")
    if dt.metadata:
        raise SchemaError(f"dtype {dt} carries metadata {dict(dt.metadata)!r}, which is not "
                          f"supported (accepted: {_ACCEPTED})")
    if dt.itemsize == 0:
        raise SchemaError(f"zero-itemsize dtype {dt.str!r} is not supported (accepted: {_ACCEPTED})")
    if dt.byteorder == ">":
        raise SchemaError(f"big-endian dtype {dt.str!r} is not supported; stores are little-endian: "
                          f"use {dt.newbyteorder('<').str!r} (accepted: {_ACCEPTED})")
    if dt.kind in _KIND_CODES:
        return _parametric_code(dt)
    code = _CODES.get(dt.newbyteorder("<") if dt.itemsize > 1 else dt)
    if code is None:
        raise SchemaError(f"dtype {dt} (kind {dt.kind!r}) has no record format "
                          f"(accepted: {_ACCEPTED})")
    return _DTYPES[code], code, 0, 0


def _parametric_code(dt: np.dtype[Any]) -> tuple[np.dtype[Any], int, int, int]:
    """datetime64/timedelta64 with their unit and count; S<n>, U<n>, V<n> with their length."""
    code = _KIND_CODES[dt.kind]
    if dt.kind in "Mm":
        unit, count = np.datetime_data(dt)
        if unit == "generic":
            raise SchemaError(f"dtype {dt} has no unit (NumPy's generic unit holds only NaT); "
                              f"give one, such as {dt.name}[ns] (accepted: {_ACCEPTED})")
        if unit not in _UNIT_CODES or not 1 <= count <= UNIT_COUNT_MAX:
            raise SchemaError(f"dtype {dt} has unit {count}{unit}, which the format cannot hold "
                              f"(units: {', '.join(_UNITS.values())})")
        return dtype_from_info(code, count, _UNIT_CODES[unit]), code, count, _UNIT_CODES[unit]
    length = dt.itemsize // 4 if dt.kind == "U" else dt.itemsize
    if dt.itemsize > ITEMSIZE_BYTES_MAX:
        raise LimitError(f"dtype {dt} has item size {dt.itemsize}; itemsize_bytes_max is "
                         f"{ITEMSIZE_BYTES_MAX}")
    return dtype_from_info(code, length), code, length, 0


def item_shape_tuple(item_shape: Any) -> tuple[int, ...]:
    """Validate a Dense item shape: a sequence of non-negative ints, at most 32 axes."""
    if item_shape is None:
        raise SchemaError("item_shape is required and is never inferred; got None "
                          "(use () for scalar records)")
    if isinstance(item_shape, (int, np.integer)):
        item_shape = (item_shape,)
    try:
        shape = tuple(operator.index(d) for d in item_shape)
    except TypeError as exc:
        raise SchemaError(f"item_shape must be a tuple of ints; got {item_shape!r}") from exc
    if len(shape) > NDIM_MAX:
        raise LimitError(f"item_shape has {len(shape)} axes; ndim_max is {NDIM_MAX}")
    if any(d < 0 for d in shape):
        raise SchemaError(f"item_shape must not have negative axes; got {shape}")
    if not numpy_can_hold(shape, 1):
        raise LimitError(f"item_shape {shape} cannot be a NumPy shape: its non-zero axes "
                         f"multiply past {NUMPY_SIZE_MAX}")
    return shape


def numpy_can_hold(shape: tuple[int, ...] | list[int], itemsize: int) -> bool:
    """Whether NumPy can make an array of `shape` and `itemsize` (zero axes aside)."""
    size = itemsize
    for d in shape:
        if d:
            size *= d
            if size > NUMPY_SIZE_MAX:
                return False
    return True


def ndim_value(ndim: Any) -> int:
    """Validate a Ragged rank: 1 .. 32."""
    if ndim is None:
        raise SchemaError("ndim is required and is never inferred; got None")
    try:
        n = operator.index(ndim)
    except TypeError as exc:
        raise SchemaError(f"ndim must be an int; got {ndim!r}") from exc
    if n < 1:
        raise SchemaError(f"Ragged ndim must be at least 1; got {n} (scalar records: use "
                          "Dense with item_shape=())")
    if n > NDIM_MAX:
        raise LimitError(f"ndim {n} exceeds ndim_max {NDIM_MAX}")
    return n


def codec_code(codec: Any, dict_bytes: Any) -> tuple[int, bytes | None]:
    """Validate codec and dictionary arguments; return the codec code and the dictionary."""
    if codec not in CODE_OF_CODEC:
        raise CodecError(f"codec must be one of {', '.join(map(repr, CODECS))} (it is required "
                         f"and never inferred); got {codec!r}")
    if codec == "zstd_dict":
        if dict_bytes is None:
            raise CodecError("codec 'zstd_dict' needs dict_bytes: train one with "
                             "zrecord.train_dict(settled_data)")
        if not isinstance(dict_bytes, (bytes, bytearray, memoryview)):
            raise CodecError(f"dict_bytes must be bytes; got {type(dict_bytes).__name__}")
        data = bytes(dict_bytes)
        if not data:
            raise CodecError("dict_bytes is empty")
        if len(data) > DICT_SIZE_BYTES_MAX:
            raise LimitError(f"dict_bytes has {len(data)} bytes; dict_size_bytes_max is "
                             f"{DICT_SIZE_BYTES_MAX}")
        return CODE_OF_CODEC[codec], data
    if dict_bytes is not None:
        raise CodecError(f"dict_bytes is only used by codec 'zstd_dict'; got codec {codec!r} "
                         "with a dictionary")
    return CODE_OF_CODEC[codec], None


def check_store_options(*, codec: Codec, dict_bytes: DictBytes | None = None,
                        data_shards: SupportsIndex = 4) -> None:
    """Check the options of ``Dense.create``/``Ragged.create`` without creating anything.

    Raises what ``create`` would (``CodecError``, ``LimitError``, ``SchemaError``), so a tool
    that creates many stores (the converter) can refuse bad options before writing any.
    """
    codec_code(codec, dict_bytes)
    data_shards_value(data_shards)


def data_shards_value(data_shards: Any) -> int:
    try:
        n = operator.index(data_shards)
    except TypeError as exc:
        raise SchemaError(f"data_shards must be an int in 1..{DATA_SHARDS_MAX}; "
                          f"got {data_shards!r}") from exc
    if not 1 <= n <= DATA_SHARDS_MAX:
        raise LimitError(f"data_shards must be in 1..{DATA_SHARDS_MAX}; got {n}")
    return n
