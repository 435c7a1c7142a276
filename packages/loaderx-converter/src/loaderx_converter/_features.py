"""From a Hugging Face feature to a typed zrecord column, without transforming any value.

Every column gets a *reader*, chosen from its feature type alone. Conversion makes two passes
over the Arrow data of a split: ``scan`` sees every batch first and finds what must fail before
anything is written (nulls, ragged nested lists, images of mixed mode) and what the data decide
(whether all images share one size); ``plan`` then fixes the column's kind, dtype and shape;
``extract`` turns each batch into the records that are appended. A record's value is exactly
what ``dataset[i][column]`` decodes to, as a NumPy array.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from loaderx_converter.errors import InconsistentRecordsError, NullValueError, UnsupportedFeatureError

# Hugging Face ``Value`` dtypes that are plain fixed-width numbers (or bool) in NumPy.
_NUMERIC = {
    "bool": "bool",
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float16", "float32": "float32", "float64": "float64",
    "float": "float32", "double": "float64",
}

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


# Formats whose EXIF block, when present before the pixels, is in ``image.info["exif"]``. An
# EXIF block PIL only finds while decoding makes the decoded shape differ from the probe, and
# extract() then fails naming the row: never a silently wrong record.
_EXIF_IN_INFO = frozenset({"PNG", "JPEG", "WEBP", "GIF", "BMP"})


@dataclass(frozen=True)
class Where:
    """Names a column for messages: ``split 'train', column 'image' (Image(...))``."""

    split: str
    column: str
    feature: Any

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


def _unwrap(arr: pa.Array) -> pa.Array:
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


def _is_list(arr: pa.Array) -> bool:
    t = arr.type
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _lengths(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False),
                      dtype=np.int64)


def first_null_row(arr: pa.Array) -> int | None:
    """The first row of `arr` holding a null at any nesting depth, or None."""
    arr = _unwrap(arr)
    found: list[int] = []
    if arr.null_count:
        found.append(int(np.argmax(arr.is_null().to_numpy(zero_copy_only=False))))
    if _is_list(arr):
        child = first_null_row(arr.flatten())
        if child is not None:
            ends = np.cumsum(_lengths(arr))
            found.append(int(np.searchsorted(ends, child, side="right")))
    elif pa.types.is_struct(arr.type):
        for field in arr.flatten():
            child = first_null_row(field)
            if child is not None:
                found.append(child)
    return min(found) if found else None


def _null_error(where: Where, row: int) -> NullValueError:
    return NullValueError(
        f"{where}: row {row} is null (missing); zrecord records cannot be null. Fill or drop "
        "missing values in the dataset (e.g. with Dataset.filter) before converting")


class _Reader:
    """Base of the per-feature readers; see the module docstring for the protocol."""

    pool: Any = None  # a concurrent.futures executor set by convert(), or None: one thread

    def __init__(self, where: Where) -> None:
        self.where = where

    def scan(self, arr: pa.Array, row0: int) -> None:
        row = first_null_row(arr)
        if row is not None:
            raise _null_error(self.where, row0 + row)

    def plan(self) -> ColumnPlan:
        raise NotImplementedError

    def extract(self, arr: pa.Array, plan: ColumnPlan, row0: int) -> Any:
        raise NotImplementedError


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


class _MediaReader(_Reader):
    """Shared by Image and Audio: a struct of ``bytes`` and ``path``; null if both are missing.

    ``_probe`` (read a file's header) and ``_decode`` are pure, so they run on the conversion's
    thread pool (the decoders release the GIL); ``_accept`` sees the probes in row order.
    """

    def _map(self, fn: Any, items: list[Any]) -> list[Any]:
        if self.pool is None or len(items) < 32:
            return [fn(item) for item in items]
        step = max(1, len(items) // (4 * (os.cpu_count() or 1)))
        parts = [items[i:i + step] for i in range(0, len(items), step)]
        return [y for part in self.pool.map(lambda p: [fn(x) for x in p], parts) for y in part]

    def scan(self, arr: pa.Array, row0: int) -> None:
        arr = _unwrap(arr)
        data, path = arr.field("bytes"), arr.field("path")
        if arr.offset:  # StructArray.field ignores the slice offset; take the children sliced.
            data, path = arr.flatten()
        missing = (arr.is_null().to_numpy(zero_copy_only=False)
                   | (data.is_null().to_numpy(zero_copy_only=False)
                      & path.is_null().to_numpy(zero_copy_only=False)))
        if missing.any():
            raise _null_error(self.where, row0 + int(np.argmax(missing)))
        for i, probe in enumerate(self._map(self._probe, arr.to_pylist())):
            self._accept(probe, row0 + i)

    def _probe(self, item: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _accept(self, probe: Any, row: int) -> None:
        raise NotImplementedError

    def _decode(self, item: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def _source(item: dict[str, Any]) -> Any:
        if item["bytes"] is not None:
            return io.BytesIO(item["bytes"])
        return item["path"]


class _ImageReader(_MediaReader):
    """``Image``: Dense (n, H, W[, C]) when every image has one size and mode, else Ragged.

    Values are ``np.asarray(feature.decode_example(...))``: the mode conversion and EXIF
    orientation that ``datasets`` itself applies, nothing more.
    """

    def __init__(self, where: Where) -> None:
        super().__init__(where)
        self.dtype: np.dtype[Any] | None = None
        self.shape: tuple[int, ...] | None = None
        self.same_shape = True
        self.first_row = -1

    def _probe(self, item: dict[str, Any]) -> tuple[np.dtype[Any], tuple[int, ...]]:
        import PIL.Image

        with PIL.Image.open(self._source(item)) as image:
            mode = self.where.feature.mode or image.mode
            width, height = image.size
            # Reading EXIF costs as much as the header; these formats expose it in info.
            cheap = image.format in _EXIF_IN_INFO and "exif" not in image.info
            orientation = None if cheap else image.getexif().get(0x0112)
            if orientation in (5, 6, 7, 8):  # exif_transpose turns these by 90 degrees
                width, height = height, width
            known = _IMAGE_MODES.get(mode)
        if known is None:  # an unusual mode: decode this one to learn what NumPy makes of it
            probe = self._decode(item)
            return probe.dtype, probe.shape
        channels = known[1]
        return np.dtype(known[0]), (height, width) if channels is None else (height, width, channels)

    def _accept(self, probe: tuple[np.dtype[Any], tuple[int, ...]], row: int) -> None:
        dtype, shape = probe
        if self.dtype is None:
            self.dtype, self.shape, self.first_row = dtype, shape, row
            return
        assert self.shape is not None
        if dtype != self.dtype or len(shape) != len(self.shape):
            raise InconsistentRecordsError(
                f"{self.where}: row {row} decodes to {dtype} with {len(shape)} axes but row "
                f"{self.first_row} to {self.dtype} with {len(self.shape)} axes (mixed image "
                "modes); cast the column to one mode first, e.g. Image(mode='RGB')")
        if shape != self.shape:
            self.same_shape = False

    def plan(self) -> ColumnPlan:
        if self.dtype is None or self.shape is None:  # no rows: nothing says more than H x W x C
            return ColumnPlan("Ragged", np.dtype("uint8"), None, 3)
        if self.same_shape:
            return ColumnPlan("Dense", self.dtype, self.shape, None)
        return ColumnPlan("Ragged", self.dtype, None, len(self.shape))

    def _decode(self, item: dict[str, Any]) -> np.ndarray:
        return np.asarray(self.where.feature.decode_example(item))

    def extract(self, arr: pa.Array, plan: ColumnPlan, row0: int) -> Any:
        records = self._map(self._decode, _unwrap(arr).to_pylist())
        for i, rec in enumerate(records):
            if rec.dtype != plan.dtype or (plan.kind == "Dense" and rec.shape != plan.item_shape) \
                    or (plan.kind == "Ragged" and rec.ndim != plan.ndim):
                raise InconsistentRecordsError(
                    f"{self.where}: row {row0 + i} decoded to {rec.dtype} {rec.shape}, but its "
                    f"header promised {plan.describe()}")
        if plan.kind == "Dense":
            out = np.empty((len(records), *(plan.item_shape or ())), dtype=plan.dtype)
            for i, rec in enumerate(records):
                out[i] = rec
            return out
        return records


class _AudioReader(_MediaReader):
    """``Audio``: Ragged float32 records of shape (channels, samples), as decoded, never resampled."""

    def __init__(self, where: Where) -> None:
        super().__init__(where)
        try:
            import soundfile  # noqa: F401
        except ImportError as exc:
            raise UnsupportedFeatureError(
                f"{where}: decoding Audio needs the optional 'soundfile' package: "
                "pip install 'loaderx-converter[audio]'") from exc
        self.rate: int | None = where.feature.sampling_rate

    def _probe(self, item: dict[str, Any]) -> int:
        import soundfile

        return int(soundfile.info(self._source(item)).samplerate)

    def _accept(self, probe: int, row: int) -> None:
        if self.rate is None:
            self.rate = probe
        elif probe != self.rate:
            raise InconsistentRecordsError(
                f"{self.where}: row {row} is sampled at {probe} Hz but the column at "
                f"{self.rate} Hz; the converter never resamples. Resample in the source first")

    def plan(self) -> ColumnPlan:
        return ColumnPlan("Ragged", np.dtype("float32"), None, 2)

    def _decode(self, item: dict[str, Any]) -> np.ndarray:
        import soundfile

        samples, _ = soundfile.read(self._source(item), dtype="float32", always_2d=True)
        return np.ascontiguousarray(samples.T)

    def extract(self, arr: pa.Array, plan: ColumnPlan, row0: int) -> list[np.ndarray]:
        return self._map(self._decode, _unwrap(arr).to_pylist())


def reader_for(where: Where) -> _Reader:
    """The reader for a column, or UnsupportedFeatureError naming split, column and feature."""
    import datasets

    feature = where.feature
    if isinstance(feature, datasets.ClassLabel):
        return _ValueReader(where, "int64")
    if isinstance(feature, datasets.Value):
        fixed = _fixed_width(feature.dtype)
        if fixed is not None:
            return _ValueReader(where, fixed)
        raise _unsupported(where, _why_not(feature.dtype))
    if isinstance(feature, datasets.Image):
        if not feature.decode:
            raise _unsupported(where, "Image(decode=False) holds encoded bytes, not pixels")
        return _ImageReader(where)
    if isinstance(feature, datasets.Audio):
        if not feature.decode:
            raise _unsupported(where, "Audio(decode=False) holds encoded bytes, not samples")
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
                                  "flatten them (Dataset.flatten) and convert the leaf columns")
    raise _unsupported(where, f"{type(feature).__name__} has no typed array form")


def _unsupported(where: Where, why: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"{where}: unsupported feature: {why}. Select other columns with columns=[...] or "
        "turn this one into numbers first")

