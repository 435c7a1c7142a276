"""Append-only writers of Dense and Ragged stores.

Invariants of this module:
- A store becomes visible at its path only when a writer's ``close()`` publishes it (the
  native core writes into a locked temporary sibling directory and renames it atomically). A
  writer left unclosed, garbage-collected, or closed by an exception inside ``with`` publishes
  nothing and its temporary directory is removed.
- Writers consume their source in bounded chunks (``_CHUNK_BYTES``, ``_RAGGED_CHUNK_BYTES``):
  memory does not grow with the size of the source. Read-only memory maps are released chunk
  by chunk behind the writer (``_pages``).
- A Ragged record is stored as it was when the source yielded it: a record whose bytes could
  still change before its chunk is written is copied (``_native.RaggedChunk``).
- An append that fails after writing part of its input poisons the writer: it can only be
  aborted, so a store never holds half of what one call was asked to append.
- A writer created with a URL (``s3://``) first checks that a store may be published there
  (``_publish.check_destination``), writes the store in a private staging folder (under
  ``storage_options["cache_dir"]`` when given, else in TMPDIR), and at ``close()`` uploads it
  with ``zrecord.publish``, whose checks and atomicity it has. Aborting, or leaving ``with``
  by an exception, publishes nothing and removes the staging folder; so does a successful
  publish. A failed publish keeps the staged store and says where, so that gigabytes written
  need not be written again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsIndex

import numpy as np

from zrecord import _native
from zrecord._dtypes import (
    KIND_DENSE,
    KIND_RAGGED,
    WRITE_INDEX_PARTS,
    WRITE_NO_SYNC,
    codec_code,
    data_shards_value,
    dtype_code,
    item_shape_tuple,
    ndim_value,
)
from zrecord._index_cache import AUTO, folder_for, policy, records_min
from zrecord._kinds import Dense, Ragged, _Kind
from zrecord._mirror_files import PrivateFolder
from zrecord._objects import is_url, redact, storage_settings
from zrecord._pages import release_mapped_pages
from zrecord._paths import HEADER_NAME, fspath, native_path, store_location
from zrecord._publish import check_destination, publish, published_before
from zrecord._tree import is_temporary_name
from zrecord._types import Codec, DictBytes, DTypeLike, IndexCache, ItemShape, StorageOptions, StoreLocation
from zrecord.console import progress_bar, restate
from zrecord.errors import ClosedError, ModeError, SchemaError, ZrecordError

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


class _Writer(_Kind):
    """Shared machinery of DenseWriter and RaggedWriter (one native handle, one lock)."""

    _kind: int
    _kind_name: str

    path: str
    """The path the store will be published at, as a string."""
    dtype: np.dtype[Any]
    """The NumPy dtype of every record."""
    ndim: int
    """The rank of every record."""
    codec: str
    """How records are stored: ``"raw"``, ``"zstd"`` or ``"zstd_dict"``."""
    data_shards: int
    """The number of shard files written in parallel (1..255)."""

    def __init__(self, path: StoreLocation, dtype: DTypeLike, shape_or_ndim: tuple[int, ...] | int,
                 codec: Codec, data_shards: SupportsIndex, dict_bytes: DictBytes | None, sync: bool,
                 index_cache: IndexCache = AUTO,
                 storage_options: StorageOptions | None = None,
                 index_parts: bool = True) -> None:
        self._staged: _Staged | None = None
        # A staged store whose upload failed at close(), kept for the next close() to upload.
        self._unuploaded: _Staged | None = None
        where = store_location(path, storage_options, role="the destination")
        self.path = redact(where) if is_url(where) else where
        # A store staged for a URL is removed once uploaded: no compact index is kept for it.
        self._index_folder = folder_for(None if is_url(where) else index_cache)
        # The folder's settings, read now: a bad environment fails create, not close() after
        # the store was published.
        self._index_policy = policy() if self._index_folder is not None else (0, 0)
        self.dtype, dcode, dlength, dunit = dtype_code(dtype)
        ccode, dict_data = codec_code(codec, dict_bytes)
        shards = data_shards_value(data_shards)
        self.codec: str = codec
        self.data_shards = shards
        if isinstance(shape_or_ndim, tuple):
            ndim, item_shape = len(shape_or_ndim), shape_or_ndim
        else:
            ndim, item_shape = shape_or_ndim, ()
        self.ndim = ndim
        self._lock = threading.Lock()
        # The thread whose append runs (under the lock): an abort() or close() from it (a
        # generator feeding the append, a signal handler) would wait for its own lock.
        self._appending: int | None = None
        self._poisoned: str | None = None
        # Checked (a request or two) once every other argument was, before anything is written.
        staged = _Staged(where, storage_options) if is_url(where) else None
        flags = (0 if sync else WRITE_NO_SYNC) | (WRITE_INDEX_PARTS if index_parts else 0)
        try:
            # The native core creates missing parent directories, refuses a path inside a
            # published store and removes stale temporaries of this name (zrecord.h). The
            # handle aborts the write if it is collected unpublished.
            # Absolute: a relative path would be taken from the working folder at close().
            self._where = os.path.abspath(where) if staged is None else staged.store
            self._handle = _native.Writer(native_path(self._where),
                                          self._kind, dcode, ndim, ccode, shards, item_shape,
                                          dict_data, flags, dlength, dunit)
        except BaseException:
            if staged is not None:
                staged.remove()
            raise
        self._staged = staged

    def __del__(self) -> None:
        # A UserWarning, which Python shows by default (a ResourceWarning is hidden): a script
        # that forgets close() loses its data and still exits with status 0, so it must at
        # least say so. abort() is the way to discard on purpose, silently.
        handle = getattr(self, "_handle", None)
        if handle is not None and not handle.done:
            warnings.warn(f"{type(self).__name__} for {self.path!r} was dropped without close(): "
                          f"its {int(handle.count()):,} appended records were discarded and "
                          "nothing was published (use `with`, or call close() to publish or "
                          "abort() to discard)", UserWarning, stacklevel=2)
            if self._staged is not None:
                handle.abort()  # before its folder goes, which the handle would abort into
                self._staged.remove()

    def __reduce__(self) -> tuple[Any, ...]:
        """A writer does not pickle: its unpublished files belong to this process's write."""
        raise TypeError(f"a {type(self).__name__} cannot be pickled: it is this process's "
                        f"unpublished write of {self.path!r}. Finish it here (close() publishes "
                        f"it), then give other processes the path, or a store opened from it "
                        f"({self._kind_name}.open), which pickles")

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the writer has published (``close()``) or discarded (``abort()``) the store."""
        return bool(self._handle.done)

    def _check_open(self) -> None:
        if self._handle.done:
            raise ClosedError(f"the {self._kind_name} writer for {self.path!r} is closed; "
                              "published stores are immutable (write a new store instead)")

    @contextlib.contextmanager
    def _appending_whole(self) -> Iterator[None]:
        """An append, under the writer's lock: refused on a poisoned writer; one that fails (or
        is interrupted) after writing part of its input poisons the writer, since publishing
        would store half of what the caller asked for, so that close() aborts instead."""
        with self._lock:
            self._check_open()
            if self._poisoned is not None:
                # Every later append would be thrown away by close(): said now, not then.
                raise ZrecordError(f"{self.path!r} takes no more records: {self._poisoned}; "
                                   "close() would publish nothing, so abort() it and write "
                                   "the store again")
            first = len(self)
            self._appending = threading.get_ident()
            try:
                yield
            except BaseException as exc:
                if len(self) != first:
                    self._poisoned = (f"an earlier append failed after writing "
                                      f"{len(self) - first} of its records ({exc!r})")
                raise
            finally:
                self._appending = None

    def _not_inside_an_append(self, what: str) -> None:
        """Refuse `what` (close, abort) from the thread whose append is running: it would wait
        for that append's lock forever."""
        if self._appending == threading.get_ident():
            raise ModeError(f"{what} of the writer for {self.path!r} was called from inside "
                            "this thread's own append (the records' iterator, or a signal "
                            f"handler during it): raise an exception there instead, and call "
                            f"{what} once append has raised it")

    def close(self) -> None:
        """Publish the store atomically at its path, or upload it to its URL (``zrecord.publish``:
        a failed upload keeps the staged store and its error says where). Idempotent."""
        self._not_inside_an_append("close()")
        with self._lock:
            if self._handle.done:
                if self._unuploaded is not None:
                    # The upload failed (or was interrupted): this close() tries it again, so
                    # that a caller retrying close() never takes a failure for success.
                    self._unuploaded.publish()
                    self._unuploaded = None
                return
            # Whatever happens now, abort() may no longer remove the staged store: a failed
            # upload keeps it.
            staged, self._staged = self._staged, None
            try:
                if self._poisoned is not None:
                    self._handle.abort()
                    raise ZrecordError(f"{self.path!r} was not published and the writer "
                                       f"published nothing: {self._poisoned}")
                self._handle.publish()
            except BaseException as exc:
                if staged is not None:
                    staged.remove()
                else:
                    self._note_published(exc, "")
                raise
            if staged is not None:
                try:
                    staged.publish()
                except BaseException as exc:
                    if not published_before(exc):  # else uploaded: nothing left to do
                        self._unuploaded = staged
                    raise
                return
            if self._index_folder is not None and len(self) >= records_min(self._index_policy[0]):
                # The first open of a large store on this host validates its index and writes
                # the compact index to the cache folder; doing it now, while the index is in the
                # page cache, spares the first reader that pass. A small store's index is
                # never cached (validating it costs the first reader a few milliseconds), so
                # its writer does nothing here. "full": a plain open of a store with index
                # parts judges no part of it and writes no cache file.
                from zrecord._opening import open_handle

                try:
                    open_handle(self._where, "auto", self._index_folder, "full",
                                index_policy=self._index_policy).close()
                except BaseException as exc:
                    self._note_published(exc, " (its index was not cached: the first open "
                                         "validates it)")
                    raise

    def _note_published(self, exc: BaseException, more: str) -> None:
        """An interrupt raised once the store was published (the native publish had returned,
        then the signal's KeyboardInterrupt came): say so, or the caller takes it for a store
        not written. Not for a store inside a staged tree (``staged_directory``), which the
        tree's own abort then removes."""
        if isinstance(exc, Exception) or not os.path.isfile(os.path.join(self._where, HEADER_NAME)):
            return
        if any(is_temporary_name(part) for part in Path(self._where).parts):
            return
        restate(exc, f"{self._where} was published before the interrupt: the store is complete{more}")

    def abort(self) -> None:
        """Discard everything appended; nothing is published (a writer by URL also removes its
        staged store, except one whose upload failed: its error said where it is kept, and
        close() no longer uploads it). Idempotent."""
        self._not_inside_an_append("abort()")
        with self._lock:
            self._handle.abort()
            self._unuploaded = None
            if self._staged is not None:
                self._staged.remove()
                self._staged = None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __len__(self) -> int:
        return int(self._handle.count())

    # -- misuse ----------------------------------------------------------------------------

    if not TYPE_CHECKING:
        # A writer cannot be read: type checkers reject indexing and iterating it before
        # they run; at run time they say what to do instead.
        def __getitem__(self, key: Any) -> Any:
            raise ModeError(f"a {self._kind_name} writer cannot be read; close() it to "
                            f"publish {self.path!r}, then {self._kind_name}.open(path) to read")

        def __iter__(self) -> Iterator[Any]:
            raise ModeError(f"a {self._kind_name} writer cannot be iterated; close() it to "
                            f"publish {self.path!r}, then {self._kind_name}.open(path) to read")

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
        """``<DenseWriter 'train/image' uint8 (3, 224, 224) zstd, 12 records appended>``."""
        state = "closed" if self.closed else f"{len(self):,} records appended"
        shape = str(self.item_shape) if isinstance(self, DenseWriter) else f"ndim={self.ndim}"
        return f"<{type(self).__name__} {self.path!r} {self.dtype} {shape} {self.codec}, {state}>"


class DenseWriter(_Writer, Dense):
    """Append-only builder of a Dense store; returned by :meth:`Dense.create`. It is an
    instance of :class:`Dense`, as a reader is; it cannot be indexed or iterated."""

    _kind = KIND_DENSE
    _kind_name = "Dense"

    def __init__(self, path: StoreLocation, dtype: DTypeLike, item_shape: ItemShape, codec: Codec,
                 data_shards: SupportsIndex, dict_bytes: DictBytes | None, sync: bool,
                 index_cache: IndexCache = AUTO,
                 storage_options: StorageOptions | None = None,
                 index_parts: bool = True) -> None:
        shape = item_shape_tuple(item_shape)
        super().__init__(path, dtype, shape, codec, data_shards, dict_bytes, sync, index_cache,
                         storage_options, index_parts)
        self.item_shape: tuple[int, ...] = shape
        self._record_size = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize

    def append(self, data: np.ndarray, *, progress: bool = False) -> None:
        """Append every record of `data` (shape ``(n, *item_shape)``), in order.

        Returns after the complete input has been written. `data` may be a memory map of any
        size; it is consumed in bounded chunks. ``progress=True`` shows progress on stderr
        (:func:`zrecord.console.progress_bar`: a bar on a terminal, plain lines elsewhere).
        """
        with self._appending_whole():
            arr = self._check_array(data, "Dense.append data")
            if arr.shape[1:] != self.item_shape or arr.ndim != len(self.item_shape) + 1:
                raise SchemaError(
                    f"Dense.append data has shape {arr.shape}; required (n, *item_shape) = "
                    f"(n, {', '.join(map(str, self.item_shape))}{',' if len(self.item_shape) == 1 else ''})"
                    f" for {self.path!r}")
            n = arr.shape[0]
            step = max(1, _CHUNK_BYTES // max(1, self._record_size))
            with progress_bar(progress, n, self.path) as advance:
                for start in range(0, n, step):
                    self._append_chunk(arr[start:start + step])
                    advance(min(step, n - start))

    def _append_chunk(self, chunk: np.ndarray) -> None:
        # Strided, Fortran-ordered and unaligned inputs alike are copied per chunk.
        direct = chunk.flags.c_contiguous and chunk.flags.aligned
        contiguous = chunk if direct else np.require(chunk, requirements=["C", "A"])
        try:
            self._handle.append_dense(contiguous, contiguous.shape[0])
        finally:
            # The source's pages, whether written from or copied (a strided view of a memory
            # map read through kept the whole source resident: 1.2 GiB for a 1.2 GiB map).
            release_mapped_pages(chunk)


class RaggedWriter(_Writer, Ragged):
    """Append-only builder of a Ragged store; returned by :meth:`Ragged.create`. It is an
    instance of :class:`Ragged`, as a reader is; it cannot be indexed or iterated."""

    _kind = KIND_RAGGED
    _kind_name = "Ragged"

    def __init__(self, path: StoreLocation, dtype: DTypeLike, ndim: SupportsIndex, codec: Codec,
                 data_shards: SupportsIndex, dict_bytes: DictBytes | None, sync: bool,
                 index_cache: IndexCache = AUTO,
                 storage_options: StorageOptions | None = None,
                 index_parts: bool = True) -> None:
        super().__init__(path, dtype, ndim_value(ndim), codec, data_shards, dict_bytes, sync,
                         index_cache, storage_options, index_parts)

    def append(self, records: Iterable[np.ndarray], *, progress: bool = False) -> None:
        """Append every array of the finite iterable `records`, in order.

        Records are consumed one by one (a generator is never materialised) and handed to the
        native writer in bounded chunks. Chunks of many small records are written (without
        the GIL) on a helper thread while the calling thread already collects the next, so
        iterating a Python source and writing overlap; at most two chunks are held, and the
        helper is joined before `append` returns or raises. ``progress=True`` shows progress
        as :meth:`DenseWriter.append` does.
        """
        with self._appending_whole():
            try:
                if isinstance(records, (np.ndarray, bytes, bytearray, memoryview, str)):
                    raise TypeError
                # Any iterable, by iter(): one with __iter__, or one by the sequence protocol
                # (__getitem__ and __len__, a map-style dataset's).
                it = iter(records)
            except TypeError:
                raise SchemaError(
                    f"Ragged.append takes an iterable of numpy arrays; got {type(records).__name__}"
                    " (to store one array, pass [array])") from None
            first = len(self)
            total = len(records) if isinstance(records, Sized) else None
            with progress_bar(progress, total, self.path) as advance:
                # Iterating a list or tuple runs no code that could change a record already
                # taken, so theirs are never copied (RaggedChunk says when others are). Their
                # exact types only: a subclass's __iter__ is code (one refilling one buffer
                # stored every record as the last).
                self._stream(it, type(records) in (list, tuple), first, advance)

    def _stream(self, it: Iterator[Any], trusted: bool, first: int,
                advance: Callable[[int], object]) -> None:
        """Collect chunks from `it` and write them, full ones on the helper thread."""
        flusher = _Flusher(self._flush)
        chunk, spare = _native.RaggedChunk(self.ndim), _native.RaggedChunk(self.ndim)
        chunk.trusted = spare.trusted = trusted
        kind, itemsize = self.dtype.kind, self.dtype.itemsize
        # A datetime's unit, and a V<n> beside a structured dtype of the same size, are not
        # told apart by the kind letter and item size alone.
        exact = self.dtype if kind in "MmV" else None
        taken = 0
        try:
            while not _native.ragged_collect(it, chunk, kind, itemsize, _RAGGED_CHUNK_RECORDS,
                                             _RAGGED_CHUNK_BYTES, self._fix_record,
                                             first + taken, exact, self.dtype):
                taken += chunk.count
                advance(chunk.count)
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
            advance(chunk.count)
            self._flush(chunk)

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
            self._handle.append_chunk(chunk)
            release_mapped_pages(*chunk.mapped)
        finally:
            chunk.clear()


# The folder a store created for a URL is written in before its upload (in cache_dir, or
# TMPDIR), with a hex name after it, locked beside it while its writer lives.
CREATE_STAGING_PREFIX = "zrecord-create-"


class _Staged:
    """The local staging of a store created for a URL (module docstring): checked at create,
    uploaded at close()."""

    def __init__(self, url: str, storage_options: StorageOptions | None) -> None:
        check_destination(url, storage_options=storage_options)
        self.url = url
        self.storage_options = storage_options
        parent = storage_settings(storage_options).cache_dir
        if parent is not None:
            # Absolute: the upload at close() must find it whatever the working folder is then.
            parent = os.path.abspath(fspath(parent))
            os.makedirs(parent, exist_ok=True)
        # A folder of this process's own (mode 0700), locked beside it for the writer's life,
        # so that the next create by URL there removes one whose process was killed (its
        # store may be gigabytes); the native writer makes its temporary beside `store`.
        self._private = PrivateFolder(parent, CREATE_STAGING_PREFIX)
        self.folder = self._private.name
        self.store = os.path.join(self.folder, "store")

    def publish(self) -> None:
        """Upload the published staged store to the URL; remove it once it is there."""
        try:
            publish(self.store, self.url, storage_options=self.storage_options)
        except BaseException as exc:
            if published_before(exc):  # interrupted once its header had landed: uploaded
                self.remove()
                raise
            self._private.keep()  # not reaped: the user is told where it is
            kept = (f"{redact(self.url)} was not published: the store written for it is kept "
                    f"at {self.store!r}; close() again uploads it, or publish it from there "
                    f"once the cause is fixed (zrecord.publish(path, url), or `zrecord publish "
                    f"PATH URL`), or delete {self.folder!r}")
            restate(exc, kept)
            raise
        self.remove()

    def remove(self) -> None:
        self._private.cleanup()
        shutil.rmtree(self.folder, ignore_errors=True)  # kept after a failed upload


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
