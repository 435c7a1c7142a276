"""Ray Data integration: zrecord stores as a ``ray.data.Dataset`` (extra ``loaderx[ray]``).

``read_zrecord(streams, *, parallelism=-1)`` turns a dict ``{column: store or path}`` of
index-aligned zrecord stores into a Dataset with one row per logical record: Dense columns
become fixed-shape tensor columns (scalar records, ``item_shape == ()``, plain columns),
Ragged columns variable-shaped tensor columns whose elements keep their exact shapes.

Invariants:
- Nothing is copied up front. The driver reads each store's kind, schema and length (opening
  it once when given a path) and keeps only those plain values and the absolute path; each
  read task reopens the stores by path in its own worker and gathers one contiguous range
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

from zrecord import Dense, Ragged, open_store

try:
    import pyarrow as pa
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask
    from ray.data.extensions import ArrowTensorArray, ArrowVariableShapedTensorArray
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("loaderx.ray needs Ray Data: pip install 'loaderx[ray]'") from exc

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

    def arrow(self, values: Any) -> Any:
        """Arrow column for the values a store's gather returned."""
        if self.kind == "Dense":
            if self.item_shape == ():
                return pa.array(values)
            return ArrowTensorArray.from_numpy(values)
        # Ranges are never empty (see get_read_tasks), and Ray cannot build an empty ragged
        # column anyway. An object array of the records (not a list), filled one element at a
        # time, keeps NumPy from stacking records that happen to share one shape, so the
        # column type never depends on the data.
        records = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):
            records[i] = value
        return ArrowVariableShapedTensorArray.from_numpy(records)


def _describe(name: Any, value: Any) -> _Column:
    if not isinstance(name, str):
        raise TypeError(f"column names must be str; got {name!r}")
    if isinstance(value, (Dense, Ragged)):
        store, owned = value, False
    elif isinstance(value, (str, os.PathLike)):
        store, owned = open_store(value), True
    else:
        raise TypeError(f"column {name!r} must be a zrecord Dense or Ragged store or the path "
                        f"of one; got {type(value).__name__} (read tasks reopen every store "
                        "by path, so in-memory arrays cannot be read)")
    # Ray workers need not share the driver's working directory, so paths become absolute.
    path = os.path.abspath(store.path)
    try:
        if isinstance(store, Dense):
            return _Column(name, path, "Dense", store.dtype, tuple(store.item_shape),
                           store.ndim, len(store), store.nbytes)
        return _Column(name, path, "Ragged", store.dtype, None, store.ndim, len(store),
                       store.nbytes)
    finally:
        if owned:
            store.close()


def _read_range(columns: list[_Column], start: int, stop: int, step: int,
                index_column: str | None) -> Iterator[Any]:
    """Runs in a Ray worker: reopen every store, yield blocks of IDs ``[start, stop)``."""
    stores = {c.name: (Dense.open(c.path) if c.kind == "Dense" else Ragged.open(c.path))
              for c in columns}
    try:
        for lo in range(start, stop, step):
            ids = np.arange(lo, min(lo + step, stop), dtype=np.uint64)
            names, arrays = [], []
            if index_column is not None:
                names.append(index_column)
                arrays.append(pa.array(ids.astype(np.int64)))
            for c in columns:
                names.append(c.name)
                arrays.append(c.arrow(stores[c.name][ids]))
            yield pa.Table.from_arrays(arrays, names=names)
    finally:
        for store in stores.values():
            store.close()


class ZrecordDatasource(Datasource):
    """A Ray Data datasource over index-aligned zrecord stores. Use :func:`read_zrecord`."""

    def __init__(self, streams: Mapping[str, Any], *, index_column: str | None = None) -> None:
        super().__init__()
        if not isinstance(streams, Mapping) or not streams:
            raise TypeError("streams must be a non-empty dict {column: store or path}; got "
                            f"{type(streams).__name__}")
        columns = [_describe(name, value) for name, value in streams.items()]
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
            return []
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


def read_zrecord(streams: Mapping[str, Any], *, parallelism: int = -1,
                 index_column: str | None = None, **read_args: Any) -> Any:
    """A ``ray.data.Dataset`` with one row per record of the index-aligned stores `streams`.

    `streams` maps column names to opened ``Dense``/``Ragged`` stores or to their paths; every
    store must have the same length. `parallelism` is the number of read tasks (``-1``: Ray
    chooses); each task reopens the stores by path and reads one contiguous range of record
    IDs, so the stores are never copied or pickled. `index_column`, when given, adds an int64
    column with each row's logical record ID. Other keyword arguments go to
    ``ray.data.read_datasource`` (``concurrency``, ``ray_remote_args``, ...).
    """
    parallelism = operator.index(parallelism)
    if parallelism == 0 or parallelism < -1:
        raise ValueError(f"parallelism must be -1 (Ray chooses) or at least 1; got {parallelism}")
    source = ZrecordDatasource(streams, index_column=index_column)
    if parallelism != -1:
        read_args["override_num_blocks"] = parallelism
    return ray.data.read_datasource(source, **read_args)


__all__ = ["BLOCK_BYTES_TARGET", "ZrecordDatasource", "read_zrecord"]
