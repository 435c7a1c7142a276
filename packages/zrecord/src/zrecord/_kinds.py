"""The two kinds of store, :class:`Dense` and :class:`Ragged`, and the types that a kind's
readers and writers share.

Invariants of this module:
- A store is read through a reader and built through a writer, never both: ``Dense.open``
  returns a :class:`~zrecord.DenseReader` (indexing, iteration, ``verify``; no ``append``) and
  ``Dense.create`` a :class:`~zrecord.DenseWriter` (``append``; ``close()`` publishes; no
  indexing). A type checker therefore refuses ``Dense.open(p).append(x)`` and
  ``Dense.create(...)[0]`` before they run; at run time both raise ``ModeError``.
- Readers and writers of a kind are both instances of it: ``isinstance(x, Dense)`` says which
  kind of store `x` is, ``isinstance(x, DenseReader)`` whether it can be read.
- This module imports neither the reader nor the writer module at import time: both derive
  their classes from the kinds here, so ``create`` and ``open`` import them when called.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, SupportsIndex, TypeVar

import numpy as np

from zrecord._types import (
    CacheMode,
    Codec,
    DictBytes,
    DTypeLike,
    IndexCache,
    ItemShape,
    StorageOptions,
    StoreLocation,
    Validate,
)

if TYPE_CHECKING:
    from zrecord._reader import DenseReader, RaggedReader
    from zrecord._writer import DenseWriter, RaggedWriter

_Self = TypeVar("_Self", bound="_Kind")


class _Kind(ABC):
    """What every reader and writer of a store has: the schema, a length and a lifetime."""

    path: str
    """The store's path, as a string."""
    dtype: np.dtype[Any]
    """The NumPy dtype of every record."""
    ndim: int
    """The rank of every record: ``len(item_shape)`` for Dense, 1..32 for Ragged."""
    codec: str
    """How records are stored: ``"raw"``, ``"zstd"`` or ``"zstd_dict"``."""
    data_shards: int
    """The number of shard files (data-NNN.zrd) the records are spread over (1..255)."""

    def __new__(cls: type[_Self], *args: Any, **kwargs: Any) -> _Self:
        if cls in (Dense, Ragged):
            # Before readers had their own type, Dense(path) opened a reader.
            raise TypeError(f"{cls.__name__} is a kind of store, not a store: read one with "
                            f"{cls.__name__}.open(path) or write one with "
                            f"{cls.__name__}.create(...); got {cls.__name__}(...)")
        return super().__new__(cls)

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once the reader or writer is closed (a writer also once aborted)."""

    @abstractmethod
    def close(self) -> None:
        """A reader releases the store; a writer publishes it (see each type)."""

    @abstractmethod
    def __len__(self) -> int:
        """The number of records: stored (a reader) or appended so far (a writer)."""

    def __enter__(self: _Self) -> _Self:
        return self

    @abstractmethod
    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        """Close on leaving ``with`` (a writer that leaves by an exception aborts instead)."""


class Dense(_Kind):
    """A Dense store: one fixed-shape array per record.

    Create one with :meth:`Dense.create` (an append-only :class:`~zrecord.DenseWriter`), read
    one with :meth:`Dense.open` (a read-only :class:`~zrecord.DenseReader`). Both are
    instances of ``Dense``.
    """

    item_shape: tuple[int, ...]
    """The shape of every record (``()`` for scalar records)."""

    @classmethod
    def create(cls, path: StoreLocation, dtype: DTypeLike, item_shape: ItemShape, *,
               codec: Codec, data_shards: SupportsIndex = 4, dict_bytes: DictBytes | None = None,
               sync: bool = True, index_cache: IndexCache = "auto",
               storage_options: StorageOptions | None = None,
               index_parts: bool = True) -> DenseWriter:
        """Start a new Dense store at `path` (which must not exist): a local path, or an
        ``s3://bucket/prefix`` URL.

        `dtype` and `item_shape` are the schema and are never inferred. `codec` is required:
        ``"raw"``, ``"zstd"`` or ``"zstd_dict"`` (with `dict_bytes`). `data_shards` (1..255)
        sets write parallelism. `sync=False` skips flushing to stable storage before
        publishing (the store is still published atomically). Nothing appears at `path` until
        the writer's ``close()``, which then also writes the compact index of a store of
        65,536 records or more to the index cache folder `index_cache` (as in
        :meth:`Dense.open`; None for none), so that the first reader on this host need not
        validate the index.

        With a URL, `create` first checks that a store may be published there (a prefix that
        holds a store raises ``StoreExistsError`` now, not after the write), the store is
        written in a private temporary folder (under ``storage_options["cache_dir"]`` when
        given), and ``close()`` uploads it as :func:`zrecord.publish` does (verified, header
        last, never over a published store), then removes the local copy. ``abort()``, or an
        exception inside ``with``, publishes nothing and removes it; a failed upload keeps
        it, and its error says where. `storage_options` as in :meth:`Dense.open` (given with
        a local path they are an error). ``http(s)://`` URLs and schemes zrecord does not
        read (``gs://``, ...) raise ``ValueError``.

        ``index_parts=True``, the default, writes the store as format 1.2 with index parts
        (spec §4.1: ``index.zrs`` and the header's group sums), which let a reader check any
        part of the index without reading the rest; :func:`zrecord.publish` uploads them and
        reading by URL reads them (judging the whole index at open, as a local open does).
        Readers of format 1.1 (zrecord before 1.2 of the format) refuse such a store as
        unsupported: ``index_parts=False`` writes a store they read (format 1.0, or 1.1 for
        its dtypes), without ``index.zrs``.
        """
        from zrecord._writer import DenseWriter

        return DenseWriter(path, dtype, item_shape, codec, data_shards, dict_bytes, sync,
                           index_cache, storage_options, bool(index_parts))

    @classmethod
    def open(cls, path: StoreLocation, *, cache: CacheMode = "auto",
             index_cache: IndexCache = "auto", validate: Validate = "cached",
             storage_options: StorageOptions | None = None) -> DenseReader:
        """Open the published Dense store at `path` for reading: a local path, or the URL of a
        store in object storage (``s3://bucket/prefix``) or on a web server (``https://...``).

        `cache` says how records reach memory. ``"auto"`` (the default) reads through the
        page cache, so that later epochs of a dataset that fits in RAM read from memory;
        batches found cold are read from disk many records at a time. ``"bypass"`` reads
        records of 32 KiB or more (and every record of a store whose records average that)
        with O_DIRECT, around the page cache: for datasets larger than RAM, whose pages would
        only push other data out. It fails with an OSError where the file system refuses
        O_DIRECT. See "Cold data and datasets larger than RAM" in the zrecord guide.

        `index_cache` is the folder where readers of this host keep the compact indexes they
        build (a few bytes per record, shared by every process of the user that opens the
        store): the first open of a store of 65,536 records or more
        (``ZRECORD_INDEX_CACHE_RECORDS_MIN``) validates its whole index and writes its compact
        index there; later opens map that file instead, if this user made it (spec §9.5).
        ``"auto"`` (the default) is the folder ``ZRECORD_INDEX_CACHE`` names (``off`` for
        none), else ``~/.cache/zrecord/index``; None keeps the compact index in this
        process's memory. A folder that cannot be written is no error; it is kept within
        ``ZRECORD_INDEX_CACHE_BYTES`` (16 GiB by default), files of stores that are gone first. `validate` is ``"cached"`` (the default: trust such a file when
        the index it was built from is the same file, unchanged) or ``"full"`` (read and
        validate index.zri anyway, and write the file anew). A store with index parts (format
        1.2, ``create(..., index_parts=True)``) for which no such file fits is read **by
        part** with ``"cached"``: open checks the header and the sizes of ``index.zri`` and
        ``index.zrs`` and nothing else of the index, whatever the store's size, and each read
        first checks the index blocks of its records (256 entries each, once per block), so
        that a damaged block fails every read of its records, naming it, and no other read
        (spec §9.6); nothing is written to the folder then. ``"full"`` checks its whole index
        at open (and writes the file). :meth:`verify` checks the whole index either way. See
        "Large stores: the index" in the zrecord guide.

        A URL is read by byte range (the ``remote`` extra's obstore client:
        ``pip install 'obstore>=0.12.1,<0.13'``): open fetches the
        header and the index, and each gather fetches the records it lacks, neighbours
        coalesced, many requests in flight, each checked against its checksum as a local read
        is. `storage_options` configures it: ``endpoint_url`` (an S3-compatible server),
        ``region``, ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``
        (else the ``AWS_*`` environment variables, else ``~/.aws/credentials``, else the
        instance metadata service), ``skip_signature`` (True: unsigned requests, for a public
        bucket), ``cache_dir`` (a folder where processes of the host share what was fetched;
        default: a private temporary folder removed at ``close()``), ``cache_bytes`` (the most
        bytes the fetched records may take on disk there, at least 4 MiB; the parts needed
        farthest ahead, or least recently used, are evicted; default: no bound), ``link`` (the
        request cost model's: ``"s3-standard"``, ``"s3-express"``, ``"gcs-standard"`` or a
        ``zrecord.Link``; default: none), ``max_in_flight`` (``"auto"``: 64, or with a link
        ``Link.in_flight`` of the mean stored record), ``gap_bytes`` (``"auto"``: the mean
        stored record, at most 64 KiB, or with a link ``Link.join_gap()``),
        ``request_bytes_max`` (8 MiB),
        ``timeout_s`` (30), ``connect_timeout_s`` (5), ``retries`` (20) and
        ``retry_timeout_s`` (60). A server that refuses the connection, or whose name does not
        resolve, fails at once when it has never answered. ``remote_stats()`` says what open
        and the reads fetched. See the object-storage guide.
        """
        from zrecord._reader import DenseReader

        return DenseReader(path, cache=cache, index_cache=index_cache, validate=validate,
                           storage_options=storage_options)


class Ragged(_Kind):
    """A Ragged store: arrays of one dtype and rank whose shapes vary per record.

    Create one with :meth:`Ragged.create` (an append-only :class:`~zrecord.RaggedWriter`),
    read one with :meth:`Ragged.open` (a read-only :class:`~zrecord.RaggedReader`). Both are
    instances of ``Ragged``.
    """

    @classmethod
    def create(cls, path: StoreLocation, dtype: DTypeLike, ndim: SupportsIndex, *,
               codec: Codec, data_shards: SupportsIndex = 4, dict_bytes: DictBytes | None = None,
               sync: bool = True, index_cache: IndexCache = "auto",
               storage_options: StorageOptions | None = None,
               index_parts: bool = True) -> RaggedWriter:
        """Start a new Ragged store at `path` (which must not exist): a local path, or an
        ``s3://bucket/prefix`` URL, uploaded at ``close()`` as in :meth:`Dense.create`.

        `dtype` and `ndim` (1..32) are the schema; every axis of every record may vary, zero
        included. Other arguments as in :meth:`Dense.create`.
        """
        from zrecord._writer import RaggedWriter

        return RaggedWriter(path, dtype, ndim, codec, data_shards, dict_bytes, sync, index_cache,
                            storage_options, bool(index_parts))

    @classmethod
    def open(cls, path: StoreLocation, *, cache: CacheMode = "auto",
             index_cache: IndexCache = "auto", validate: Validate = "cached",
             storage_options: StorageOptions | None = None) -> RaggedReader:
        """Open the published Ragged store at `path` (a local path or a URL) for reading; the
        arguments as in :meth:`Dense.open`."""
        from zrecord._reader import RaggedReader

        return RaggedReader(path, cache=cache, index_cache=index_cache, validate=validate,
                            storage_options=storage_options)
