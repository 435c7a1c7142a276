# mypy: disallow-subclassing-any=False, disallow-untyped-calls=False
# (The lint session type-checks loaderx without Ray, so Ray Data's classes are Any there and
# subclassing them would be an error; with Ray installed they are real classes, some of whose
# constructors are untyped.)
"""Ray Data integration: zrecord stores as a ``ray.data.Dataset`` (extra ``loaderx[ray]``).

``read_zrecord(streams, *, parallelism=-1)`` turns a dict ``{column: store or path}`` of
index-aligned zrecord stores into a Dataset with one row per logical record: Dense columns
become fixed-shape tensor columns (scalar records, ``item_shape == ()``, plain columns),
Ragged columns variable-shaped tensor columns whose elements keep their exact shapes.

Invariants:
- Nothing is copied up front. The driver reads each store's kind, schema and length (opening
  it once when given a path) and keeps only those plain values and what the store pickles as
  (its absolute location or URL, its open options, ``storage_options`` included, its version
  for a dataset, and its digest); each read task reopens the stores from that in its own
  worker, refusing one that changed since (``StoreChangedError``: a store or dataset
  replaced at the same path is never read in its place), and gathers one contiguous range
  ``[start, stop)`` of logical IDs.
- The ranges of the read tasks partition ``0..length-1``: every record is read exactly once,
  in ID order within a task, and a task yields blocks of a fixed number of rows, about
  ``BLOCK_BYTES_TARGET`` bytes at the stores' average record size (at least one row), so a
  worker's memory does not grow with its range.
- Every column is read at the same IDs, so record ``i`` lines up across columns, as in
  ``DataLoader`` batches.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import zrecord
from zrecord import Dense, DenseReader, RaggedReader, open_store

try:
    import pyarrow as pa
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.collate_fn import ArrowBatchCollateFn
    from ray.data.datasource import Datasource, ReadTask
    from ray.data.extensions import (
        ArrowTensorArray,
        ArrowVariableShapedTensorArray,
        ArrowVariableShapedTensorType,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    # The extra's requirement itself: `loaderx[ray]` from PyPI would be another project.
    raise ImportError("loaderx.ray needs Ray Data (loaderx's ray extra): "
                      "pip install 'ray[data,train]>=2.60,<2.61'") from exc

# A read task yields blocks of about this many bytes (one record at least), so that a worker
# holds a bounded amount of data however large its range is.
BLOCK_BYTES_TARGET = 64 << 20
"""Bytes per block that a read task yields (64 MiB; at least one record per block)."""


@dataclass(frozen=True)
class _Column:
    """What a read task needs to reopen one store: plain, picklable values only."""

    name: str
    path: str
    kind: str
    dtype: np.dtype[Any]
    item_shape: tuple[int, ...] | None
    ndim: int
    length: int
    nbytes: int
    # What the store (or dataset) pickles as (its __reduce__): the function that opens it
    # again and its arguments, the store's digest among them, so that a task opens the same
    # location with the same options (a dataset: the same version) and refuses other data.
    reopen: tuple[Any, tuple[Any, ...]]

    def open(self) -> Any:
        """The store (or dataset) again, in a read task; StoreChangedError where another
        lies there now."""
        fn, args = self.reopen
        return fn(*args)

    def arrow(self, values: Any, shapes: np.ndarray | None = None) -> Any:
        """Arrow column for the values a store's gather returned (for Ragged, with the
        records' `shapes`, an ``(n, ndim)`` array, when known)."""
        dtype = _arrow_dtype(self.dtype)
        if self.kind == "Dense":
            if dtype != self.dtype:
                values = values.astype(dtype)
            if self.item_shape == ():
                return pa.array(values)
            return ArrowTensorArray.from_numpy(values)
        return _ragged_arrow(values, dtype, self.ndim, shapes)


def _arrow_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a column holds `dtype`'s values in: the same, but for a date or duration of
    a unit count other than 1 (``datetime64[5s]``), whose count Arrow's timestamp and
    duration types do not keep (they would read 25 s as 5 s): its base unit, which holds
    every such value exactly."""
    if dtype.kind in "mM":
        unit, count = np.datetime_data(dtype)
        if count != 1:
            return np.dtype(f"{'datetime64' if dtype.kind == 'M' else 'timedelta64'}[{unit}]")
    return dtype


def _ragged_arrow(records: list[np.ndarray], dtype: np.dtype[Any], ndim: int,
                  shapes: np.ndarray | None) -> Any:
    """An ArrowVariableShapedTensorArray of `records`, built with a few vectorised calls.

    Ray's ``from_numpy`` walks the records in Python (ravel, shape tuples, ``pa.array`` of a
    list of tuples), which cost as much as the gather itself for small records. Its storage
    is documented in that function: a struct of ``data``, a large list of the raveled
    records over one value buffer, and ``shape``, a list of int64 per record. This builds
    the same storage from one concatenated buffer and the shapes array;
    test_ray.py checks it against ``from_numpy`` so that a Ray upgrade that changes the
    layout fails there. Built as a variable-shaped column even when the records happen to
    share a shape, so the column type never depends on the data. Ranges are never empty (see
    get_read_tasks), and Ray cannot build an empty ragged column anyway.
    """
    if dtype == np.bool_ or dtype.kind in "USV":
        # Arrow packs booleans into bits, and strings are variable-size values of three
        # buffers: Ray's own constructor builds those (rare dtypes).
        boxed = np.empty(len(records), dtype=object)
        for i, value in enumerate(records):
            boxed[i] = value
        return ArrowVariableShapedTensorArray.from_numpy(boxed)
    n = len(records)
    if shapes is None:
        shapes = np.array([r.shape for r in records], dtype=np.int64).reshape(n, ndim)
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    flat = np.concatenate([r.reshape(-1) for r in records]) if ndim > 1 else \
        np.concatenate(records)
    value_type = pa.from_numpy_dtype(dtype)
    values = pa.Array.from_buffers(value_type, int(offsets[-1]),
                                   [None, pa.py_buffer(np.ascontiguousarray(flat, dtype))])
    data = pa.LargeListArray.from_arrays(pa.array(offsets), values)
    shape = pa.ListArray.from_arrays(
        pa.array(np.arange(0, (n + 1) * ndim, ndim, dtype=np.int32)),
        pa.array(shapes.reshape(-1).astype(np.int64, copy=False)))
    storage = pa.StructArray.from_arrays([data, shape], ["data", "shape"])
    return ArrowVariableShapedTensorType(value_type, ndim).wrap_array(storage)


def _describe(name: Any, value: Any, storage_options: Any) -> _Column:
    if not isinstance(name, str):
        raise TypeError(f"column names must be str; got {name!r}")
    if isinstance(value, (DenseReader, RaggedReader, zrecord.DenseDataset, zrecord.RaggedDataset)):
        store, owned = value, False  # (a writer cannot be read)
    elif isinstance(value, (str, os.PathLike)):
        # The options are for a store given by URL; a local path takes none.
        options = storage_options if zrecord.is_url(os.fspath(value)) else None
        store, owned = _opened(value, options), True
    else:
        raise TypeError(f"column {name!r} must be a zrecord Dense or Ragged store or dataset, "
                        f"or the path of one; got {type(value).__name__} (read tasks reopen "
                        "every store by path, so in-memory arrays cannot be read)")
    try:
        # Where it was opened (absolute: Ray workers need not share the driver's working
        # directory, which may have changed since), how, and its digest.
        reopen = store.__reduce__()
        path = store.path if zrecord.is_url(store.path) else os.path.abspath(store.path)
        if isinstance(store, Dense):
            column = _Column(name, path, "Dense", store.dtype, tuple(store.item_shape),
                             store.ndim, len(store), store.nbytes, reopen)
        else:
            column = _Column(name, path, "Ragged", store.dtype, None, store.ndim, len(store),
                             store.nbytes, reopen)
    finally:
        if owned:
            store.close()
    _check_holdable(column)
    return column


def _check_holdable(column: _Column) -> None:
    """ValueError now, naming the column, where Ray Data's columns cannot hold its records
    (complex numbers, raw bytes of a shape): found by building a column of one record of
    zeros, as every read task would fail to."""
    try:
        if column.kind == "Dense":
            assert column.item_shape is not None
            column.arrow(np.zeros((1, *column.item_shape), column.dtype))
        else:
            column.arrow([np.zeros((1,) * column.ndim, column.dtype)])
    except Exception as exc:  # noqa: BLE001 - whatever Arrow raises says the same
        raise ValueError(f"column {column.name!r} holds {column.kind} records of dtype "
                         f"{column.dtype}, which a Ray Data column cannot hold ({exc}): read "
                         "that store with the DataLoader instead") from None


def _opened(path: Any, storage_options: Any) -> Any:
    """The store at `path`, or else the dataset of parts there (its folder or prefix, or one
    of its manifests, as zrecord.open_dataset takes them); the store's error when neither."""
    try:
        return open_store(path, storage_options=storage_options)
    except (zrecord.errors.NotPublishedError, zrecord.errors.StoreNotFoundError) as exc:
        try:
            return zrecord.open_dataset(path, storage_options=storage_options)
        except zrecord.errors.ZrecordError:
            raise exc from None


def _read_range(columns: list[_Column], start: int, stop: int, step: int,
                index_column: str | None) -> Iterator[Any]:
    """Runs in a Ray worker: reopen every store, yield blocks of IDs ``[start, stop)``."""
    stores = {c.name: c.open() for c in columns}
    try:
        for lo in range(start, stop, step):
            ids = np.arange(lo, min(lo + step, stop), dtype=np.uint64)
            names, arrays = [], []
            if index_column is not None:
                names.append(index_column)
                arrays.append(pa.array(ids.astype(np.int64)))
            for c in columns:
                names.append(c.name)
                store = stores[c.name]
                shapes = store.shapes(ids) if c.kind == "Ragged" else None
                arrays.append(c.arrow(store[ids], shapes))
            yield pa.Table.from_arrays(arrays, names=names)
    finally:
        for store in stores.values():
            store.close()


def _empty_table(columns: list[_Column], index_column: str | None) -> Any:
    """The table of no rows with the columns a read task yields (an empty store's)."""
    names, arrays = [], []
    if index_column is not None:
        names.append(index_column)
        arrays.append(pa.array(np.empty(0, np.int64)))
    for c in columns:
        names.append(c.name)
        if c.kind == "Dense":
            assert c.item_shape is not None
            arrays.append(c.arrow(np.empty((0, *c.item_shape), c.dtype)))
        else:
            # Made as a task makes a column (one record, then none of it), so that its type
            # is a task's: for strings, Ray's bytes of fixed width, not Arrow's `string`.
            arrays.append(c.arrow([np.zeros((1,) * c.ndim, c.dtype)])[:0])
    return pa.Table.from_arrays(arrays, names=names)


class ZrecordDatasource(Datasource):
    """A Ray Data datasource over index-aligned zrecord stores. Use :func:`read_zrecord`."""

    def __init__(self, streams: Mapping[str, Any], *, index_column: str | None = None,
                 storage_options: Any = None) -> None:
        super().__init__()
        if not isinstance(streams, Mapping) or not streams:
            raise TypeError("streams must be a non-empty dict {column: store or path}; got "
                            f"{type(streams).__name__}")
        columns = [_describe(name, value, storage_options) for name, value in streams.items()]
        lengths = {c.name: c.length for c in columns}
        if len(set(lengths.values())) > 1:
            raise ValueError("every store must have the same number of records (record i of "
                             "each column forms row i); got " +
                             ", ".join(f"{k}={v}" for k, v in lengths.items()))
        if index_column is not None and (not isinstance(index_column, str)
                                         or index_column in lengths):
            raise ValueError(f"index_column must be a str naming no store column; got "
                             f"{index_column!r} (columns: {list(lengths)})")
        self._columns = columns
        self._length = columns[0].length
        self._index_column = index_column
        self._row_bytes = sum(c.nbytes for c in columns) / max(1, self._length) + (
            8 if index_column is not None else 0)

    def __len__(self) -> int:
        return self._length

    def get_name(self) -> str:
        """The name Ray shows for the read operator."""
        return "Zrecord"

    def estimate_inmemory_data_size(self) -> int:
        """Logical bytes of every column (what the records decode to)."""
        return int(self._row_bytes * self._length)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        """Split ``0..length-1`` into at most `parallelism` contiguous, nearly equal ranges."""
        n = self._length
        tasks = min(max(1, int(parallelism)), n)
        if n == 0:
            # One task of no rows, so that the Dataset still has its columns and their types.
            meta = BlockMetadata(num_rows=0, size_bytes=0,
                                 input_files=tuple(c.path for c in self._columns), exec_stats=None)
            empty = _empty_table(self._columns, self._index_column)
            return [ReadTask(lambda: iter([empty]), meta, schema=empty.schema,
                             per_task_row_limit=per_task_row_limit)]
        rows_per_block = max(1, int(BLOCK_BYTES_TARGET // max(1.0, self._row_bytes)))
        bounds = [n * t // tasks for t in range(tasks + 1)]
        out = []
        for start, stop in zip(bounds[:-1], bounds[1:]):
            meta = BlockMetadata(num_rows=stop - start,
                                 size_bytes=int(self._row_bytes * (stop - start)),
                                 input_files=tuple(c.path for c in self._columns), exec_stats=None)

            def read(start: int = start, stop: int = stop) -> Iterator[Any]:
                return _read_range(self._columns, start, stop, rows_per_block,
                                   self._index_column)

            out.append(ReadTask(read, meta, per_task_row_limit=per_task_row_limit))
        return out


def _column_arrays(column: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, shapes) of one column of a pyarrow batch: a Dense column's stacked
    ``(n, *item_shape)`` array and None; a Ragged column's records raveled into one 1-D array
    and their ``(n, ndim)`` int64 shapes. Zero-copy for a batch of one chunk."""
    values, shapes = [], []
    for chunk in column.chunks:
        if isinstance(chunk.type, ArrowVariableShapedTensorType):
            ndim = chunk.type.ndim
            # flatten() honours the slice a batch is of a block: only this batch's values.
            values.append(chunk.storage.field("data").flatten().to_numpy(zero_copy_only=False))
            shapes.append(chunk.storage.field("shape").flatten().to_numpy(
                zero_copy_only=False).reshape(len(chunk), ndim))
        elif isinstance(chunk, ArrowTensorArray):
            values.append(chunk.to_numpy())
        else:
            values.append(chunk.to_numpy(zero_copy_only=False))
    if not values:
        raise ValueError("an empty batch has no columns to collate")
    joined = values[0] if len(values) == 1 else np.concatenate(values)
    if not shapes:
        return joined, None
    return joined, shapes[0] if len(shapes) == 1 else np.concatenate(shapes)


class TorchCollate(ArrowBatchCollateFn):
    """``ds.iter_torch_batches(collate_fn=TorchCollate())`` for datasets of
    :func:`read_zrecord`: every column becomes tensors that Ray can move to the device
    without losing record boundaries, with no per-record Python work.

    A Dense column ``name`` becomes one ``(B, *item_shape)`` tensor. A Ragged column ``name``
    becomes two: ``name``, every record's values raveled and concatenated (1-D), and
    ``name + "_shapes"``, the ``(B, ndim)`` int64 shapes; nothing is padded, and
    :func:`split_records` gives the records back (on any device). With `fn`, ``fn(batch)``
    receives that dict of tensors and may return any dict of tensors; a value that is a list
    or tuple of tensors is refused with a TypeError, because Ray's device transfer would
    concatenate it into one tensor and silently lose where each record ends.
    """

    def __init__(self, fn: Any = None) -> None:
        self.fn = fn

    def __call__(self, batch: Any) -> Any:
        """Collate one pyarrow batch (Ray calls this on its prefetch threads)."""
        import torch

        out: dict[str, Any] = {}
        for name in batch.column_names:
            values, shapes = _column_arrays(batch.column(name))
            if not values.flags.writeable:
                # Arrow's buffers are read-only and torch has no read-only tensors: copy, as
                # Ray's own collation does, rather than hand out a tensor whose writes would
                # reach Ray's block.
                values = values.copy()
            out[name] = torch.from_numpy(np.ascontiguousarray(values))
            if shapes is not None:
                if name + "_shapes" in batch.column_names:
                    # One of the two would silently replace the other.
                    raise ValueError(f"the Ragged column {name!r} becomes {name!r} and "
                                     f"{name + '_shapes'!r}, and the batch has a column "
                                     f"{name + '_shapes'!r} too: rename one of them")
                out[name + "_shapes"] = torch.from_numpy(np.array(shapes, dtype=np.int64))
        if self.fn is None:
            return out
        result = self.fn(out)
        _refuse_tensor_lists(result)
        return result


def _refuse_tensor_lists(result: Any) -> None:
    import torch

    items = result.items() if isinstance(result, Mapping) else [("the result", result)]
    for name, value in items:
        if isinstance(value, (list, tuple)) and value and all(
                isinstance(v, torch.Tensor) for v in value):
            raise TypeError(
                f"the collate function returned {name!r} as a {type(value).__name__} of "
                f"{len(value)} tensors; Ray's iter_torch_batches would concatenate them into "
                "one tensor on its device transfer, silently losing where each record ends. "
                "Return the values raveled and concatenated with their shapes (as "
                "TorchCollate does; split_records restores the records), a padded tensor "
                "with the lengths, or a nested tensor")


def split_records(values: Any, shapes: Any) -> list[Any]:
    """The records of a Ragged column collated by :class:`TorchCollate`: ``values`` (1-D)
    split by the ``(B, ndim)`` ``shapes`` and reshaped, as views, on whatever device the
    tensors are."""
    import torch

    shape_list = [tuple(int(d) for d in row) for row in shapes.tolist()]
    sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shape_list]
    return [part.reshape(shape) for part, shape in zip(torch.split(values, sizes), shape_list,
                                                       strict=True)]


def read_zrecord(streams: Mapping[str, Any], *, parallelism: int = -1,
                 index_column: str | None = None, storage_options: Any = None,
                 **read_args: Any) -> Any:
    """A ``ray.data.Dataset`` with one row per record of the index-aligned stores `streams`.

    `streams` maps column names to opened ``Dense``/``Ragged`` stores or datasets, or to
    their paths or URLs (a store, else a dataset's folder, prefix or manifest); every store
    must have the same length. `storage_options` opens those given by URL (as for
    ``Dense.open``); an opened store keeps its own. `parallelism` is the number of read tasks
    (``-1``: Ray chooses); each task reopens the stores where and as they were opened and
    reads one contiguous range of record IDs, so the records are never copied up front, and a
    store replaced at its path since is refused (``StoreChangedError``), never read in its
    place. `index_column`, when given, adds an int64 column with each row's logical record
    ID. Other keyword arguments go to ``ray.data.read_datasource`` (``concurrency``,
    ``ray_remote_args``, ...).
    """
    parallelism = operator.index(parallelism)
    if parallelism == 0 or parallelism < -1:
        raise ValueError(f"parallelism must be -1 (Ray chooses) or at least 1; got {parallelism}")
    source = ZrecordDatasource(streams, index_column=index_column, storage_options=storage_options)
    if parallelism != -1:
        read_args["override_num_blocks"] = parallelism
    return ray.data.read_datasource(source, **read_args)


__all__ = ["BLOCK_BYTES_TARGET", "TorchCollate", "ZrecordDatasource", "read_zrecord",
           "split_records"]
