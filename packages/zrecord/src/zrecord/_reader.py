"""Read-only Dense and Ragged stores: DenseReader and RaggedReader (``Dense.open``,
``Ragged.open``, ``open_store``).

Invariants of this module:
- Readers are safe to use from many threads. ``close()`` waits for native calls in flight; any
  later call raises :class:`~zrecord.errors.ClosedError`. Native handles are freed only when the
  Python object is collected, so a late call can never touch freed memory.
- Index semantics (``_index``): a scalar index returns one record; any collection of indices
  (tuple, list, integer array, slice) returns a batch in the requested order. Indices must lie
  in ``0 .. len(store) - 1``; slices follow Python's rules (negative bounds and steps allowed).
- Batch outputs of at least ``_pool.POOL_BATCH_BYTES_MIN`` come from the store's pool.
- Identity: ``digest`` is the header checksum ([ZR-HDR-004]) of the header the native reader
  verified at open (``zr_info.header_checksum``). It covers the index checksum (so every
  record's location, size and checksum), the shard sizes, the schema and the dictionary: two
  stores with the same digest hold the same records.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

import numpy as np

from zrecord import _native
from zrecord._dtypes import (
    CODEC_NAMES,
    KIND_DENSE,
    KIND_RAGGED,
    dtype_from_info,
    numpy_can_hold,
)
from zrecord._foresight import Foresight
from zrecord._index import distinct, index_error, normalise
from zrecord._index_cache import AUTO, folder_for
from zrecord._kinds import Dense, Ragged, _Kind
from zrecord._objects import is_url, redact
from zrecord._opening import open_native
from zrecord._paths import fspath
from zrecord._pool import BlockPool
from zrecord._progress import human_bytes
from zrecord._remote import Mirror
from zrecord._types import CacheMode, IndexCache, StorageOptions, StoreLocation, Validate
from zrecord.errors import (
    ClosedError,
    KindMismatchError,
    LimitError,
    ModeError,
    StoreChangedError,
    StoreIndexError,
)

# Iteration reads ahead in blocks of about this size, so it costs one native call per block.
_ITER_BLOCK_BYTES = 4 << 20
_ITER_BLOCK_RECORDS = 4096

# The keys that select one record, and those that select a batch (``_index.normalise``).
Position = int | np.integer[Any]
Positions = slice | Sequence[Position] | np.ndarray


class _Records(Protocol):
    """What a read of a batch returns: one stacked array (Dense) or a list of arrays (Ragged);
    either way a sequence of records."""

    def __getitem__(self, i: int, /) -> np.ndarray: ...

    def __iter__(self) -> Iterator[np.ndarray]: ...


_Batch = TypeVar("_Batch", bound=_Records)


class _Store(_Kind, Generic[_Batch]):
    """Shared machinery of Dense and Ragged readers."""

    _kind: int
    _kind_name: str

    path: str
    """The path the store was opened at, as a string."""
    dtype: np.dtype[Any]
    """The NumPy dtype of every record (little-endian)."""
    ndim: int
    """The rank of every record: ``len(item_shape)`` for Dense, 1..32 for Ragged."""
    codec: str
    """How records are stored: ``"raw"``, ``"zstd"`` or ``"zstd_dict"``."""
    data_shards: int
    """The number of shard files (data-NNN.zrd) the records are spread over (1..255)."""
    cache: str
    """How the store reads records: ``"auto"`` or ``"bypass"`` (see ``open``)."""
    index_cache: str | None
    """The index cache folder the store was opened with, or None (see ``open``)."""

    def __init__(self, path: StoreLocation, *, cache: CacheMode = "auto",
                 index_cache: IndexCache = AUTO, validate: Validate = "cached",
                 storage_options: StorageOptions | None = None,
                 _handle: _native.Reader | None = None, _remote: Mirror | None = None) -> None:
        self.path = redact(path) if is_url(path) else fspath(path)
        self.cache = cache
        self.index_cache = folder_for(index_cache)
        # What reopens this store in another process (`__reduce__`) beside `cache` and
        # `index_cache`: the location as given (a URL whole, a path made absolute, against a
        # later chdir), `validate` and the storage options.
        self._location = path if is_url(path) else os.path.abspath(self.path)
        self._validate = validate
        self._storage_options = dict(storage_options) if storage_options else None
        # `open_store` passes the handle (and mirror) it opened to learn the kind; the handle
        # frees itself.
        self._remote = _remote
        if _handle is None:
            self._remote, handle = open_native(path, cache, index_cache, validate, storage_options)
        else:
            handle = _handle
        info = handle.info()
        if info["kind"] != self._kind:
            if _handle is None:  # opened here: released here (by URL, the mirror's files too)
                handle.close()
                if self._remote is not None:
                    self._remote.close()
            other = "Ragged" if self._kind == KIND_DENSE else "Dense"
            raise KindMismatchError(f"{self.path!r} is a {other} store; open it with {other}.open")
        self._handle = handle
        self._closed = False
        self._info = info
        self._len: int = info["record_count"]
        self.dtype: np.dtype[Any] = dtype_from_info(info["dtype"], info["dtype_length"],
                                                    info["dtype_unit"])
        self.ndim: int = info["ndim"]
        self.codec: str = CODEC_NAMES[info["codec"]]
        self.data_shards: int = info["data_shards"]
        self._digest = f"{info['header_checksum']:016x}"
        self._pool = BlockPool()

    @property
    def closed(self) -> bool:
        """True after ``close()``: the store's files are released and reads raise ClosedError."""
        return self._closed

    @property
    def digest(self) -> str:
        """The store's identity, 16 hex digits: its header checksum (XXH64 over header.zrh,
        which covers the index checksum, the shard sizes, the schema and the dictionary).
        Equal digests mean the same records in the same order, so copies of a store on
        several hosts have the same digest and a store rebuilt differently has another.
        Read once at open; available after ``close()``."""
        return self._digest

    @property
    def nbytes(self) -> int:
        """Logical (decoded) payload bytes of all records."""
        return int(self._info["logical_bytes"])

    @property
    def stored_bytes(self) -> int:
        """Bytes the records occupy in the shard files."""
        return int(self._info["stored_bytes"])

    @property
    def dict_bytes(self) -> bytes | None:
        """The zstd dictionary stored in the header (codec ``zstd_dict``), else None."""
        size = int(self._info["dict_size"])
        if size == 0:
            return None
        self._check_open()
        out = np.empty(size, dtype=np.uint8)
        self._handle.dict_into(out)
        return out.tobytes()

    @property
    def format_version(self) -> tuple[int, int]:
        """(major, minor) of the on-disk format the store was written with."""
        return tuple(self._info["format_version"])

    def info(self) -> dict[str, Any]:
        """Schema, counts and sizes of the store, as plain Python values."""
        return {
            "path": self.path,
            "kind": self._kind_name,
            "dtype": str(self.dtype),
            "ndim": self.ndim,
            "item_shape": list(self._info["item_shape"]) if self._info["item_shape"] is not None else None,
            "codec": self.codec,
            "data_shards": self.data_shards,
            "records": self._len,
            "logical_bytes": self.nbytes,
            "stored_bytes": self.stored_bytes,
            "format_version": list(self.format_version),
            "dict_bytes": int(self._info["dict_size"]),
            "digest": self._digest,
        }

    def index_info(self) -> dict[str, Any]:
        """How this reader found where its records are: ``source`` is ``"built"`` (index.zri
        validated at open, the compact index kept in memory), ``"built_cached"`` (the same,
        and written to the index cache folder), ``"cached"`` (mapped from that folder) or
        ``"by_part"`` (a format 1.2 store with index parts: open judged none of its index, and
        each index block is judged when a record of it is first read); ``resident_bytes`` is
        the compact index's size, shared by the processes of this host that map the same file
        (by part: what the blocks judged so far wrote, in this process's own memory); ``folder`` is the index cache
        folder, or None."""
        self._check_open()
        info = self._handle.index_info()
        return {"source": info["source"], "resident_bytes": int(info["resident_bytes"]),
                "folder": self.index_cache}

    def close(self) -> None:
        """Release the store. Waits for reads in flight; later reads raise ClosedError."""
        if not self._closed:
            self._closed = True
            self._handle.close()
            self._pool.close()
            if self._remote is not None:
                self._remote.close()

    def remote_stats(self) -> dict[str, int] | None:
        """For a store opened by URL: the ranged GETs its gathers made so far (``requests``)
        and the bytes they brought (``bytes``), against the stored bytes of the records they
        were asked for (``delivered_bytes``, each record once per gather: ``bytes /
        delivered_bytes`` is the payload's amplification); what opening it cost (``open_requests``,
        ``open_bytes``: the HEADs, the header's GET and the index's when the mirror fetched
        it); with a ``cache_bytes`` budget, the mirror's ``cache_bytes`` now and what
        evictions freed (``evicted_bytes``, ``evictions``). None for a local store."""
        return None if self._remote is None else self._remote.stats()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """A reader pickles as what reopens it: its location, its open options and its
        digest. So a map-style dataset that holds stores works with the 'spawn' and
        'forkserver' start methods (the default on Linux from Python 3.14): each worker opens
        the store again, and one that was replaced meanwhile is refused
        (:class:`~zrecord.errors.StoreChangedError`), never read in its place. The pickle of a
        store opened by URL holds its URL and ``storage_options``, credentials included, as
        given. A closed store does not pickle (``ClosedError``)."""
        self._check_open()
        args = {"path": self._location, "cache": self.cache, "index_cache": self.index_cache,
                "validate": self._validate, "storage_options": self._storage_options}
        return (_reopen, (self._kind_name, args, self._digest))

    def __len__(self) -> int:
        return self._len

    def _locations(self, recs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where records `recs` (distinct, ascending uint64, in range) lie: their shards,
        offsets and stored sizes, as the core reads them in the index (by URL, after the
        mirror fetched the index parts they need)."""
        self._check_open()
        if self._remote is not None:
            places = self._remote.locate(recs)
            return places.shards, places.offsets, places.sizes
        n = recs.shape[0]
        shards, offsets, sizes = (np.zeros(n, np.uint64) for _ in range(3))
        if n:
            self._handle.locate(recs, n, shards, offsets, sizes)
        return shards, offsets, sizes

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the {self._kind_name} store {self.path!r} is closed")

    if not TYPE_CHECKING:
        # A reader has no append for type checkers (they reject the call before it runs);
        # at run time a call says why it cannot be.
        def append(self, *args: Any, **kwargs: Any) -> None:
            """Always raises ModeError: a published store is immutable; write a new store
            instead."""
            raise ModeError(f"an opened {self._kind_name} store is read-only: {self.path!r} "
                            f"was published and is immutable; write a new store with "
                            f"{self._kind_name}.create")

    def verify(self, start: int = 0, stop: int | None = None) -> None:
        """Check every stored byte of records ``[start, stop)`` against its checksum."""
        self._check_open()
        start, stop = verify_range(start, stop, self._len)
        if self._remote is not None:
            self._remote.read(np.arange(start, stop, dtype=np.uint64),
                              lambda _: self._handle.verify(start, stop - start), whole_index=True)
            return
        self._handle.verify(start, stop - start)

    def __iter__(self) -> Iterator[np.ndarray]:
        self._check_open()
        block = self._iter_block_records()
        for start in range(0, self._len, block):
            batch = self._read(np.arange(start, min(start + block, self._len), dtype=np.uint64))
            for record in batch:
                # Records read ahead are not given out once the store is closed (the guide:
                # reading afterwards raises ClosedError): up to a block of them were. The flag
                # inline, a method call only to raise: this runs once a record.
                if self._closed:
                    self._check_open()
                yield record

    @overload
    def __getitem__(self, key: Position) -> np.ndarray: ...

    @overload
    def __getitem__(self, key: Positions) -> _Batch: ...

    def __getitem__(self, key: Position | Positions) -> np.ndarray | _Batch:
        self._check_open()
        idx = normalise(key, self._len, self.path)
        if isinstance(idx, int):
            return self._read(np.array([idx], dtype=np.uint64))[0]
        try:
            return self._read(idx)
        except StoreIndexError:
            raise index_error(idx, key, self._len, self.path) from None

    def prefetch(self, key: Position | Positions) -> None:
        """Start reading the records ``store[key]`` would return from disk into the page cache,
        and return without waiting for them.

        A hint for a loader that knows which records it reads next (the batches of its next
        few steps): a later ``store[key]`` then finds them read or arriving, instead of
        waiting for the device one record at a time. It changes no result and takes any key
        ``store[key]`` takes, raising what that would raise for an invalid one. Cheap when the
        records are in the page cache already (a sample of a few system calls, then nothing);
        otherwise about a few microseconds per record, without waiting for the reads unless
        the device's queue is full. At most the first 16,384 records and 64 MiB of stored
        bytes of one call are hinted. See "Cold data and datasets larger than RAM" in the
        zrecord guide.

        For a store opened by URL it also starts the ranged GETs of the records the local
        mirror lacks (the same 16,384 records and 64 MiB at most) and returns without waiting;
        a later read of those records waits for them instead of asking again. A fetch that
        fails here is not raised: the read that needs the records fetches them and raises.
        """
        self._check_open()
        idx = normalise(key, self._len, self.path)
        if isinstance(idx, int):
            idx = np.array([idx], dtype=np.uint64)
        if idx.shape[0]:
            try:
                if self._remote is None:
                    self._handle.prefetch(idx, idx.shape[0])
                elif int(idx.max()) >= self._len:
                    raise StoreIndexError("out of range")
            except StoreIndexError:
                raise index_error(idx, key, self._len, self.path) from None
            if self._remote is not None:
                # The mirror's shard files fill as the fetches land: the page cache holds what
                # they wrote, and a hint before them would read holes.
                self._remote.prefetch(idx)

    @property
    def cache_budget_bytes(self) -> int | None:
        """For a store opened by URL with a ``cache_bytes`` budget: the budget (what its
        mirror may hold on disk at once, so what a loader's steps in flight and read ahead
        must fit in); None otherwise."""
        return None if self._remote is None else self._remote.options.cache_bytes

    def cache_cost(self, key: Positions) -> int:
        """The bytes of the mirror's disk that records ``store[key]`` occupy (each record's
        file blocks of 4 KiB, distinct records once): what reading them takes of a
        ``cache_bytes`` budget, which a loader sizes its window by. The records' stored bytes
        for a local store."""
        self._check_open()
        idx = normalise(key, self._len, self.path)
        recs = distinct(np.atleast_1d(np.asarray(idx, dtype=np.uint64)).ravel())
        _, offsets, sizes = self._locations(recs[recs < self._len])
        if self._remote is None:
            return int(sizes.sum())
        starts, ends = offsets.astype(np.int64), (offsets + sizes).astype(np.int64)
        blocks = (ends + 4095) // 4096 - starts // 4096
        return int((np.where(sizes > 0, blocks, 0) * 4096).sum())

    def foresee(self, batch_of: Callable[[int], Any],
                progress: Callable[[], int | None]) -> Foresight | None:
        """Tell a store opened by URL with a ``cache_bytes`` budget what its reader will read:
        ``batch_of(step)`` the positions that step reads (a stateless sampler's ``batch``),
        ``progress()`` the first step not yet consumed (None once the reader is gone). The
        mirror's eviction then takes what is needed farthest ahead first (Belady's rule)
        instead of what was read longest ago, across every reader of the mirror that foresees;
        the order of reads and their results are unchanged. loaderx's DataLoader calls it for
        every stream it reads. Returns a handle whose ``close()`` forgets the future (closing
        the store does too); None where nothing is evicted (a local store, or no budget) and
        for a closed store (whose reads raise ClosedError anyway)."""
        if self._closed or self._remote is None:
            return None
        try:
            return self._remote.foresee(batch_of, progress)
        except ClosedError:  # closed by another thread meanwhile
            return None

    def _iter_block_records(self) -> int:
        raise NotImplementedError  # pragma: no cover - defined by subclasses

    def _read(self, idx: np.ndarray) -> _Batch:
        """`_gather(idx)`, for a remote store once its mirror holds the records."""
        if self._remote is None:
            return self._gather(idx)
        return self._remote.read(idx, self._gather)

    def _gather(self, idx: np.ndarray) -> _Batch:
        raise NotImplementedError  # pragma: no cover - defined by subclasses

    def __repr__(self) -> str:
        """``<Dense 'train/image' uint8 (3, 224, 224) zstd, 1,493 records, 116 MiB>``: the
        schema, the record count and the bytes on disk."""
        state = "closed" if self._closed else (f"{self._len:,} records, "
                                               f"{human_bytes(self.stored_bytes)}")
        return f"<{self._kind_name} {self.path!r} {self.dtype} {self._shape_text()} " \
               f"{self.codec}, {state}>"

    def _shape_text(self) -> str:
        return f"ndim={self.ndim}"


class DenseReader(_Store[np.ndarray], Dense):
    """A published Dense store opened for reading (:meth:`Dense.open`): one fixed-shape array
    per record.

    ``store[i]`` is record ``i`` (shape ``item_shape``); ``store[[i, j]]``, ``store[i, j]``,
    ``store[a:b]`` and integer arrays return a stacked ``(n, *item_shape)`` array in the
    requested order. It is an instance of :class:`Dense`, as a writer is; it has no
    ``append``.
    """

    _kind = KIND_DENSE
    _kind_name = "Dense"

    item_shape: tuple[int, ...]
    """The shape of every record (``()`` for scalar records)."""

    def __init__(self, path: StoreLocation, *, cache: CacheMode = "auto",
                 index_cache: IndexCache = AUTO, validate: Validate = "cached",
                 storage_options: StorageOptions | None = None,
                 _handle: _native.Reader | None = None, _remote: Mirror | None = None) -> None:
        super().__init__(path, cache=cache, index_cache=index_cache, validate=validate,
                         storage_options=storage_options, _handle=_handle, _remote=_remote)
        self.item_shape: tuple[int, ...] = tuple(int(d) for d in self._info["item_shape"])
        self._record_size = int(self._info["record_size"])
        if not numpy_can_hold(self.item_shape, self.dtype.itemsize):
            # A valid store of empty records may declare axes NumPy cannot hold.
            self.close()
            raise LimitError(f"{self.path!r}: header.zrh gives item_shape {self.item_shape}, "
                             "which cannot be a NumPy shape (its non-zero axes times the "
                             f"itemsize {self.dtype.itemsize} exceed {np.iinfo(np.intp).max})")

    def _iter_block_records(self) -> int:
        return max(1, min(_ITER_BLOCK_RECORDS, _ITER_BLOCK_BYTES // max(1, self._record_size)))

    def _shape_text(self) -> str:
        return str(self.item_shape)

    def _gather(self, idx: np.ndarray) -> np.ndarray:
        shape = (idx.shape[0], *self.item_shape)
        if self._record_size == 0 and not numpy_can_hold(shape, self.dtype.itemsize):
            raise LimitError(f"{self.path!r}: {idx.shape[0]} records of item_shape "
                             f"{self.item_shape} cannot be one NumPy array (its non-zero axes "
                             f"times the itemsize exceed {np.iinfo(np.intp).max}); read fewer "
                             "at a time")
        out = self._pool.empty(shape, self.dtype)
        if idx.shape[0]:
            self._handle.gather_dense(idx, idx.shape[0], out)
        return out


class RaggedReader(_Store[list[np.ndarray]], Ragged):
    """A published Ragged store opened for reading (:meth:`Ragged.open`): arrays of one dtype
    and rank whose shapes vary per record.

    ``store[i]`` is record ``i`` with its exact shape; any collection of indices returns a list
    of arrays in the requested order. Nothing is ever padded. It is an instance of
    :class:`Ragged`, as a writer is; it has no ``append``.
    """

    _kind = KIND_RAGGED
    _kind_name = "Ragged"

    def _iter_block_records(self) -> int:
        mean = self.nbytes / self._len if self._len else 1
        return max(1, min(_ITER_BLOCK_RECORDS, int(_ITER_BLOCK_BYTES // max(1.0, mean))))

    def shapes(self, key: Position | Positions = slice(None)) -> np.ndarray:
        """The shapes of the selected records, as an ``(n, ndim)`` int64 array (no data read)."""
        self._check_open()
        idx = normalise(key, self._len, self.path)
        if isinstance(idx, int):
            idx = np.array([idx], dtype=np.uint64)
        shapes = np.empty((idx.shape[0], self.ndim), dtype=np.uint64)
        sizes = np.empty(idx.shape[0], dtype=np.uint64)
        if idx.shape[0]:
            if self._remote is not None:
                # By URL, the shapes lie in index parts the mirror may not hold yet: fetched
                # (and judged) first, as a read of the records would, without their bytes.
                self._remote.locate(idx)
            try:
                self._handle.shapes(idx, idx.shape[0], self.ndim, shapes, sizes)
            except StoreIndexError:
                raise index_error(idx, key, self._len, self.path) from None
        return shapes.astype(np.int64)

    def _gather(self, idx: np.ndarray) -> list[np.ndarray]:
        n = idx.shape[0]
        if n == 0:
            return []
        shapes = np.empty((n, self.ndim), dtype=np.uint64)
        sizes = np.empty(n, dtype=np.uint64)
        self._handle.shapes(idx, n, self.ndim, shapes, sizes)
        return ragged_records(self._pool, self.dtype, shapes, sizes, idx, self.path,
                              lambda flat, offsets: self._handle.gather_ragged(idx, n, flat, offsets, sizes))


def verify_range(start: Any, stop: Any, length: int) -> tuple[int, int]:
    """(start, stop) as Python ints (`stop` None: `length`; a NumPy int8 of 5 overflowed the
    arithmetic after it) once ``verify(start, stop)`` of `length` records has passed:
    ints (TypeError: 1.5 was truncated by the native call, and checked another range) with
    0 <= start <= stop <= length (StoreIndexError)."""
    stop = length if stop is None else stop
    for name, value in (("start", start), ("stop", stop)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"verify {name} must be an int; got {value!r}")
    if not 0 <= start <= stop <= length:
        raise StoreIndexError(f"verify range [{start}, {stop}) is outside 0..{length}")
    return int(start), int(stop)


def ragged_records(pool: BlockPool, dtype: np.dtype[Any], shapes: np.ndarray, sizes: np.ndarray,
                   idx: np.ndarray, where: str,
                   fill: Callable[[np.ndarray, np.ndarray], None]) -> list[np.ndarray]:
    """The records of a Ragged batch whose `shapes` and logical `sizes` are known, in batch
    order: one flat output from `pool`, filled by `fill(flat, byte_offsets)` (record j's slot
    holding sizes[j] bytes, which the fill passes to the core: a record of another size fails
    the call), and a view of it per record (LimitError for an empty record whose shape NumPy
    cannot hold; `idx` and `where` name it)."""
    ndim = shapes.shape[1]
    itemsize = dtype.itemsize
    if ndim > 1:
        # Only empty records can have shapes NumPy cannot hold: the others are bounded by
        # record_size_bytes_max.
        for pos in np.flatnonzero(sizes == 0).tolist():
            if not numpy_can_hold(shapes[pos].tolist(), itemsize):
                raise LimitError(f"{where!r}: record {int(idx[pos])} has shape "
                                 f"{tuple(shapes[pos].tolist())}, which cannot be a NumPy "
                                 "shape (its non-zero axes times the itemsize exceed "
                                 f"{np.iinfo(np.intp).max})")
    counts = (sizes // itemsize).astype(np.int64)
    ends = np.cumsum(counts)
    starts = ends - counts
    flat = pool.empty((int(ends[-1]),), dtype)
    fill(flat, (starts * itemsize).astype(np.uint64))
    if ndim == 1:
        return [flat[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
    return [flat[s:e].reshape(shp)
            for s, e, shp in zip(starts.tolist(), ends.tolist(), shapes.tolist())]


def _reopen(kind_name: str, args: dict[str, Any], digest: str) -> DenseReader | RaggedReader:
    """The store a pickled reader (`_Store.__reduce__`) stands for, opened again, if it is
    still the same store (its digest)."""
    cls: type[DenseReader | RaggedReader] = DenseReader if kind_name == "Dense" else RaggedReader
    store = cls(**args)
    if store.digest != digest:
        store.close()
        raise StoreChangedError(errno.ESTALE, f"{store.path!r} holds another store than the one "
                                f"that was pickled (its digest is {store.digest}, the pickled "
                                f"store's {digest}): it was replaced; open it again")
    return store


def open_store(path: StoreLocation, *, cache: CacheMode = "auto",
               index_cache: IndexCache = AUTO, validate: Validate = "cached",
               storage_options: StorageOptions | None = None) -> DenseReader | RaggedReader:
    """Open the published store at `path` (a local path or a URL), whichever kind it is; the
    arguments as in :meth:`Dense.open`."""
    remote, handle = open_native(path, cache, index_cache, validate, storage_options)
    cls: type[DenseReader | RaggedReader] = (DenseReader if handle.info()["kind"] == KIND_DENSE
                                             else RaggedReader)
    return cls(path, cache=cache, index_cache=index_cache, validate=validate,
               storage_options=storage_options, _handle=handle, _remote=remote)
