"""From a Hugging Face feature to a typed zrecord column, without transforming any value.

Every column gets a *reader*, chosen from its feature type (and, for Image and Audio, from
``images=`` / ``audio=``: decode to pixels and samples, or keep the encoded files). Conversion
makes two passes over the Arrow data of a split: ``scan`` sees every batch first and finds
what must fail before anything is written (nulls, ragged nested lists, images of mixed mode)
and what the data decide (whether all images share one size); ``plan`` then fixes the
column's kind, dtype and shape; ``extract`` turns each batch into the records that are
appended. A decoded record is exactly what ``dataset[i][column]`` decodes to, as a NumPy
array; an encoded record is exactly the bytes of the file.

Invariants:
- The check pass never decodes a PNG, JPEG or WebP image: it reads their headers
  (``_headers``), and asks Pillow only about files the header reader leaves to it. So each
  image is decoded once, while writing, and a record that decodes to anything else than its
  header promised fails there, naming its row (nothing is published).
- File bytes are read from the Arrow buffers in place (memory views of the memory-mapped
  files), never copied into Python ``bytes`` objects for the whole batch.
- What the check pass keeps per row is one byte (how the write pass decodes an image; the
  format of an encoded file) and, for decoded images and audio, the bytes the record decodes
  to (``sizes``, eight bytes), which the write pass cuts its batches by: nine bytes a row,
  whatever the images.
"""

from __future__ import annotations

import abc
import array
import io
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from loaderx_converter._headers import image_header, png_stream, sniff
from loaderx_converter._spelling import PYTHON, Spelling
from loaderx_converter.errors import (
    ConversionError,
    InconsistentRecordsError,
    NullValueError,
    UnsupportedFeatureError,
)

# Hugging Face ``Value`` dtypes that are plain fixed-width numbers (or bool) in NumPy.
_NUMERIC = {
    "bool": "bool",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float16", "float32": "float32", "float64": "float64",
    "float": "float32", "double": "float64",
}
_STRINGS = {"string", "large_string", "string_view"}

# Hugging Face ``Value`` dtypes of fixed width that are not numbers, with the NumPy dtype a
# record holds exactly (zrecord format 1.1): times without a time zone and durations keep
# their unit, dates their resolution, fixed-size binary its width.
_TEMPORAL = {
    **{f"timestamp[{u}]": f"datetime64[{u}]" for u in ("s", "ms", "us", "ns")},
    **{f"duration[{u}]": f"timedelta64[{u}]" for u in ("s", "ms", "us", "ns")},
    "date32": "datetime64[D]", "date64": "datetime64[ms]",
}


def _fixed_width(dtype: str) -> str | None:
    """The NumPy dtype of a ``Value`` dtype whose every value has one width, or None."""
    if dtype in _NUMERIC:
        return _NUMERIC[dtype]
    if dtype in _TEMPORAL:
        return _TEMPORAL[dtype]
    if dtype.startswith("fixed_size_binary[") and dtype.endswith("]"):
        width = dtype[len("fixed_size_binary["):-1]
        if width.isdigit() and int(width) > 0:
            return f"S{int(width)}"
    return None


def _why_not(dtype: str) -> str:
    if dtype.startswith("timestamp["):
        return (f"Value dtype {dtype!r} has a time zone, which NumPy's datetime64 cannot hold; "
                "convert it to UTC without a time zone first")
    return f"Value dtype {dtype!r} is not a fixed-width number, time, duration or binary"


# PIL mode -> (NumPy dtype, channels or None for a 2-D array), as ``np.asarray(image)`` gives.
_IMAGE_MODES: dict[str, tuple[str, int | None]] = {
    "1": ("bool", None), "L": ("uint8", None), "P": ("uint8", None),
    "LA": ("uint8", 2), "PA": ("uint8", 2), "La": ("uint8", 2),
    "RGB": ("uint8", 3), "YCbCr": ("uint8", 3), "LAB": ("uint8", 3), "HSV": ("uint8", 3),
    "RGBA": ("uint8", 4), "RGBa": ("uint8", 4), "RGBX": ("uint8", 4), "CMYK": ("uint8", 4),
    "I": ("int32", None), "F": ("float32", None), "I;16": ("uint16", None),
}
_ORIENTATION_TAG = 0x0112
# How the write pass decodes an image (one byte per row, from the check pass): ask Pillow for
# the EXIF orientation as datasets does; the header proved there is none; and a PNG whose
# pixel stream Pillow's zlib decoder takes as it is (see _headers.ImageHeader).
_ASK_EXIF, _PLAIN, _ZIP = 0, 1, 2
# Modes whose pixels Pillow lays out as NumPy does, so it can decode into a NumPy buffer.
_MAPPABLE_MODES = ("L", "P", "RGBA")
# Decoding images on the conversion's thread pool pays when decoding, not Python, dominates:
# files of at least this many bytes on average. Below it (Fashion-MNIST's 28 x 28 PNGs are
# ~600 bytes) Pillow's per-image Python work holds the GIL and threads only add hand-offs.
POOL_FILE_BYTES_MIN = 16 << 10
# How many leading bytes of a file on disk (a path-only record) are read to learn its format.
_SNIFF_BYTES = 64
# Encoded files of at most this many formats per column (the per-record format is a uint8).
FORMATS_MAX = 255

Blob = memoryview | str  # a file's bytes in an Arrow buffer, or the path of a file on disk


@dataclass(frozen=True)
class Where:
    """Names a column for messages: ``split 'train', column 'image' (Image(...))``."""

    split: str
    column: str
    feature: Any
    spelling: Spelling = field(default=PYTHON, compare=False)

    def __str__(self) -> str:
        return f"split {self.split!r}, column {self.column!r} ({self.feature!r})"


@dataclass(frozen=True)
class ColumnPlan:
    """What a column becomes: a Dense store of `item_shape` or a Ragged store of `ndim`."""

    kind: str
    dtype: np.dtype[Any]
    item_shape: tuple[int, ...] | None
    ndim: int | None

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description for the provenance file."""
        out: dict[str, Any] = {"kind": self.kind, "dtype": self.dtype.str}
        if self.kind == "Dense":
            out["item_shape"] = list(self.item_shape or ())
        else:
            out["ndim"] = self.ndim
        return out

    @property
    def record_bytes(self) -> int | None:
        """Bytes of one record of a Dense column; None for Ragged."""
        if self.kind != "Dense":
            return None
        return int(self.dtype.itemsize * int(np.prod(self.item_shape or (), dtype=np.int64)))


def _unwrap(arr: pa.Array) -> pa.Array:
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


def _is_list(arr: pa.Array) -> bool:
    t = arr.type
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _lengths(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False),
                      dtype=np.int64)


def first_null(arr: pa.Array) -> tuple[int, tuple[int, ...]] | None:
    """(row, element) of the first null in `arr` at any nesting depth, or None.

    `element` is the index path inside the row's nested lists: ``()`` when the row itself is
    null, ``(1,)`` for ``[3, None]``, ``(0, 1)`` for ``[[3, None]]``.
    """
    arr = _unwrap(arr)
    found: list[tuple[int, tuple[int, ...]]] = []
    if arr.null_count:
        found.append((int(np.argmax(arr.is_null().to_numpy(zero_copy_only=False))), ()))
    if _is_list(arr):
        # flatten() drops the values behind null lists, and _lengths counts those as empty, so
        # a flat position maps back to its row through the running lengths.
        child = first_null(arr.flatten())
        if child is not None:
            lengths = _lengths(arr)
            ends = np.cumsum(lengths)
            row = int(np.searchsorted(ends, child[0], side="right"))
            start = int(ends[row] - lengths[row])
            found.append((row, (child[0] - start, *child[1])))
    elif pa.types.is_struct(arr.type):
        for child_array in arr.flatten():
            child = first_null(child_array)
            if child is not None:
                found.append((child[0], ()))
    return min(found) if found else None


def _null_error(where: Where, row: int, element: tuple[int, ...] = ()) -> NullValueError:
    if not element:
        what = f"row {row} is null (missing)"
    elif len(element) == 1:
        what = f"row {row}, element {element[0]} is null (missing)"
    else:
        what = f"row {row}, element {''.join(f'[{k}]' for k in element)} is null (missing)"
    fix = where.spelling.fix_in_python(
        "fill or drop missing values in the dataset first (Dataset.filter drops rows, "
        "Dataset.map fills them)")
    return NullValueError(
        f"{where}: {what}; zrecord records cannot be null. {_capital(fix)}, or "
        f"{where.spelling.leave_out(where.column)}")


class _Reader(abc.ABC):
    """Base of the per-feature readers; see the module docstring for the protocol."""

    pool: Any = None  # a concurrent.futures executor set by convert(), or None: one thread

    def __init__(self, where: Where) -> None:
        self.where = where

    def scan(self, arr: pa.Array, row0: int) -> None:
        found = first_null(arr)
        if found is not None:
            raise _null_error(self.where, row0 + found[0], found[1])

    @abc.abstractmethod
    def plan(self) -> ColumnPlan:
        """The column's store kind, dtype and shape, once the check pass has seen every row."""

    @abc.abstractmethod
    def extract(self, arr: pa.Array, plan: ColumnPlan, row0: int) -> Any:
        """The records of `arr` (rows from `row0`) as the writer of `plan` appends them."""

    def describe(self) -> dict[str, Any]:
        """What the provenance says about this column beyond its plan (none by default)."""
        return {}


class _ValueReader(_Reader):
    """``Value`` numerics and bool, times, durations and fixed-size binary, and ``ClassLabel``
    (int64): Dense records of shape ()."""

    def __init__(self, where: Where, dtype: str) -> None:
        super().__init__(where)
        self.dtype = np.dtype(dtype)

    def plan(self) -> ColumnPlan:
        return ColumnPlan("Dense", self.dtype, (), None)

    def extract(self, arr: pa.Array, plan: ColumnPlan, row0: int) -> np.ndarray:
        values = _unwrap(arr).to_numpy(zero_copy_only=False)
        return np.ascontiguousarray(values, dtype=self.dtype)


class _ListReader(_Reader):
    """Nested lists and ``ArrayXD``: one axis per nesting level, fixed or variable.

    `dims` has one entry per axis: its fixed length, or None where the feature lets it vary.
    All fixed: Dense. Any variable: Ragged, and each record must be rectangular.
    """

    def __init__(self, where: Where, dtype: str, dims: list[int | None]) -> None:
        super().__init__(where)
        self.dtype = np.dtype(dtype)
        self.dims = dims

    def plan(self) -> ColumnPlan:
        if all(d is not None for d in self.dims):
            return ColumnPlan("Dense", self.dtype, tuple(int(d) for d in self.dims if d is not None),
                              None)
        return ColumnPlan("Ragged", self.dtype, None, len(self.dims))

    def scan(self, arr: pa.Array, row0: int) -> None:
        super().scan(arr, row0)
        self._shapes(arr, row0)

    def _levels(self, arr: pa.Array) -> tuple[list[np.ndarray], pa.Array]:
        levels = []
        arr = _unwrap(arr)
        for _ in self.dims:
            arr = _unwrap(arr)
            levels.append(_lengths(arr))
            arr = arr.flatten()
        return levels, _unwrap(arr)

    def _shapes(self, arr: pa.Array, row0: int) -> tuple[np.ndarray, pa.Array]:
        """Each record's shape, as an (n, ndim) array, checking rectangularity and fixed axes."""
        levels, leaf = self._levels(arr)
        n = len(arr)
        shapes = np.zeros((n, len(self.dims)), dtype=np.int64)
        shapes[:, 0] = levels[0]
        record = np.arange(n)
        for k in range(1, len(self.dims)):
            record = np.repeat(record, levels[k - 1])
            counts = np.bincount(record, minlength=n)
            first = np.concatenate(([0], np.cumsum(counts)[:-1]))
            lengths = levels[k]
            bad = lengths != lengths[first[record]] if lengths.size else np.zeros(0, bool)
            if bad.any():
                row = int(record[int(np.argmax(bad))])
                raise InconsistentRecordsError(
                    f"{self.where}: row {row0 + row} is a nested list whose rows differ in length "
                    f"on axis {k}, so it is not an array; zrecord stores rectangular records only")
            fixed = self.dims[k]
            # A record with no elements on the axis above has this axis's fixed length, or 0.
            empty = 0 if fixed is None else fixed
            head = lengths[np.minimum(first, lengths.size - 1)] if lengths.size else np.zeros(n, np.int64)
            shapes[:, k] = np.where(counts > 0, head, empty)
        for axis, fixed in enumerate(self.dims):
            if fixed is not None and n and (shapes[:, axis] != fixed).any():
                row = int(np.argmax(shapes[:, axis] != fixed))
                raise InconsistentRecordsError(
                    f"{self.where}: row {row0 + row} has length {int(shapes[row, axis])} on axis "
                    f"{axis}, but the feature fixes it to {fixed}")
        return shapes, leaf

    def extract(self, arr: pa.Array, plan: ColumnPlan, row0: int) -> Any:
        shapes, leaf = self._shapes(arr, row0)
        values = np.ascontiguousarray(leaf.to_numpy(zero_copy_only=False), dtype=self.dtype)
        if plan.kind == "Dense":
            return values.reshape((len(arr), *(plan.item_shape or ())))
        sizes = np.prod(shapes, axis=1)
        ends = np.cumsum(sizes)
        starts = ends - sizes
        return [values[int(s):int(e)].reshape(tuple(int(d) for d in shape))
                for s, e, shape in zip(starts, ends, shapes)]


# -- Image and Audio: the files ----------------------------------------------------------------


def _media_fields(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The ``bytes`` and ``path`` children of an Image or Audio struct array, sliced as it is."""
    arr = _unwrap(arr)
    children = dict(zip((f.name for f in arr.type), arr.flatten()))
    return children["bytes"], children["path"]


def _missing(arr: pa.Array) -> np.ndarray:
    """Rows with neither bytes nor a path (what ``datasets`` decodes to None)."""
    data, path = _media_fields(arr)
    return np.asarray(_unwrap(arr).is_null().to_numpy(zero_copy_only=False)
                      | (data.is_null().to_numpy(zero_copy_only=False)
                         & path.is_null().to_numpy(zero_copy_only=False)))


def blobs(arr: pa.Array) -> list[Blob]:
    """Each row's file: a memory view of its bytes inside the Arrow buffer (no copy), or its
    path when the row holds only a path. Rows must not be missing (see ``_missing``)."""
    data, path = _media_fields(arr)
    n = len(data)
    if pa.types.is_binary(data.type) or pa.types.is_large_binary(data.type):
        width = 8 if pa.types.is_large_binary(data.type) else 4
        buffers = data.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int64 if width == 8 else np.int32,
                                count=n + 1, offset=data.offset * width).tolist()
        values = memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")
        views = [values[offsets[i]:offsets[i + 1]] for i in range(n)]
    else:  # another binary layout (a view type): one Python bytes object per row
        views = [memoryview(b) if b is not None else memoryview(b"") for b in data.to_pylist()]
    if not data.null_count:
        return list(views)
    valid = data.is_valid().to_numpy(zero_copy_only=False)
    paths = path.to_pylist()
    return [views[i] if valid[i] else str(paths[i]) for i in range(n)]


def _is_local(path: str) -> bool:
    return "://" not in path and "::" not in path


def _read_file(path: str, limit: int | None = None) -> bytes:
    """The bytes of a record's file (its first `limit` bytes): a local path, or a remote one
    through the file system layer ``datasets`` itself uses."""
    if _is_local(path):
        with open(path, "rb") as f:
            return f.read() if limit is None else f.read(limit)
    from datasets.utils.file_utils import xopen

    with xopen(path, "rb") as f:
        data = f.read() if limit is None else f.read(limit)
    return bytes(data)


class _MediaReader(_Reader):
    """Shared by the readers of Image and Audio columns (a struct of ``bytes`` and ``path``;
    null if both are missing): the null check and the thread pool."""

    def _map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        if self.pool is None or len(items) < 32:
            return [fn(item) for item in items]
        step = max(1, len(items) // (4 * (os.cpu_count() or 1)))
        parts = [items[i:i + step] for i in range(0, len(items), step)]
        return [y for part in self.pool.map(lambda p: [fn(x) for x in p], parts) for y in part]

    def _check_missing(self, arr: pa.Array, row0: int) -> None:
        missing = _missing(arr)
        if missing.any():
            raise _null_error(self.where, row0 + int(np.argmax(missing)))


def _pool_pays(items: list[Blob]) -> bool:
    """Whether decoding these files is worth the thread pool (see POOL_FILE_BYTES_MIN)."""
    sizes = [len(b) for b in items if not isinstance(b, str)]
    return not sizes or sum(sizes) >= POOL_FILE_BYTES_MIN * len(sizes)


class _ImageReader(_MediaReader):
    """``Image``, decoded: Dense (n, H, W[, C]) when every image has one size and mode, else
    Ragged.

    Values are what ``feature.decode_example`` gives, as an array: the EXIF orientation and the
    feature's mode applied, nothing more. The decoding below makes the same Pillow calls in
    the same order, and skips ``getexif()`` only for files whose header proved they carry no
    EXIF or XMP orientation.
    """

    def __init__(self, where: Where) -> None:
        super().__init__(where)
        self.dtype: np.dtype[Any] | None = None
        self.shape: tuple[int, ...] | None = None
        self.same_shape = True
        self.first_row = -1
        self.mode: str | None = where.feature.mode
        # One byte per row scanned: how the write pass decodes it (_ASK_EXIF, _PLAIN, _ZIP).
        self.plain = bytearray()
        self.sizes = array.array("Q")  # per row: the bytes it decodes to

    def scan(self, arr: pa.Array, row0: int) -> None:
        self._check_missing(arr, row0)
        for i, blob in enumerate(blobs(arr)):
            header = None if isinstance(blob, str) else image_header(blob)
            if header is not None:
                mode = self.mode or header.mode
                width, height = header.width, header.height
                if header.orientation in (5, 6, 7, 8):  # exif_transpose turns these by 90 degrees
                    width, height = height, width
                known = _IMAGE_MODES.get(mode)
                if known is not None:
                    if header.orientation is not None:
                        self.plain.append(_ASK_EXIF)
                    elif header.zip_rawmode is not None and mode == header.mode:
                        self.plain.append(_ZIP)
                    else:
                        self.plain.append(_PLAIN)
                    channels = known[1]
                    shape = (height, width) if channels is None else (height, width, channels)
                    self._accept(np.dtype(known[0]), shape, row0 + i)
                    continue
            self.plain.append(_ASK_EXIF)
            try:
                probed = self._probe(blob)
            except Exception as exc:
                if not _decoder_failed(exc):
                    raise
                raise InconsistentRecordsError(
                    f"{self.where}: row {row0 + i} is not an image file Pillow can read "
                    f"({type(exc).__name__}: {exc}); fix or drop that row") from exc
            self._accept(*probed, row0 + i)

    def _probe(self, blob: Blob) -> tuple[np.dtype[Any], tuple[int, ...]]:
        """Pillow's own reading of a header the header reader left to it."""
        import PIL.Image

        with PIL.Image.open(blob if isinstance(blob, str) and _is_local(blob)
                            else io.BytesIO(_read_file(blob) if isinstance(blob, str) else blob)
                            ) as image:
            mode = self.mode or image.mode
            width, height = image.size
            orientation = image.getexif().get(_ORIENTATION_TAG)
            if orientation in (5, 6, 7, 8):  # exif_transpose turns these by 90 degrees
                width, height = height, width
            known = _IMAGE_MODES.get(mode)
        if known is None:  # an unusual mode: decode this one to learn what NumPy makes of it
            probe = self._decode(blob, False)
            return probe.dtype, probe.shape
        channels = known[1]
        return np.dtype(known[0]), (height, width) if channels is None else (height, width, channels)

    def _accept(self, dtype: np.dtype[Any], shape: tuple[int, ...], row: int) -> None:
        self.sizes.append(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        if self.dtype is None:
            self.dtype, self.shape, self.first_row = dtype, shape, row
            return
        assert self.shape is not None
        if dtype != self.dtype or len(shape) != len(self.shape):
            raise InconsistentRecordsError(
                f"{self.where}: row {row} decodes to {dtype} with {len(shape)} axes but row "
                f"{self.first_row} to {self.dtype} with {len(self.shape)} axes (mixed image "
                f"modes); {self.where.spelling.one_mode(self.where.column)}, or keep the files "
                f"as they are with {self.where.spelling.option('images', 'encoded')}")
        if shape != self.shape:
            self.same_shape = False

    def plan(self) -> ColumnPlan:
        if self.dtype is None or self.shape is None:  # no rows: nothing says more than H x W x C
            return ColumnPlan("Ragged", np.dtype("uint8"), None, 3)
        if self.same_shape:
            return ColumnPlan("Dense", self.dtype, self.shape, None)
        return ColumnPlan("Ragged", self.dtype, None, len(self.shape))

    def describe(self) -> dict[str, Any]:
        return {"encoding": "decoded"}

    def _decode(self, blob: Blob, plain: bool) -> np.ndarray:
        import PIL.Image
        import PIL.ImageOps

        if isinstance(blob, str) and not _is_local(blob):
            return np.asarray(self.where.feature.decode_example({"path": blob, "bytes": None}))
        image: PIL.Image.Image = PIL.Image.open(blob if isinstance(blob, str) else io.BytesIO(blob))
        image.load()
        if not plain and image.getexif().get(_ORIENTATION_TAG) is not None:
            image = PIL.ImageOps.exif_transpose(image)
        if self.mode and self.mode != image.mode:
            image = image.convert(self.mode)
        return np.asarray(image)

    @staticmethod
    def _zip_into(stream: tuple[str, int, int, str, bytes | memoryview],
                  target: np.ndarray) -> None:
        """Pillow's PNG pixel decoder ("zip") on a file's pixel stream, into `target`: the
        pixels ``PIL.Image.open(...).load()`` gives, without its per-file Python work. Modes
        Pillow can map onto a caller's buffer are decoded in place."""
        import PIL.Image

        mode, width, height, rawmode, idat = stream
        if mode in _MAPPABLE_MODES:
            image = PIL.Image.frombuffer(mode, (width, height), target, "raw", mode, 0, 1)
            image.frombytes(idat, "zip", rawmode)
        else:
            target[...] = np.asarray(PIL.Image.frombytes(mode, (width, height), idat, "zip",
                                                         rawmode))

    def extract(self, arr: pa.Array, plan: ColumnPlan, row0: int) -> Any:
        items = blobs(arr)
        plain = self.plain[row0:row0 + len(items)]
        dense = plan.kind == "Dense"
        out = np.empty((len(items), *(plan.item_shape or ())), dtype=plan.dtype) if dense else None

        def mismatch(i: int, dtype: Any, shape: tuple[int, ...]) -> InconsistentRecordsError:
            return InconsistentRecordsError(
                f"{self.where}: row {row0 + i} decoded to {dtype} {shape}, but its header "
                f"promised {plan.describe()}")

        def one(i: int) -> np.ndarray | None:
            try:
                return decoded(i)
            except Exception as exc:
                if not _decoder_failed(exc):
                    raise
                raise InconsistentRecordsError(
                    f"{self.where}: row {row0 + i} has a sound header but its pixels do not "
                    f"decode ({type(exc).__name__}: {exc}); fix or drop that row") from exc

        def decoded(i: int) -> np.ndarray | None:
            blob = items[i]
            stream = png_stream(blob) if plain[i] == _ZIP and not isinstance(blob, str) else None
            if stream is not None:
                channels = _IMAGE_MODES[stream[0]][1]
                shape = (stream[2], stream[1]) + (() if channels is None else (channels,))
                if (dense and shape != plan.item_shape) or (not dense and len(shape) != plan.ndim):
                    raise mismatch(i, plan.dtype, shape)
                target = out[i] if out is not None else np.empty(shape, dtype=plan.dtype)
                self._zip_into(stream, target)
                return None if out is not None else target
            rec = self._decode(blob, plain[i] != _ASK_EXIF)
            if rec.dtype != plan.dtype or (dense and rec.shape != plan.item_shape) \
                    or (not dense and rec.ndim != plan.ndim):
                raise mismatch(i, rec.dtype, rec.shape)
            if out is None:
                return rec
            out[i] = rec
            return None

        rows = list(range(len(items)))
        records = self._map(one, rows) if _pool_pays(items) else [one(i) for i in rows]
        return out if out is not None else records


def _decoder_failed(exc: BaseException) -> bool:
    """Whether Pillow's reading of a file failed on its bytes (a truncated or damaged image):
    its decoders raise OSError without an errno, ValueError, SyntaxError, EOFError or
    zlib.error. An OSError with an errno is the system's, reading the file; the converter's
    own errors say what they mean already."""
    if isinstance(exc, ConversionError):
        return False
    if isinstance(exc, OSError):
        return exc.errno is None
    return isinstance(exc, (ValueError, SyntaxError, EOFError, zlib.error))


class _AudioReader(_MediaReader):
    """``Audio``, decoded: Ragged float32 records of shape (channels, samples), as decoded,
    never resampled."""

    def __init__(self, where: Where) -> None:
        super().__init__(where)
        try:
            import soundfile  # noqa: F401
        except ImportError as exc:
            raise UnsupportedFeatureError(
                f"{where}: decoding Audio needs the optional 'soundfile' package: "
                "pip install 'soundfile>=0.12,<1'; or keep the files as they are with "
                f"{where.spelling.option('audio', 'encoded')}") from exc
        self.rate: int | None = where.feature.sampling_rate
        self.sizes = array.array("Q")  # per row: the bytes it decodes to (float32 samples)

    @staticmethod
    def _source(blob: Blob) -> Any:
        return blob if isinstance(blob, str) and _is_local(blob) else io.BytesIO(
            _read_file(blob) if isinstance(blob, str) else blob)

    def scan(self, arr: pa.Array, row0: int) -> None:
        import soundfile

        self._check_missing(arr, row0)
        for i, blob in enumerate(blobs(arr)):
            found = soundfile.info(self._source(blob))
            rate = int(found.samplerate)
            self.sizes.append(4 * int(found.frames) * int(found.channels))
            if self.rate is None:
                self.rate = rate
            elif rate != self.rate:
                raise InconsistentRecordsError(
                    f"{self.where}: row {row0 + i} is sampled at {rate} Hz but the column at "
                    f"{self.rate} Hz; the converter never resamples. Resample in the source "
                    f"first, or keep the files as they are with "
                    f"{self.where.spelling.option('audio', 'encoded')}")

    def plan(self) -> ColumnPlan:
        return ColumnPlan("Ragged", np.dtype("float32"), None, 2)

    def describe(self) -> dict[str, Any]:
        return {"encoding": "decoded", "sampling_rate": self.rate}

    def _decode(self, blob: Blob) -> np.ndarray:
        import soundfile

        samples, _ = soundfile.read(self._source(blob), dtype="float32", always_2d=True)
        return np.ascontiguousarray(samples.T)

    def extract(self, arr: pa.Array, plan: ColumnPlan, row0: int) -> list[np.ndarray]:
        return self._map(self._decode, blobs(arr))


class _EncodedReader(_MediaReader):
    """``Image`` or ``Audio`` kept encoded: each record is the file's bytes, exactly, as a
    Ragged uint8 record of rank 1. The format of each file is recorded (``formats``, and per
    record in ``codes`` for a column of mixed formats)."""

    def __init__(self, where: Where, media: str) -> None:
        super().__init__(where)
        self.media = media
        self.names: list[str] = []
        self.codes = bytearray()  # per row: index into self.names

    def scan(self, arr: pa.Array, row0: int) -> None:
        self._check_missing(arr, row0)
        for i, blob in enumerate(blobs(arr)):
            head = _read_file(blob, _SNIFF_BYTES) if isinstance(blob, str) else blob[:_SNIFF_BYTES]
            name = sniff(head) or self._identify(blob, row0 + i)
            if name not in self.names:
                if len(self.names) == FORMATS_MAX:
                    raise InconsistentRecordsError(
                        f"{self.where}: more than {FORMATS_MAX} file formats (formats_max)")
                self.names.append(name)
            self.codes.append(self.names.index(name))

    def _identify(self, blob: Blob, row: int) -> str:
        """The format of a file whose signature ``sniff`` does not know, from its decoder."""
        data = io.BytesIO(_read_file(blob) if isinstance(blob, str) else blob)
        if self.media == "image":
            import PIL.Image

            try:
                with PIL.Image.open(data) as image:
                    return str(image.format)
            except Exception as exc:  # noqa: BLE001 - Pillow raises several kinds
                raise InconsistentRecordsError(
                    f"{self.where}: row {row} is not an image file Pillow can read ({exc}); "
                    "an Image column kept encoded must still hold images") from exc
        try:
            import soundfile
        except ImportError:
            return "unknown"
        try:
            return str(soundfile.info(data).format)
        except Exception:  # noqa: BLE001 - libsndfile does not know it; say so, keep the bytes
            return "unknown"

    def plan(self) -> ColumnPlan:
        return ColumnPlan("Ragged", np.dtype("uint8"), None, 1)

    def formats(self) -> dict[str, int]:
        """How many records of each format the scan found."""
        counts = np.bincount(np.frombuffer(bytes(self.codes), dtype=np.uint8),
                             minlength=len(self.names))
        return {name: int(counts[k]) for k, name in enumerate(self.names)}

    def describe(self) -> dict[str, Any]:
        return {"encoding": "encoded", "formats": self.formats()}

    def format_codes(self, names: list[str]) -> np.ndarray:
        """Each row's format as an index into `names` (every name this reader saw is in it)."""
        table = np.array([names.index(n) for n in self.names] or [0], dtype=np.uint8)
        return table[np.frombuffer(bytes(self.codes), dtype=np.uint8)]

    def extract(self, arr: pa.Array, plan: ColumnPlan, row0: int) -> list[np.ndarray]:
        return [np.frombuffer(_read_file(b) if isinstance(b, str) else b, dtype=np.uint8)
                for b in blobs(arr)]


MEDIA_MODES = ("decode", "encoded")


def reader_for(where: Where, *, images: str = "decode", audio: str = "decode") -> _Reader:
    """The reader for a column, or UnsupportedFeatureError naming split, column and feature."""
    import datasets

    feature = where.feature
    spell = where.spelling
    if isinstance(feature, datasets.ClassLabel):
        return _ValueReader(where, "int64")
    if isinstance(feature, datasets.Value):
        fixed = _fixed_width(feature.dtype)
        if fixed is not None:
            return _ValueReader(where, fixed)
        if feature.dtype in _STRINGS:
            raise UnsupportedFeatureError(
                f"{where}: unsupported feature: Value dtype {feature.dtype!r} is text, which has "
                f"no fixed-width array form. {_capital(spell.leave_out(where.column))}, or "
                + spell.fix_in_python("turn the text into numbers first, e.g. token ids with "
                                      "Dataset.map")
                + " (the converter guide's 'Text columns' shows how)")
        raise _unsupported(where, _why_not(feature.dtype))
    if isinstance(feature, datasets.Image):
        if images == "encoded":
            return _EncodedReader(where, "image")
        if not feature.decode:
            raise _unsupported(where, "Image(decode=False) holds encoded bytes, not pixels; "
                                      "store them as they are with "
                                      f"{spell.option('images', 'encoded')}")
        return _ImageReader(where)
    if isinstance(feature, datasets.Audio):
        if audio == "encoded":
            return _EncodedReader(where, "audio")
        if not feature.decode:
            raise _unsupported(where, "Audio(decode=False) holds encoded bytes, not samples; "
                                      "store them as they are with "
                                      f"{spell.option('audio', 'encoded')}")
        return _AudioReader(where)
    array_types = tuple(getattr(datasets, f"Array{k}D") for k in range(2, 6))
    if isinstance(feature, array_types):
        if feature.dtype not in _NUMERIC:
            raise _unsupported(where, f"array dtype {feature.dtype!r} is not a fixed-width number")
        return _ListReader(where, _NUMERIC[feature.dtype], list(feature.shape))
    # datasets 4+ has List and LargeList (Sequence is a function returning List); 3.x has Sequence.
    list_types: tuple[type, ...] = tuple(
        t for t in (getattr(datasets, "List", None), getattr(datasets, "LargeList", None),
                    getattr(datasets, "Sequence", None)) if isinstance(t, type))
    if isinstance(feature, list_types):
        dims: list[int | None] = []
        inner: Any = feature
        while isinstance(inner, list_types):
            length = getattr(inner, "length", -1)
            dims.append(None if length is None or length < 0 else int(length))
            inner = getattr(inner, "feature")  # noqa: B009 - typed as object by the stubs
        if isinstance(inner, datasets.Value) and _fixed_width(inner.dtype) is not None:
            return _ListReader(where, str(_fixed_width(inner.dtype)), dims)
        if isinstance(inner, datasets.ClassLabel):
            return _ListReader(where, "int64", dims)
        raise _unsupported(where, f"lists of {inner!r} have no fixed-width element type")
    if isinstance(feature, (dict, list)):
        raise _unsupported(where, "nested dicts and lists of dicts have no single array form; "
                                  + spell.fix_in_python("flatten them (Dataset.flatten) and "
                                                        "convert the leaf columns"))
    raise _unsupported(where, f"{type(feature).__name__} has no typed array form")


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _unsupported(where: Where, why: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"{where}: unsupported feature: {why}. {_capital(where.spelling.leave_out(where.column))}"
        ", or turn it into numbers first")
