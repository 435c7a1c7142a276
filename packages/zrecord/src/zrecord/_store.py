"""Dense and Ragged stores: append-only writers and read-only readers.

Invariants of this module:
- A store becomes visible at its path only when a writer's ``close()`` publishes it (the
  native core writes into a temporary sibling directory and renames it atomically). A writer
  left unclosed, garbage-collected, or closed by an exception inside ``with`` publishes
  nothing and removes its temporary directory.
- Writers consume their source in bounded chunks (``_CHUNK_BYTES``, ``_RAGGED_CHUNK_BYTES``):
  memory does not grow with the size of the source. Read-only memory maps are released chunk
  by chunk behind the writer.
- Readers are safe to use from many threads. ``close()`` waits for native calls in flight; any
  later call raises :class:`~zrecord.errors.ClosedError`. Native handles are freed only when the
  Python object is collected, so a late call can never touch freed memory.
- Batch outputs of at least ``_POOL_BATCH_BYTES_MIN`` come from a small per-store pool of
  recycled blocks (``_BlockPool``): a block goes back to the pool only when the batch and every
  view of it are gone, so a returned batch is never shared with another batch. The pool never
  blocks (a busy lock means a fresh allocation or a dropped block, never a wait), is bounded
  (``_POOL_BLOCKS_MAX`` idle blocks, ``_POOL_BYTES_MAX`` idle bytes) and is emptied by close().
- Index semantics: a scalar index returns one record; any collection of indices (tuple, list,
  integer array, slice) returns a batch in the requested order. Indices must lie in
  ``0 .. len(store) - 1``; slices follow Python's rules (negative bounds and steps allowed).
"""

from __future__ import annotations

import mmap
import operator
import os
import shutil
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from zrecord import _native
from zrecord._dtypes import (
    CODEC_NAMES,
    KIND_DENSE,
    KIND_RAGGED,
    codec_code,
    data_shards_value,
    dtype_code,
    dtype_from_code,
    item_shape_tuple,
    ndim_value,
    numpy_can_hold,
)
from zrecord.errors import (
    ClosedError,
    KindMismatchError,
    LimitError,
    ModeError,
    SchemaError,
    StoreIndexError,
    ZrecordError,
)

# Writers hand the native core at most this much input per call; it bounds the memory a
# writer adds on top of its source (chunks of non-contiguous input are copied).
_CHUNK_BYTES = 32 << 20
# Ragged chunks are bounded by bytes and by records (pointer and shape arrays). A chunk closed
# by its record bound (records under 4 KiB on average) is written on a helper thread while the
# caller collects the next, since iterating a Python source then costs as much as writing;
# chunks of large records are written on the calling thread, where the hop measured slower
# (decision record 0001 section 9).
_RAGGED_CHUNK_BYTES = _CHUNK_BYTES
_RAGGED_CHUNK_RECORDS = 8192
# Iteration reads ahead in blocks of about this size, so it costs one native call per block.
_ITER_BLOCK_BYTES = 4 << 20
_ITER_BLOCK_RECORDS = 4096

# Batch outputs: copying into memory that is already faulted in runs about 2.8x faster than
# into a fresh allocation, which the kernel must zero and fault page by page (decision record
# 0001). Outputs of at least this size are therefore recycled through a per-store pool.
_POOL_BATCH_BYTES_MIN = 1 << 20
# Idle blocks a store's pool keeps, by count and by bytes; blocks in use are the caller's.
_POOL_BLOCKS_MAX = 4
_POOL_BYTES_MAX = 512 << 20


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]  # type: ignore[no-any-return]


def _fspath(path: Any) -> str:
    try:
        return os.fspath(path)  # type: ignore[no-any-return]
    except TypeError as exc:
        raise TypeError(f"path must be a str or os.PathLike; got {type(path).__name__}") from exc


def _remove_stale_temporaries(path: str) -> None:
    """Remove temporary siblings of `path` left by writers that were killed.

    A writer's temporary directory is named ``.<name>.zr-tmp-<pid>-<random>``; one whose pid no
    longer exists can never be published and is removed. A live pid is left alone.
    """
    parent, name = os.path.split(os.path.abspath(path))
    prefix = f".{name}.zr-tmp-"
    try:
        entries = os.listdir(parent)
    except OSError:
        return
    for entry in entries:
        if not entry.startswith(prefix):
            continue
        pid_text = entry[len(prefix):].split("-", 1)[0]
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
        except OSError:
            pass


def _release_mapped_pages(*chunks: np.ndarray) -> None:
    """Drop the pages of read-only shared memory maps that a writer has consumed.

    Appending an 8 GiB ``np.load(..., mmap_mode='r')`` array would otherwise leave all of it
    resident in the writer's address space (RSS). For a shared mapping MADV_DONTNEED only
    unmaps pages; the data stays in the file and the page cache. Private (copy-on-write)
    mappings are left alone, since the advice would discard their modifications. The chunks
    of one call are coalesced into one span per mapping (one madvise, not one per record),
    from the first to the last chunk of that mapping: sources are consumed in order, and
    dropping pages between or around them is harmless, as they are only mapped again when
    read. Only those two chunks' addresses are computed, since asking NumPy for an address
    costs microseconds and a Ragged append can hand over hundreds of thousands of records.
    """
    ends: dict[int, list[Any]] = {}
    for chunk in chunks:
        mm = getattr(chunk, "_mmap", None)
        if not isinstance(mm, mmap.mmap) or getattr(chunk, "mode", None) not in ("r", "r+", "readonly", "readwrite"):
            continue
        span = ends.get(id(mm))
        if span is None:
            ends[id(mm)] = [mm, chunk, chunk]
        else:
            span[2] = chunk
    spans: dict[int, list[Any]] = {}
    for key, (mm, first, last) in ends.items():
        a, b = _addr(first), _addr(last)
        spans[key] = [mm, min(a, b), max(a + first.nbytes, b + last.nbytes)]
    for mm, lo, hi in spans.values():
        try:
            base = _addr(np.frombuffer(mm, dtype=np.uint8))
        except (TypeError, ValueError):
            continue
        start = lo - base
        end = hi - base
        page = mmap.PAGESIZE
        start -= start % page
        end = min(len(mm), end)
        if end > start:
            try:
                mm.madvise(mmap.MADV_DONTNEED, start, end - start)
            except (OSError, ValueError):
                pass


# --------------------------------------------------------------------------------------------
# writers
# --------------------------------------------------------------------------------------------


def _abort_handle(handle: int, state: dict[str, bool]) -> None:
    if not state["done"]:
        state["done"] = True
        _native.writer_abort(handle)
    _native.writer_free(handle)


class _Writer:
    """Shared machinery of DenseWriter and RaggedWriter (one native handle, one lock)."""

    _kind: int
    _kind_name: str

    def __init__(self, path: Any, dtype: Any, shape_or_ndim: tuple[int, ...] | int, codec: Any,
                 data_shards: Any, dict_bytes: Any, sync: bool) -> None:
        self.path = _fspath(path)
        self.dtype, dcode = dtype_code(dtype)
        ccode, dict_data = codec_code(codec, dict_bytes)
        shards = data_shards_value(data_shards)
        self.codec: str = codec
        self.data_shards = shards
        if isinstance(shape_or_ndim, tuple):
            ndim, item_shape = len(shape_or_ndim), shape_or_ndim
        else:
            ndim, item_shape = shape_or_ndim, ()
        self.ndim = ndim
        parent = os.path.dirname(os.path.abspath(self.path))
        if os.path.lexists(self.path):
            # Checked here too so that no parent directory is created for a doomed call.
            from zrecord.errors import StoreExistsError

            raise StoreExistsError(f"{self.path!r} already exists; a store path must be new "
                                   "(published stores are immutable)")
        os.makedirs(parent, exist_ok=True)
        _remove_stale_temporaries(self.path)
        self._lock = threading.Lock()
        self._handle = _native.writer_open(os.fsencode(self.path), self._kind, dcode, ndim, ccode,
                                           shards, item_shape, dict_data, 0 if sync else 1)
        self._state = {"done": False}
        self._poisoned: str | None = None
        self._finalizer = weakref.finalize(self, _abort_handle, self._handle, self._state)

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the writer has published (``close()``) or discarded (``abort()``) the store."""
        return self._state["done"]

    def _check_open(self) -> None:
        if self._state["done"]:
            raise ClosedError(f"the {self._kind_name} writer for {self.path!r} is closed; "
                              "published stores are immutable (write a new store instead)")

    def close(self) -> None:
        """Publish the store atomically at its path. Idempotent."""
        with self._lock:
            if self._state["done"]:
                return
            self._state["done"] = True
            if self._poisoned is not None:
                _native.writer_abort(self._handle)
                raise ZrecordError(f"{self.path!r} was not published and the writer published "
                                   f"nothing: {self._poisoned}")
            _native.writer_publish(self._handle)

    def abort(self) -> None:
        """Discard everything appended; nothing is published. Idempotent."""
        with self._lock:
            if self._state["done"]:
                return
            self._state["done"] = True
            _native.writer_abort(self._handle)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __len__(self) -> int:
        return int(_native.writer_count(self._handle))

    # -- misuse ----------------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        raise ModeError(f"a {self._kind_name} writer cannot be read; close() it to publish "
                        f"{self.path!r}, then {self._kind_name}.open(path) to read")

    def __iter__(self) -> Iterator[Any]:
        raise ModeError(f"a {self._kind_name} writer cannot be iterated; close() it to publish "
                        f"{self.path!r}, then {self._kind_name}.open(path) to read")

    def _check_array(self, value: Any, what: str) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            raise SchemaError(f"{what} must be a numpy.ndarray; got {type(value).__name__} "
                              "(append does not coerce Python containers or bytes: convert with "
                              "np.asarray(...) or np.frombuffer(...) first)")
        if value.dtype != self.dtype:
            raise SchemaError(f"{what} has dtype {value.dtype}; the store's dtype is {self.dtype} "
                              "(append never casts: convert with .astype(...) first)")
        return value

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self)} records appended"
        return f"<{type(self).__name__} {self.path!r} {self.dtype} codec={self.codec!r} ({state})>"


class DenseWriter(_Writer):
    """Append-only builder of a Dense store; returned by :meth:`Dense.create`."""

    _kind = KIND_DENSE
    _kind_name = "Dense"

    def __init__(self, path: Any, dtype: Any, item_shape: Any, codec: Any, data_shards: Any,
                 dict_bytes: Any, sync: bool) -> None:
        shape = item_shape_tuple(item_shape)
        super().__init__(path, dtype, shape, codec, data_shards, dict_bytes, sync)
        self.item_shape: tuple[int, ...] = shape
        self._record_size = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize

    def append(self, data: np.ndarray) -> None:
        """Append every record of `data` (shape ``(n, *item_shape)``), in order.

        Returns after the complete input has been written. `data` may be a memory map of any
        size; it is consumed in bounded chunks.
        """
        with self._lock:
            self._check_open()
            arr = self._check_array(data, "Dense.append data")
            if arr.shape[1:] != self.item_shape or arr.ndim != len(self.item_shape) + 1:
                raise SchemaError(
                    f"Dense.append data has shape {arr.shape}; required (n, *item_shape) = "
                    f"(n, {', '.join(map(str, self.item_shape))}{',' if len(self.item_shape) == 1 else ''})"
                    f" for {self.path!r}")
            n = arr.shape[0]
            step = max(1, _CHUNK_BYTES // max(1, self._record_size))
            for start in range(0, n, step):
                chunk = arr[start:start + step]
                contiguous = chunk if chunk.flags.c_contiguous else np.ascontiguousarray(chunk)
                try:
                    _native.writer_append_dense(self._handle, contiguous, contiguous.shape[0])
                finally:
                    if contiguous is chunk:
                        _release_mapped_pages(chunk)


class RaggedWriter(_Writer):
    """Append-only builder of a Ragged store; returned by :meth:`Ragged.create`."""

    _kind = KIND_RAGGED
    _kind_name = "Ragged"

    def __init__(self, path: Any, dtype: Any, ndim: Any, codec: Any, data_shards: Any,
                 dict_bytes: Any, sync: bool) -> None:
        super().__init__(path, dtype, ndim_value(ndim), codec, data_shards, dict_bytes, sync)

    def append(self, records: Iterable[np.ndarray]) -> None:
        """Append every array of the finite iterable `records`, in order.

        Records are consumed one by one (a generator is never materialised) and handed to the
        native writer in bounded chunks. Chunks of many small records are written (without
        the GIL) on a helper thread while the calling thread already collects the next, so
        iterating a Python source and writing overlap; at most two chunks are held, and the
        helper is joined before `append` returns or raises.
        """
        with self._lock:
            self._check_open()
            if isinstance(records, np.ndarray) or not isinstance(records, Iterable) or isinstance(
                    records, (bytes, bytearray, memoryview, str)):
                raise SchemaError(
                    f"Ragged.append takes an iterable of numpy arrays; got {type(records).__name__}"
                    " (to store one array, pass [array])")
            first = len(self)
            it = iter(records)
            flusher = _Flusher(self._flush)
            chunk, spare = _native.RaggedChunk(self.ndim), _native.RaggedChunk(self.ndim)
            kind, itemsize = self.dtype.kind, self.dtype.itemsize
            taken = 0
            try:
                try:
                    while not _native.ragged_collect(it, chunk, kind, itemsize,
                                                     _RAGGED_CHUNK_RECORDS, _RAGGED_CHUNK_BYTES,
                                                     self._fix_record, first + taken):
                        taken += chunk.count
                        if chunk.count >= _RAGGED_CHUNK_RECORDS:
                            # submit waits for the spare's earlier flush, so it is free again.
                            flusher.submit(chunk)
                            chunk, spare = spare, chunk
                        else:
                            flusher.wait()
                            self._flush(chunk)
                finally:
                    # Whatever happened, no native call may still run once this call goes on.
                    flusher.wait()
                if chunk.count:
                    self._flush(chunk)
            except BaseException as exc:
                if len(self) != first:
                    # Part of this call's input is already written: publishing would store
                    # half of what the caller asked for, so the writer can only be aborted.
                    self._poisoned = (f"an earlier append failed after writing "
                                      f"{len(self) - first} of its records ({exc!r})")
                raise

    def _fix_record(self, rec: Any, number: int) -> np.ndarray:
        """A record that `ragged_collect` could not take as it is: raise the error that says
        why the store cannot hold it, or return a C-contiguous, aligned copy."""
        arr = self._check_array(rec, f"Ragged record {number}")
        if arr.ndim != self.ndim:
            raise SchemaError(f"Ragged record {number} has shape {arr.shape} (ndim {arr.ndim}); "
                              f"the store's ndim is {self.ndim}")
        return np.require(arr, requirements=["C_CONTIGUOUS", "ALIGNED"])

    def _flush(self, chunk: _native.RaggedChunk) -> None:
        try:
            _native.writer_append_chunk(self._handle, chunk)
            _release_mapped_pages(*chunk.arrays)
        finally:
            chunk.clear()


class _Flusher:
    """Runs `flush(chunk)` on a helper thread, one chunk at a time, for RaggedWriter.append.

    `submit` first waits for the chunk before (re-raising its exception, if any), so chunks are
    written in order and at most one is in flight. `wait` joins the helper even across a
    KeyboardInterrupt (raised once the native call has returned), since the writer must not
    be used or aborted while a native call on it is running.
    """

    def __init__(self, flush: Callable[[_native.RaggedChunk], None]) -> None:
        self._flush = flush
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _run(self, chunk: _native.RaggedChunk) -> None:
        try:
            self._flush(chunk)
        except BaseException as exc:  # noqa: BLE001 - handed to the submitting thread
            self._error = exc

    def submit(self, chunk: _native.RaggedChunk) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(chunk,),
                                        name="zrecord-ragged-append", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            interrupted: BaseException | None = None
            while True:
                try:
                    thread.join()
                    break
                except KeyboardInterrupt as exc:
                    interrupted = exc
            if interrupted is not None:
                raise interrupted
        error, self._error = self._error, None
        if error is not None:
            raise error


# --------------------------------------------------------------------------------------------
# recycled batch outputs
# --------------------------------------------------------------------------------------------


def _block_bytes(nbytes: int) -> int:
    """Size class of a pooled block: `nbytes` rounded up to 1/8 of its power of two, so that
    Ragged batches of similar size can reuse each other's blocks (at most 12.5% slack)."""
    step = max(4096, 1 << max(0, nbytes.bit_length() - 4))
    return -(-nbytes // step) * step


class _PooledBlock:
    """Owns one pooled block for as long as a batch array (or any view of it) is alive.

    The batch is built from this object's ``__array_interface__``, so the batch's ``.base`` is
    this object and every view keeps it alive; when the last one goes, ``__del__`` hands the
    block back to its pool.
    """

    __slots__ = ("__array_interface__", "_block", "_pool")

    def __init__(self, block: np.ndarray, pool: _BlockPool, shape: tuple[int, ...],
                 dtype: np.dtype[Any]) -> None:
        self._block = block
        self._pool = pool
        self.__array_interface__ = {"data": (_addr(block), False), "shape": shape,
                                    "typestr": dtype.str, "version": 3}

    def __del__(self) -> None:
        try:
            self._pool._give(self._block)
        except Exception:  # noqa: BLE001 - a finalizer must not raise (interpreter shutdown)
            pass


class _BlockPool:
    """A bounded, thread-safe pool of idle, already-faulted output blocks for one store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[np.ndarray] = []
        self._bytes = 0
        self._closed = False
        _POOLS.add(self)

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held the lock when this process was forked;
        # it does not exist here, so `close` would wait for it forever.
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """An uninitialised C-contiguous, writeable array, like ``np.empty(shape, dtype)``."""
        nbytes = dtype.itemsize
        for dim in shape:
            nbytes *= dim
        if nbytes < _POOL_BATCH_BYTES_MIN or self._closed:
            return np.empty(shape, dtype)
        block = None
        # Never wait: a busy lock (another thread, or a lock inherited locked across fork)
        # only costs a fresh allocation.
        if self._lock.acquire(blocking=False):
            try:
                best = -1
                for i, b in enumerate(self._free):
                    if nbytes <= b.nbytes <= 2 * nbytes and (best < 0 or b.nbytes < self._free[best].nbytes):
                        best = i
                if best >= 0:
                    block = self._free.pop(best)
                    self._bytes -= block.nbytes
            finally:
                self._lock.release()
        if block is None:
            block = np.empty(_block_bytes(nbytes), np.uint8)
        return np.asarray(_PooledBlock(block, self, shape, dtype))

    def _give(self, block: np.ndarray) -> None:
        # Called from __del__, on any thread and possibly while this thread holds the lock
        # (a collection triggered inside `empty`): never wait, drop the block instead.
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._closed or block.nbytes > _POOL_BYTES_MAX:
                return
            self._free.append(block)
            self._bytes += block.nbytes
            while len(self._free) > _POOL_BLOCKS_MAX or self._bytes > _POOL_BYTES_MAX:
                self._bytes -= self._free.pop(0).nbytes
        finally:
            self._lock.release()

    def close(self) -> None:
        """Drop every idle block; blocks returned later are dropped too."""
        with self._lock:
            self._closed = True
            self._free.clear()
            self._bytes = 0

    def idle(self) -> tuple[int, int]:
        """(idle blocks, idle bytes), for tests."""
        with self._lock:
            return len(self._free), self._bytes


# Every live pool, so that a forked child can replace locks its parent's threads held.
_POOLS: weakref.WeakSet[_BlockPool] = weakref.WeakSet()


def _reset_pools_after_fork() -> None:
    for pool in list(_POOLS):
        pool._after_fork_in_child()


os.register_at_fork(after_in_child=_reset_pools_after_fork)


# --------------------------------------------------------------------------------------------
# readers
# --------------------------------------------------------------------------------------------


def _close_handle(handle: int) -> None:
    _native.reader_free(handle)


class _Store:
    """Shared machinery of Dense and Ragged readers."""

    _kind: int
    _kind_name: str

    def __init__(self, path: Any) -> None:
        self.path = _fspath(path)
        handle = _native.reader_open(os.fsencode(self.path))
        self._finalizer = weakref.finalize(self, _close_handle, handle)
        info = _native.reader_info(handle)
        if info["kind"] != self._kind:
            other = "Ragged" if self._kind == KIND_DENSE else "Dense"
            raise KindMismatchError(f"{self.path!r} is a {other} store; open it with {other}.open")
        self._handle = handle
        self._closed = False
        self._info = info
        self._len: int = info["record_count"]
        self.dtype: np.dtype[Any] = dtype_from_code(info["dtype"])
        self.ndim: int = info["ndim"]
        self.codec: str = CODEC_NAMES[info["codec"]]
        self.data_shards: int = info["data_shards"]
        self._pool = _BlockPool()

    @property
    def closed(self) -> bool:
        """True after ``close()``: the store's files are released and reads raise ClosedError."""
        return self._closed

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
        _native.reader_dict(self._handle, out)
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
        }

    def close(self) -> None:
        """Release the store. Waits for reads in flight; later reads raise ClosedError."""
        if not self._closed:
            self._closed = True
            _native.reader_close(self._handle)
            self._pool.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return self._len

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the {self._kind_name} store {self.path!r} is closed")

    def append(self, *args: Any, **kwargs: Any) -> None:
        """Always raises ModeError: a published store is immutable; write a new store instead."""
        raise ModeError(f"an opened {self._kind_name} store is read-only: {self.path!r} was "
                        f"published and is immutable; write a new store with "
                        f"{self._kind_name}.create")

    def verify(self, start: int = 0, stop: int | None = None) -> None:
        """Check every stored byte of records ``[start, stop)`` against its checksum."""
        self._check_open()
        stop = self._len if stop is None else stop
        if not 0 <= start <= stop <= self._len:
            raise StoreIndexError(f"verify range [{start}, {stop}) is outside 0..{self._len}")
        _native.reader_verify(self._handle, start, stop - start)

    def _indices(self, key: Any) -> np.ndarray | int:
        """Normalise `key`: an int for a scalar read, else a C-contiguous uint64 index array.

        Negative positions in arrays become huge unsigned values that the native bounds check
        rejects; `_index_error` then rebuilds the message with the signed value.
        """
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            i = operator.index(key)
            if not 0 <= i < self._len:
                raise StoreIndexError(f"index {i} is out of range for {self.path!r} with "
                                      f"{self._len} records (indices must be in 0..{self._len - 1})")
            return i
        if isinstance(key, np.ndarray):
            arr = key
        elif isinstance(key, slice):
            return np.arange(*key.indices(self._len), dtype=np.uint64)
        elif isinstance(key, (tuple, list)):
            if any(isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer))
                   for k in key):
                raise TypeError(
                    f"a store is a sequence of records: a tuple or list selects records by "
                    f"integer position, so every element must be an int; got {key!r}")
            arr = np.array(key, dtype=np.int64) if key else np.empty(0, dtype=np.uint64)
        else:
            raise TypeError(f"store indices must be an int, a slice, or a tuple, list or "
                            f"integer array of positions; got {type(key).__name__}")
        if arr.ndim != 1:
            raise TypeError(f"an index array must be one-dimensional; got shape {arr.shape}")
        if arr.dtype.kind not in "iu":
            if arr.size == 0:
                return np.empty(0, dtype=np.uint64)
            raise TypeError(f"an index array must have an integer dtype; got {arr.dtype}")
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        arr = arr.view(np.uint64) if arr.dtype.itemsize == 8 else arr.astype(np.uint64)
        return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)

    def _index_error(self, idx: np.ndarray) -> StoreIndexError:
        signed = idx.view(np.int64)
        bad = int(np.flatnonzero((signed < 0) | (signed >= self._len))[0])
        return StoreIndexError(
            f"index {int(signed[bad])} at position {bad} is out of range for {self.path!r} "
            f"with {self._len} records (indices must be in 0..{self._len - 1})")

    def __iter__(self) -> Iterator[Any]:
        self._check_open()
        block = self._iter_block_records()
        for start in range(0, self._len, block):
            batch = self._gather(np.arange(start, min(start + block, self._len), dtype=np.uint64))
            yield from batch

    def __getitem__(self, key: Any) -> Any:
        self._check_open()
        idx = self._indices(key)
        if isinstance(idx, int):
            return self._gather(np.array([idx], dtype=np.uint64))[0]
        try:
            return self._gather(idx)
        except StoreIndexError:
            raise self._index_error(idx) from None

    def _iter_block_records(self) -> int:
        raise NotImplementedError  # pragma: no cover - defined by subclasses

    def _gather(self, idx: np.ndarray) -> Any:
        raise NotImplementedError  # pragma: no cover - defined by subclasses

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._len} records"
        return f"<{type(self).__name__} {self.path!r} {self.dtype} codec={self.codec!r} ({state})>"


class Dense(_Store):
    """A published Dense store: one fixed-shape array per record.

    Create one with :meth:`Dense.create` (an append-only :class:`DenseWriter`), read one with
    :meth:`Dense.open`. ``store[i]`` is record ``i`` (shape ``item_shape``); ``store[[i, j]]``,
    ``store[i, j]``, ``store[a:b]`` and integer arrays return a stacked ``(n, *item_shape)``
    array in the requested order.
    """

    _kind = KIND_DENSE
    _kind_name = "Dense"

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.item_shape: tuple[int, ...] = tuple(int(d) for d in self._info["item_shape"])
        self._record_size = int(self._info["record_size"])
        if not numpy_can_hold(self.item_shape, self.dtype.itemsize):
            # A valid store of empty records may declare axes NumPy cannot hold.
            self.close()
            raise LimitError(f"{self.path!r}: header.zrh gives item_shape {self.item_shape}, "
                             "which cannot be a NumPy shape (its non-zero axes times the "
                             f"itemsize {self.dtype.itemsize} exceed {np.iinfo(np.intp).max})")

    @classmethod
    def create(cls, path: Any, dtype: Any, item_shape: Any, *, codec: Any, data_shards: int = 4,
               dict_bytes: bytes | None = None, sync: bool = True) -> DenseWriter:
        """Start a new Dense store at `path` (which must not exist).

        `dtype` and `item_shape` are the schema and are never inferred. `codec` is required:
        ``"raw"``, ``"zstd"`` or ``"zstd_dict"`` (with `dict_bytes`). `data_shards` (1..255)
        sets write parallelism. `sync=False` skips flushing to stable storage before
        publishing (the store is still published atomically). Nothing appears at `path` until
        the writer's ``close()``.
        """
        return DenseWriter(path, dtype, item_shape, codec, data_shards, dict_bytes, sync)

    @classmethod
    def open(cls, path: Any) -> Dense:
        """Open the published Dense store at `path` for reading."""
        return cls(path)

    def _iter_block_records(self) -> int:
        return max(1, min(_ITER_BLOCK_RECORDS, _ITER_BLOCK_BYTES // max(1, self._record_size)))

    def _gather(self, idx: np.ndarray) -> np.ndarray:
        shape = (idx.shape[0], *self.item_shape)
        if self._record_size == 0 and not numpy_can_hold(shape, self.dtype.itemsize):
            raise LimitError(f"{self.path!r}: {idx.shape[0]} records of item_shape "
                             f"{self.item_shape} cannot be one NumPy array (its non-zero axes "
                             f"times the itemsize exceed {np.iinfo(np.intp).max}); read fewer "
                             "at a time")
        out = self._pool.empty(shape, self.dtype)
        if idx.shape[0]:
            _native.reader_gather_dense(self._handle, idx, idx.shape[0], out)
        return out


class Ragged(_Store):
    """A published Ragged store: arrays of one dtype and rank whose shapes vary per record.

    ``store[i]`` is record ``i`` with its exact shape; any collection of indices returns a list
    of arrays in the requested order. Nothing is ever padded.
    """

    _kind = KIND_RAGGED
    _kind_name = "Ragged"

    @classmethod
    def create(cls, path: Any, dtype: Any, ndim: Any, *, codec: Any, data_shards: int = 4,
               dict_bytes: bytes | None = None, sync: bool = True) -> RaggedWriter:
        """Start a new Ragged store at `path` (which must not exist).

        `dtype` and `ndim` (1..32) are the schema; every axis of every record may vary, zero
        included. Other arguments as in :meth:`Dense.create`.
        """
        return RaggedWriter(path, dtype, ndim, codec, data_shards, dict_bytes, sync)

    @classmethod
    def open(cls, path: Any) -> Ragged:
        """Open the published Ragged store at `path` for reading."""
        return cls(path)

    def _iter_block_records(self) -> int:
        mean = self.nbytes / self._len if self._len else 1
        return max(1, min(_ITER_BLOCK_RECORDS, int(_ITER_BLOCK_BYTES // max(1.0, mean))))

    def shapes(self, key: Any = slice(None)) -> np.ndarray:
        """The shapes of the selected records, as an ``(n, ndim)`` int64 array (no data read)."""
        self._check_open()
        idx = self._indices(key)
        if isinstance(idx, int):
            idx = np.array([idx], dtype=np.uint64)
        shapes = np.empty((idx.shape[0], self.ndim), dtype=np.uint64)
        sizes = np.empty(idx.shape[0], dtype=np.uint64)
        if idx.shape[0]:
            try:
                _native.reader_shapes(self._handle, idx, idx.shape[0], self.ndim, shapes, sizes)
            except StoreIndexError:
                raise self._index_error(idx) from None
        return shapes.astype(np.int64)

    def _gather(self, idx: np.ndarray) -> list[np.ndarray]:
        n = idx.shape[0]
        if n == 0:
            return []
        shapes = np.empty((n, self.ndim), dtype=np.uint64)
        sizes = np.empty(n, dtype=np.uint64)
        _native.reader_shapes(self._handle, idx, n, self.ndim, shapes, sizes)
        itemsize = self.dtype.itemsize
        if self.ndim > 1:
            # Only empty records can have shapes NumPy cannot hold: the others are bounded by
            # record_size_bytes_max.
            for pos in np.flatnonzero(sizes == 0).tolist():
                if not numpy_can_hold(shapes[pos].tolist(), itemsize):
                    raise LimitError(f"{self.path!r}: record {int(idx[pos])} has shape "
                                     f"{tuple(shapes[pos].tolist())}, which cannot be a NumPy "
                                     "shape (its non-zero axes times the itemsize exceed "
                                     f"{np.iinfo(np.intp).max})")
        counts = (sizes // itemsize).astype(np.int64)
        ends = np.cumsum(counts)
        starts = ends - counts
        flat = self._pool.empty((int(ends[-1]),), self.dtype)
        offsets = (starts * itemsize).astype(np.uint64)
        _native.reader_gather_ragged(self._handle, idx, n, flat, offsets)
        shape_list = shapes.tolist()
        if self.ndim == 1:
            return [flat[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
        return [flat[s:e].reshape(shp)
                for s, e, shp in zip(starts.tolist(), ends.tolist(), shape_list)]


def open_store(path: Any) -> Dense | Ragged:
    """Open the published store at `path`, whichever kind it is."""
    handle = _native.reader_open(os.fsencode(_fspath(path)))
    try:
        kind = _native.reader_info(handle)["kind"]
    finally:
        _native.reader_close(handle)
        _native.reader_free(handle)
    return Dense(path) if kind == KIND_DENSE else Ragged(path)
