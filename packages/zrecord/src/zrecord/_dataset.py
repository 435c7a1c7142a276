"""Datasets of many stores (spec §12): ``open_dataset``, ``publish_dataset``,
``extend_dataset`` and ``dataset_versions``.

A dataset is a folder (or an object prefix) that holds published stores, its *parts*, and one
manifest per version (``dataset-00000001.zrm``, ...), each an immutable list of parts in order
(``_manifest``). Record ``i`` of a version is record ``i - start(k)`` of its part ``k``.

Invariants of this module:
- Opening judges the manifest whole, then opens every part in order and checks it against its
  entry (header checksum, counts, schema: spec §12.4 step 4) before any record is read; a part
  that changed since the manifest was published is refused, never read.
- A batch is gathered straight into one output, each part writing its records at their rows
  (the core's gather at output offsets): no copy besides the one a store's own gather makes.
- A manifest is published by creating its file where none exists (a hard link of a complete,
  flushed temporary file locally; a conditional create in object storage), so two writers of
  one version never both succeed and no reader sees a partial manifest. Published manifests
  and the parts they name are never modified: a new version is a new manifest.
- A dataset's ``digest`` is its manifest's (``_manifest.digest_of``): the DataLoader's resume
  check, ``Sampler`` and ``Mix`` see one identity, which any change of a part or of the
  order changes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar, cast

import numpy as np

from zrecord import _manifest, _native
from zrecord._dtypes import KIND_DENSE, KIND_RAGGED
from zrecord._index import index_error, normalise
from zrecord._index_cache import AUTO
from zrecord._kinds import Dense, Ragged
from zrecord._manifest import Manifest, Part, Schema
from zrecord._mirror_cache import BUDGET_MIN_BYTES, parse_budget
from zrecord._objects import Client, is_url, redact, storage_settings
from zrecord._paths import HEADER_NAME, store_location
from zrecord._pool import BlockPool
from zrecord._progress import human_bytes
from zrecord._reader import DenseReader, RaggedReader, open_store, ragged_records, verify_range
from zrecord._types import CacheMode, IndexCache, StorageOptions, StoreLocation, Validate
from zrecord.errors import (
    ChecksumError,
    ClosedError,
    CorruptStoreError,
    FormatError,
    LimitError,
    NotPublishedError,
    SchemaError,
    StoreChangedError,
    StoreExistsError,
    StoreIndexError,
    StoreNotFoundError,
    StoreOSError,
    ZrecordError,
)

_Reader = DenseReader | RaggedReader
_Batch = TypeVar("_Batch")

# Parts of a dataset by URL are opened (and read) this many at a time.
_OPEN_THREADS = 16
# Names per listing request of a dataset's prefix (S3's own page).
_LIST_PAGE = 1000
# A local gather across parts of at least this many output bytes runs on two threads: the
# core's own threshold for gathering one batch on more than one (gather.zig).
_PARALLEL_BYTES = 4 << 20
# A local gather that took longer than this per record, plus this per KiB, waited for the
# device: the rule by which the core's probe judges a store's first records (readahead.zig,
# `slow`), here applied to a whole batch across parts.
_SLOW_NS_PER_RECORD = 8_000
_SLOW_NS_PER_KIB = 1_000
_clock = time.perf_counter_ns


class _Location:
    """Where a dataset lies: a local folder or a URL prefix, and how to read its objects."""

    def __init__(self, path: StoreLocation, storage_options: StorageOptions | None) -> None:
        where = store_location(path, storage_options, role="the dataset")
        self.url = is_url(where)
        self.root = where.rstrip("/") if self.url else os.path.abspath(where)
        self.shown = redact(self.root) if self.url else where
        self.client = Client(self.root, storage_settings(storage_options)) if self.url else None

    def join(self, name: str) -> str:
        return f"{self.root}/{name}" if self.url else os.path.join(self.root, name)

    def versions(self) -> list[int]:
        """The versions whose manifests lie in the dataset, ascending."""
        if self.client is not None:
            if not self.root.startswith("s3://"):
                raise ValueError(f"{self.shown}: a web server cannot list a dataset's versions; "
                                 "give version= (or the URL of a manifest, .../dataset-NNNNNNNN.zrm)")
            names = self._listed_manifests()
        else:
            names = self._local_names()
        found = (_manifest.version_of(name) for name in names)
        return sorted(v for v in found if v is not None)

    def _listed_manifests(self) -> list[str]:
        """S3 lists by name, so the manifests come first after "dataset-": pages of names from
        there until a page is short or reaches past the last name a manifest can have (one
        request for up to 1,000 versions). Other names may sort among the manifests'
        (``dataset-00000999.zrm.bak`` between versions 999 and 1,000): a page ending in one
        is not the end of the manifests."""
        assert self.client is not None
        names: list[str] = []
        after = "dataset-"
        last = _manifest.file_name(_manifest.VERSION_MAX)
        while True:
            page = self.client.listed(_LIST_PAGE, after=after)
            names += [n for n in page if _manifest.version_of(n) is not None]
            if len(page) < _LIST_PAGE or page[-1] >= last:
                return names
            after = page[-1]

    def _local_names(self) -> list[str]:
        try:
            return os.listdir(self.root)
        except FileNotFoundError:
            raise StoreNotFoundError(errno.ENOENT, f"no dataset at {self.shown!r}: nothing "
                                     "there [ZR-DS-001]") from None
        except NotADirectoryError:
            raise NotPublishedError(f"{self.shown!r} is not a dataset: it is not a folder "
                                    "[ZR-DS-001]") from None

    def read(self, name: str) -> bytes:
        """The bytes of manifest `name` (a regular file, never through a symbolic link)."""
        if self.client is not None:
            try:
                return self.client.get(name)[0]
            except FileNotFoundError:
                raise StoreNotFoundError(errno.ENOENT, f"{self.client.where(name)}: no such "
                                         "manifest [ZR-DS-002]") from None
        path = self.join(name)
        # Non-blocking, so that a FIFO (or a device) in the manifest's place is refused by its
        # type below instead of blocking the open until a writer comes (spec §11).
        flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            raise StoreNotFoundError(errno.ENOENT, f"{path}: no such manifest [ZR-DS-002]") from None
        except NotADirectoryError:  # [ZR-GEN-005]: the dataset's path is not a folder
            raise NotPublishedError(f"{self.shown!r} is not a dataset: it is not a folder "
                                    "[ZR-DS-001]") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CorruptStoreError(f"{path}: a manifest must be a regular file, not a "
                                        "symbolic link [ZR-DS-002]") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise CorruptStoreError(f"{path}: a manifest must be a regular file [ZR-DS-002]")
        with os.fdopen(fd, "rb") as f:
            return f.read(_manifest.SIZE_MAX + 1)


def _located(path: StoreLocation, version: int | None,
           storage_options: StorageOptions | None) -> tuple[_Location, int | None]:
    """The dataset's location and the version asked for: a path or URL that ends in a
    manifest's name names its folder and that version."""
    text = store_location(path, storage_options, role="the dataset")
    head, _, tail = text.rstrip("/").rpartition("/") if is_url(text) else \
        (os.path.dirname(text), "/", os.path.basename(text))
    named = _manifest.version_of(tail)
    if named is not None:
        head = head or "."  # a manifest's bare name: in the working folder
        if version is not None and version != named:
            raise ValueError(f"{text!r} names version {named}, and version={version} was given")
        return _Location(head, storage_options), named
    return _Location(path, storage_options), version


def read_manifest(where: _Location, version: int | None) -> Manifest:
    """Steps 2 and 3 of spec §12.4: the manifest of `version` (the latest when None), judged."""
    if version is None:
        versions = where.versions()
        if not versions:
            store = "" if where.url or not os.path.exists(where.join(HEADER_NAME)) else \
                " (it is one store: open it with zrecord.open_store)"
            raise NotPublishedError(f"{where.shown!r} holds no dataset manifest "
                                    f"(dataset-NNNNNNNN.zrm){store} [ZR-DS-002]")
        version = versions[-1]
    name = _manifest.file_name(version)
    return _manifest.decode(where.read(name), where.join(name) if not where.url else
                            f"{where.shown}/{name}", version)


def named_parts(path: StoreLocation, storage_options: StorageOptions | None = None) -> set[str]:
    """The names of the parts that any version of the dataset at `path` names (its
    manifests read and judged; no part opened)."""
    where = _Location(path, storage_options)
    return {p.name for v in where.versions() for p in read_manifest(where, v).parts}


def latest_manifest(path: StoreLocation, storage_options: StorageOptions | None) -> Manifest:
    """The latest version's manifest of the dataset at `path`, judged; no part is opened."""
    return read_manifest(_Location(path, storage_options), None)


def _open_part(where: _Location, k: int, part: Part, schema: Schema, shown: str,
               options: dict[str, Any]) -> _Reader:
    """Step 4 of spec §12.4 for part `k`: the store opened and checked against its entry."""
    label = f"{shown}: part {k} ({part.name!r})"
    try:
        store = open_store(where.join(part.name), **options)
    except (StoreNotFoundError, NotPublishedError) as exc:
        raise CorruptStoreError(f"{label} is not a published store: {exc} [ZR-DS-011]") from None
    except (FormatError, LimitError) as exc:
        raise type(exc)(f"{label}: {exc}") from None
    except StoreOSError as exc:  # permission denied, an I/O error: the type and errno kept
        said = exc.strerror if exc.strerror is not None else str(exc)
        raise type(exc)(exc.errno, f"{label}: {said}") from exc
    info = store._info
    problem: FormatError | None = None
    if int(info["header_checksum"]) != part.header_checksum:
        problem = ChecksumError(f"{label} is another store than the manifest names: its header "
                                f"checksum is {int(info['header_checksum']):016x}, the manifest's "
                                f"{part.header_checksum:016x} (a part replaced, moved or "
                                "rewritten) [ZR-DS-011]")
    elif (len(store), store.stored_bytes) != (part.records, part.stored_bytes):
        problem = CorruptStoreError(f"{label} holds {len(store):,} records and {store.stored_bytes:,} "
                                    f"stored bytes; the manifest says {part.records:,} and "
                                    f"{part.stored_bytes:,} [ZR-DS-011]")
    elif Schema.of_info(info) != schema:
        problem = CorruptStoreError(f"{label} is a {Schema.of_info(info).describe()} store; the "
                                    f"dataset is {schema.describe()} [ZR-DS-011]")
    if problem is not None:
        store.close()
        raise problem
    return store


def budget_shares(budget: int, stored_bytes: Sequence[int]) -> list[int]:
    """The ``cache_bytes`` of each part's mirror when a dataset of parts of `stored_bytes`
    shares `budget` (at least BUDGET_MIN_BYTES per part): each gets BUDGET_MIN_BYTES (what one
    mirror needs for the batches being read) and the rest in proportion to its stored bytes,
    rounded down, so that the shares never add up to more than the budget."""
    parts = len(stored_bytes)
    spare = budget - BUDGET_MIN_BYTES * parts
    total = sum(stored_bytes)
    return [BUDGET_MIN_BYTES + (spare * b // total if total else spare // parts) for b in stored_bytes]


def _part_budgets(shown: str, manifest: Manifest, budget: Any) -> list[int] | None:
    """The parts' shares of a ``cache_bytes`` budget given for the dataset (None: none)."""
    budget = parse_budget(budget)
    parts = len(manifest.parts)
    if budget is None:
        return None
    if budget < BUDGET_MIN_BYTES * parts:
        raise ValueError(f"{shown}: storage option cache_bytes {human_bytes(budget)} cannot be "
                         f"shared by its {parts} parts: each part's mirror needs at least "
                         f"{human_bytes(BUDGET_MIN_BYTES)}, so a budget of at least "
                         f"{human_bytes(BUDGET_MIN_BYTES * parts)} ({BUDGET_MIN_BYTES * parts} "
                         "bytes)")
    return budget_shares(budget, [p.stored_bytes for p in manifest.parts])


def _open_parts(where: _Location, manifest: Manifest, shown: str, options: dict[str, Any],
                budgets: list[int] | None = None) -> list[_Reader]:
    """Every part, opened and checked in order (with `budgets`, part k's mirror bounded by
    budgets[k]); the first failure in part order is raised and nothing stays open. By URL,
    parts are opened several at a time."""
    jobs = [(k, part, options if budgets is None else
             {**options, "storage_options": {**options["storage_options"], "cache_bytes": budgets[k]}})
            for k, part in enumerate(manifest.parts)]
    if not where.url or len(jobs) == 1:
        stores: list[_Reader] = []
        try:
            for k, part, opts in jobs:
                stores.append(_open_part(where, k, part, manifest.schema, shown, opts))
        except BaseException:
            for store in stores:
                store.close()
            raise
        return stores
    with ThreadPoolExecutor(min(_OPEN_THREADS, len(jobs))) as pool:
        futures = [pool.submit(_open_part, where, k, p, manifest.schema, shown, opts)
                   for k, p, opts in jobs]
        failed = next((f.exception() for f in futures if f.exception() is not None), None)
    if failed is not None:
        for future in futures:
            if future.exception() is None:
                future.result().close()
        raise failed
    return [f.result() for f in futures]


class _Dataset(Generic[_Batch]):
    """What Dense and Ragged datasets share: the parts, the record numbering across them, and
    the reads that split a batch among them."""

    _kind: int
    _kind_name: str

    def __init__(self, where: _Location, manifest: Manifest, parts: list[_Reader],
                 reopen: dict[str, Any]) -> None:
        self.path = where.shown
        """The dataset's folder (or URL prefix), as given."""
        self.version = manifest.version
        """The version of the dataset this reader reads (its manifest's number)."""
        self.parts: tuple[_Reader, ...] = tuple(parts)
        """The parts, opened, in order: stores of one schema."""
        self.part_names: tuple[str, ...] = tuple(p.name for p in manifest.parts)
        """The parts' names, relative to the dataset's folder, in order."""
        self._manifest = manifest
        self._reopen = reopen
        first = parts[0]
        self.dtype = first.dtype
        self.ndim = first.ndim
        self.codec = first.codec
        counts = np.array([p.records for p in manifest.parts], dtype=np.uint64)
        # Record numbers where each part starts, and one past the last record.
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint64)
        self._len = int(self._starts[-1])
        self._closed = False
        self._pool = BlockPool()
        # The parts' native readers, for batches that span parts (one native call each); by
        # URL each part's mirror fetches first, so those gathers go part by part instead.
        self._native = _native.Parts([p._handle for p in parts], self._starts)
        self._remote = any(p._remote is not None for p in parts)
        # Whether the last local batch was found cold (hinted, or read slower than the page
        # cache reads): the next one is then sampled and, found cold, hinted across all its
        # parts before it is read, as one store hints its whole batch (_gather_parts). True at
        # first, as a store's reader starts out expecting cold data: a first batch found warm
        # costs a sample. Written by gathers on any thread; a stale value costs a sample, a
        # hint or a slow batch, never a wrong record.
        self._cold = True
        # The second thread of a large local gather that spans parts (made on first use).
        self._helper: ThreadPoolExecutor | None = None
        self._helper_lock = threading.Lock()

    # -- identity and description ------------------------------------------------------------

    @property
    def digest(self) -> str:
        """The dataset's identity, 16 hex digits: XXH64 of its parts' header checksums in
        order (spec [ZR-DS-012]). Equal digests mean the same records in the same order; a
        part replaced, added, removed or moved gives another digest, so a loader state saved
        on one version of a dataset is refused on another."""
        return self._manifest.digest

    @property
    def closed(self) -> bool:
        """True after ``close()``: every part is released and reads raise ClosedError."""
        return self._closed

    @property
    def nbytes(self) -> int:
        """Logical (decoded) payload bytes of all records."""
        return sum(p.nbytes for p in self.parts)

    @property
    def stored_bytes(self) -> int:
        """Bytes the records occupy in the parts' shard files."""
        return self._manifest.stored_bytes

    @property
    def starts(self) -> tuple[int, ...]:
        """The number of each part's first record in the dataset, in part order."""
        return tuple(int(s) for s in self._starts[:-1])

    def info(self) -> dict[str, Any]:
        """Schema, version, counts and sizes, and each part's name, records and digest."""
        schema = self.parts[0].info()
        return {"path": self.path, "kind": self._kind_name, "dtype": schema["dtype"],
                "ndim": self.ndim, "item_shape": schema["item_shape"], "codec": self.codec,
                "version": self.version, "records": self._len, "logical_bytes": self.nbytes,
                "stored_bytes": self.stored_bytes, "digest": self.digest,
                "parts": [{"name": name, "records": len(p), "digest": p.digest}
                          for name, p in zip(self.part_names, self.parts)]}

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        state = "closed" if self._closed else (f"{self._len:,} records in {len(self.parts)} parts, "
                                               f"{human_bytes(self.stored_bytes)}")
        return (f"<{self._kind_name} dataset {self.path!r} v{self.version} {self.dtype} "
                f"{self._shape_text()} {self.codec}, {state}>")

    def _shape_text(self) -> str:
        return f"ndim={self.ndim}"

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Release every part. Later reads raise ClosedError."""
        if not self._closed:
            self._closed = True
            for part in self.parts:
                part.close()
            self._pool.close()
            with self._helper_lock:
                if self._helper is not None:
                    self._helper.shutdown(wait=True)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """A dataset pickles as what reopens it (its location, version and open options) and
        its digest: a process that unpickles it opens the same version again, and refuses
        parts that changed meanwhile (StoreChangedError)."""
        self._check_open()
        return (_reopen, (self._reopen, self.version, self.digest))

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the {self._kind_name} dataset {self.path!r} is closed")

    # -- reads -------------------------------------------------------------------------------

    def _plan(self, idx: np.ndarray) -> int | np.ndarray:
        """Where the records `idx` (in range, uint64, at least one) lie: the part, when one
        holds them all; else the batch's plan (_native.Parts), which _views reads."""
        n = idx.shape[0]
        plan = np.empty(2 * n + len(self.parts) + 1, np.uint64)
        one = self._native.plan(idx, n, plan)
        return one if one >= 0 else plan

    @staticmethod
    def _views(plan: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(order, bounds, local) of a plan of `n` records: `idx[order]` sorted by part
        (stable), part g's records at positions bounds[g]..bounds[g+1] of that order, `local`
        their numbers in their parts."""
        return plan[:n], plan[2 * n:], plan[n:2 * n]

    def _locations(self, recs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where records `recs` (distinct, ascending uint64, in range) lie, as a store's
        ``_locations`` says (for ``epoch_cost``): part k's shard j is "shard" k * 256 + j, so
        that records of two parts never count as one run."""
        self._check_open()
        n = recs.shape[0]
        shards, offsets, sizes = (np.zeros(n, np.uint64) for _ in range(3))
        for k, rows, local in self._split(recs):
            s, o, z = self.parts[k]._locations(local.astype(np.uint64))
            shards[rows] = s.astype(np.uint64) + np.uint64(k * 256)
            offsets[rows], sizes[rows] = o, z
        return shards, offsets, sizes

    def _split(self, idx: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(part, rows of `idx`, the records' numbers within the part) for each part that
        `idx` (in range, uint64) reads from, in part order."""
        if idx.shape[0] == 0:
            return
        plan = self._plan(idx)
        if isinstance(plan, int):
            yield plan, np.arange(idx.shape[0]), idx - self._starts[plan]
            return
        order, bounds, local = self._views(plan, idx.shape[0])
        for k, a, b in _groups(bounds):
            yield k, order[a:b], local[a:b]

    def __getitem__(self, key: Any) -> Any:
        self._check_open()
        idx = normalise(key, self._len, self.path)
        if isinstance(idx, int):
            k = int(np.searchsorted(self._starts, idx, side="right")) - 1
            return self.parts[k][idx - int(self._starts[k])]
        try:
            return self._read(idx)
        except StoreIndexError:  # Parts.plan, the one range check: name the position as given
            if int(idx.max()) >= self._len:
                raise index_error(idx, key, self._len, self.path) from None
            raise

    def _read(self, idx: np.ndarray) -> _Batch:
        raise NotImplementedError  # pragma: no cover - defined by subclasses

    def __iter__(self) -> Iterator[np.ndarray]:
        self._check_open()
        for part in self.parts:
            yield from part

    def verify(self, start: int = 0, stop: int | None = None) -> None:
        """Check every stored byte of records ``[start, stop)`` against its checksum, part by
        part in order."""
        self._check_open()
        start, stop = verify_range(start, stop, self._len)  # as a store's (was: 7.0 shown as 4.0)
        for k, part in enumerate(self.parts):
            lo, hi = int(self._starts[k]), int(self._starts[k + 1])
            if max(lo, start) < min(hi, stop):
                part.verify(max(lo, start) - lo, min(hi, stop) - lo)

    def prefetch(self, key: Any) -> None:
        """Read-ahead hints for records ``dataset[key]``, passed to their parts (see
        :meth:`zrecord.DenseReader.prefetch`)."""
        self._check_open()
        idx = normalise(key, self._len, self.path)
        idx = np.array([idx], dtype=np.uint64) if isinstance(idx, int) else idx
        if idx.shape[0] == 0:
            return
        try:
            plan = self._plan(idx)
        except StoreIndexError:  # Parts.plan, the one range check: name the position as given
            raise index_error(idx, key, self._len, self.path) from None
        if isinstance(plan, int):
            self.parts[plan].prefetch(idx - self._starts[plan])
            return
        if not self._remote:
            self._native.prefetch(plan, idx.shape[0])
            return
        _, bounds, local = self._views(plan, idx.shape[0])
        for k, a, b in _groups(bounds):
            self.parts[k].prefetch(local[a:b])

    def cache_cost(self, key: Any) -> int:
        """The bytes records ``dataset[key]`` take of their parts' mirrors (see
        :meth:`zrecord.DenseReader.cache_cost`)."""
        self._check_open()
        idx = normalise(key, self._len, self.path)
        idx = np.array([idx], dtype=np.uint64) if isinstance(idx, int) else idx
        idx = idx[idx < self._len]
        return sum(self.parts[k].cache_cost(local) for k, _, local in self._split(idx))

    @property
    def cache_budget_bytes(self) -> int | None:
        """For a dataset opened by URL with a ``cache_bytes`` budget: what its parts' mirrors
        may hold on disk together (the sum of their shares, at most the budget); None
        otherwise."""
        budgets = [p.cache_budget_bytes for p in self.parts]
        return None if any(b is None for b in budgets) else sum(b for b in budgets if b is not None)

    def foresee(self, batch_of: Callable[[int], Any], progress: Callable[[], int | None]) -> Any:
        """Tell each part that takes it (opened by URL with a budget: see
        :meth:`zrecord.DenseReader.foresee`) its share of the future: the records of each step
        that lie in it, as its own record numbers. A handle whose ``close()`` closes theirs;
        None where no part took it."""
        self._check_open()
        handles = contextlib.ExitStack()  # its close() closes every part's handle
        told = 0
        for k, part in enumerate(self.parts):
            handle = part.foresee(_share_of(batch_of, int(self._starts[k]), int(self._starts[k + 1])),
                                  progress)
            if handle is not None:
                handles.callback(handle.close)
                told += 1
        return handles if told else None

    def remote_stats(self) -> dict[str, int] | None:
        """For a dataset opened by URL: its parts' ``remote_stats()`` added up; None for a
        local one."""
        stats = [p.remote_stats() for p in self.parts]
        if any(s is None for s in stats):
            return None
        total: dict[str, int] = {}
        for s in stats:
            for name, value in (s or {}).items():
                total[name] = total.get(name, 0) + value
        return total

    def _each_part(self, idx: np.ndarray, gather: Callable[[_Reader, np.ndarray, np.ndarray], None]) -> None:
        """By URL: `gather(part, rows, local)` for each part that `idx` reads from, their
        fetches at once."""
        jobs = list(self._split(idx))
        with ThreadPoolExecutor(min(_OPEN_THREADS, len(jobs))) as pool:
            for future in [pool.submit(gather, self.parts[k], rows, local) for k, rows, local in jobs]:
                future.result()

    def _gather_parts(self, plan: np.ndarray, n: int, out: np.ndarray,
                      offsets: np.ndarray | None, nbytes: int, size: int = 0,
                      sizes: np.ndarray | None = None) -> None:
        """Local parts: the batch of `n` records planned in `plan` into `out`, position j at
        byte offsets[j] (or j * `size`; a slot of sizes[j] bytes where given), in one native
        call (for a Ragged batch of raw parts, one call of the core over all the parts, not
        one per part: `_native.Parts.across`, `_native.Parts.gather`). When the last batch was
        cold, a Ragged batch of raw parts is sampled in that call and, found cold, hinted
        across the parts and read with pread; any other batch is hinted first
        (Parts.prefetch, whose one sample tells whether the batch is cold) when the last batch
        was cold, and when the core itself would gather the batch on more than one thread (at
        least _PARALLEL_BYTES): that one is gathered in two calls on two threads. A batch read
        without a hint that was slow marks the dataset cold: each part's own probe sees only
        its few records of a batch, and hinting them part after part leaves one part's reads
        in flight at a time (cold token batches over 64 parts: 0.6x one store's rate; hinted
        across the parts first, 0.96x). Hinted across the parts and then read by each part's
        own gather, each part sampled and hinted its records again (two system calls more a
        record: 0.64-0.78x on 2026-12-08), which the one call does not."""
        parallel = nbytes >= _PARALLEL_BYTES and len(self.parts) > 1
        if self._cold and not parallel and offsets is not None and sizes is not None:
            taken = self._native.across(plan, n, out, offsets, sizes, True)
            if taken:
                self._cold = taken == 2
                return
        hinted = False
        if self._cold or parallel:
            hinted = self._cold = self._native.prefetch(plan, n)
        if not parallel:
            start = _clock()
            self._native.gather(plan, n, out, offsets, size, sizes=sizes)
            if not hinted and _clock() - start > (
                    n * _SLOW_NS_PER_RECORD + nbytes // 1024 * _SLOW_NS_PER_KIB):
                self._cold = True
            return
        _, bounds, _ = self._views(plan, n)
        m = int(np.searchsorted(bounds, n // 2))  # parts [0, m) here, [m, ...) on the helper
        m = min(max(m, 1), len(self.parts) - 1)
        with self._helper_lock:
            if self._helper is None:
                self._helper = ThreadPoolExecutor(1, thread_name_prefix="zrecord-dataset")
            helper = self._helper
        later = helper.submit(self._native.gather, plan, n, out, offsets, size, m, sizes=sizes)
        try:
            self._native.gather(plan, n, out, offsets, size, 0, m, sizes=sizes)
        finally:
            later.result()


def _share_of(batch_of: Callable[[int], Any], lo: int, hi: int) -> Callable[[int], np.ndarray]:
    """The records of each step of `batch_of` in [lo, hi), numbered from lo."""
    def share(step: int) -> np.ndarray:
        idx = np.asarray(batch_of(step), dtype=np.int64)
        out: np.ndarray = idx[(idx >= lo) & (idx < hi)] - lo
        return out
    return share


def _groups(bounds: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(part, first, end) of each part that a plan's `bounds` give records (_Dataset._plan)."""
    for k in np.flatnonzero(np.diff(bounds)).tolist():
        yield k, int(bounds[k]), int(bounds[k + 1])


def _scatter(part: _Reader, local: np.ndarray, out: np.ndarray, offsets: np.ndarray) -> None:
    """Part `part`'s records `local` decoded into `out` at byte `offsets`, once its mirror
    holds them."""
    def gather(i: np.ndarray) -> None:
        part._handle.gather_ragged(i, i.shape[0], out, offsets)
    part._check_open()
    assert part._remote is not None
    part._remote.read(local, gather)


class DenseDataset(_Dataset[np.ndarray], Dense):
    """A version of a dataset of Dense parts (:func:`open_dataset`): ``ds[i]`` is record ``i``
    counted across the parts in order, ``ds[[i, j]]`` and slices a stacked array, as a
    :class:`DenseReader` reads one store."""

    _kind = KIND_DENSE
    _kind_name = "Dense"

    def __init__(self, where: _Location, manifest: Manifest, parts: list[_Reader],
                 reopen: dict[str, Any]) -> None:
        super().__init__(where, manifest, parts, reopen)
        self.item_shape: tuple[int, ...] = parts[0].item_shape  # type: ignore[union-attr]
        self._record_size = int(parts[0]._info["record_size"])

    def _shape_text(self) -> str:
        return str(self.item_shape)

    def _read(self, idx: np.ndarray) -> np.ndarray:
        if idx.shape[0] == 0:
            return self._pool.empty((0, *self.item_shape), self.dtype)
        plan = self._plan(idx)
        if isinstance(plan, int):
            return self.parts[plan]._read(idx - self._starts[plan])  # type: ignore[return-value]
        out = self._pool.empty((idx.shape[0], *self.item_shape), self.dtype)
        flat = out.reshape(-1).view(np.uint8) if out.size else out
        if self._remote:
            size = np.uint64(self._record_size)
            self._each_part(idx, lambda part, rows, local: _scatter(
                part, local, flat, rows.astype(np.uint64) * size))
            return out
        self._gather_parts(plan, idx.shape[0], flat, None, out.nbytes, self._record_size)
        return out


class RaggedDataset(_Dataset[list[np.ndarray]], Ragged):
    """A version of a dataset of Ragged parts (:func:`open_dataset`): ``ds[i]`` is record
    ``i`` counted across the parts in order with its own shape, a collection of indices a
    list of arrays."""

    _kind = KIND_RAGGED
    _kind_name = "Ragged"

    def shapes(self, key: Any = slice(None)) -> np.ndarray:
        """The shapes of the selected records, as an ``(n, ndim)`` int64 array (no data read)."""
        self._check_open()
        idx = normalise(key, self._len, self.path)
        idx = np.array([idx], dtype=np.uint64) if isinstance(idx, int) else idx
        if idx.shape[0] and int(idx.max()) >= self._len:
            raise index_error(idx, key, self._len, self.path)
        out = np.empty((idx.shape[0], self.ndim), dtype=np.int64)
        for k, rows, local in self._split(idx):
            out[rows] = self.parts[k].shapes(local)  # type: ignore[union-attr]
        return out

    def _read(self, idx: np.ndarray) -> list[np.ndarray]:
        n = idx.shape[0]
        if n == 0:
            return []
        plan = self._plan(idx)
        if isinstance(plan, int):
            return self.parts[plan]._read(idx - self._starts[plan])  # type: ignore[return-value]
        if self._remote:
            out: list[Any] = [None] * n

            def fetch(part: _Reader, rows: np.ndarray, local: np.ndarray) -> None:
                for row, record in zip(rows.tolist(), part._read(local)):
                    out[row] = record
            self._each_part(idx, fetch)
            return out
        shapes, sizes = np.empty((n, self.ndim), np.uint64), np.empty(n, np.uint64)
        if self._cold:  # each part's shapes judge its index parts: all of them asked for first
            self._native.hint_index(plan, n)
        self._native.shapes(plan, n, self.ndim, shapes, sizes)
        return ragged_records(self._pool, self.dtype, shapes, sizes, idx, self.path,
                              lambda flat, offsets: self._gather_parts(
                                  plan, n, flat, offsets, flat.nbytes, sizes=sizes))


def open_dataset(path: StoreLocation, *, version: int | None = None, cache: CacheMode = "auto",
                 index_cache: IndexCache = AUTO, validate: Validate = "cached",
                 storage_options: StorageOptions | None = None) -> DenseDataset | RaggedDataset:
    """Open a version of the dataset at `path` (a folder, or an ``s3://`` or ``http(s)://``
    prefix): the latest unless `version` is given (or `path` ends in a manifest's name,
    ``.../dataset-00000003.zrm``). Every part is opened and checked against the manifest
    (spec §12.4) with the other arguments, as :meth:`zrecord.Dense.open` takes them.

    A ``cache_bytes`` budget in `storage_options` bounds the parts' mirrors together: each
    part's mirror holds at most its share, 4 MiB plus a share of the rest in proportion to the
    part's stored bytes, so a dataset of N parts needs a budget of at least N x 4 MiB. The
    dataset's ``cache_budget_bytes`` is their sum, and ``foresee`` tells each part its share
    of a loader's future."""
    where, version = _located(path, version, storage_options)
    manifest = read_manifest(where, version)
    options = {"cache": cache, "index_cache": index_cache, "validate": validate,
               "storage_options": storage_options}
    shown = f"{where.shown} v{manifest.version}"
    parts = _open_parts(where, manifest, shown, options,
                        _part_budgets(shown, manifest, (storage_options or {}).get("cache_bytes")))
    cls = DenseDataset if manifest.schema.kind == KIND_DENSE else RaggedDataset
    reopen = {"path": where.root, **options}
    return cls(where, manifest, parts, reopen)


def _reopen(args: dict[str, Any], version: int, digest: str) -> DenseDataset | RaggedDataset:
    """The dataset a pickled reader stands for, opened again, if its digest is unchanged."""
    ds = open_dataset(args["path"], version=version, cache=args["cache"],
                      index_cache=args["index_cache"], validate=args["validate"],
                      storage_options=args["storage_options"])
    if ds.digest != digest:
        ds.close()
        raise StoreChangedError(errno.ESTALE, f"{ds.path!r} v{version} holds other parts than "
                                f"when it was pickled (digest {ds.digest}, pickled {digest})")
    return ds


def dataset_versions(path: StoreLocation, *,
                     storage_options: StorageOptions | None = None) -> list[int]:
    """The published versions of the dataset at `path`, ascending (an ``s3://`` prefix is
    listed; a web server cannot be)."""
    return _Location(path, storage_options).versions()


def _part_entry(where: _Location, name: str, storage_options: StorageOptions | None) -> tuple[Part, Schema]:
    """The manifest entry and schema of the published store `name` in the dataset."""
    problem = _manifest.name_problem(name)
    if problem is not None:
        raise ValueError(f"{name!r} cannot name a part of a dataset: {problem} (a part is named "
                         "by its path relative to the dataset's folder)")
    # By URL in a private mirror, removed at close: a header is all this reads, and a shared
    # cache_dir would keep a mirror of every part of every run for it.
    options = storage_options
    if where.url and storage_options is not None:
        options = cast(StorageOptions, {k: v for k, v in storage_options.items()
                                        if k not in ("cache_dir", "cache_bytes")})
    with open_store(where.join(name), storage_options=options) as store:
        info = store._info
        return (Part(name, len(store), store.stored_bytes, int(info["header_checksum"])),
                Schema.of_info(info))


def _part_name(where: _Location, part: Any) -> str:
    """A part given as its name in the dataset, or (local) as a path inside its folder: a
    name is what lies in the folder under it, else the path is taken from the working
    folder."""
    text = os.fspath(part) if not isinstance(part, str) else part
    if where.url:
        return text.rstrip("/")
    if not os.path.isabs(text):
        # "./a" and "sub/./c" as "a/" is: the name they spell (they were refused for their '.').
        name = os.path.normpath(text).replace(os.sep, "/")
        if os.path.lexists(where.join(name)) and not name.startswith("../") and name not in (".", ".."):
            return name
    rel = os.path.relpath(os.path.abspath(text), where.root)
    if rel == "." or rel.startswith(".."):
        raise ValueError(f"{text!r} lies outside the dataset's folder {where.shown!r}: a part "
                         "is a store inside it")
    return rel.replace(os.sep, "/")


def publish_dataset(path: StoreLocation, parts: Sequence[str | os.PathLike[str]], *,
                    version: int | None = None,
                    storage_options: StorageOptions | None = None) -> int:
    """Publish a version of the dataset at `path` made of the published stores `parts`, in
    order (their names in the dataset's folder or prefix, or local paths inside it), and
    return its version number: the one after the latest, or `version`, which must not exist.

    Each part is opened (its header judged) and must have the first one's schema (kind,
    dtype, item shape or rank, codec: ``SchemaError`` otherwise). The manifest is written
    complete and then created where no manifest of that version exists, so of two writers
    publishing one version, one gets ``StoreExistsError`` and nothing of its is published.
    Earlier versions stay as they are. See :func:`extend_dataset` to add parts to the latest."""
    where = _Location(path, storage_options)
    if version is not None:
        _manifest.file_name(version)  # an int in range, before any part is opened
    names = [_part_name(where, p) for p in parts]
    _check_part_list(where, names)
    entries = [_part_entry(where, name, storage_options) for name in names]
    first = entries[0][1]
    for name, (_, schema) in zip(names, entries):
        if schema != first:
            raise SchemaError(f"{where.shown!r}: part {name!r} is a {schema.describe()} store, "
                              f"part {names[0]!r} a {first.describe()} one: the parts of a "
                              "dataset share one schema")
    if version is None:
        known = where.versions()
        version = (known[-1] if known else 0) + 1
    manifest = Manifest(version, first, tuple(e[0] for e in entries))
    data = _manifest.encode(manifest)
    # What is published is what open_dataset will accept: the one reader of the format judges
    # the bytes before they exist anywhere (a limit the checks above missed is raised here).
    _manifest.decode(data, f"{where.shown!r}: version {version} to be published", version)
    _create_manifest(where, version, data)
    return version


def _check_part_list(where: _Location, names: list[str], earlier: int = 0) -> None:
    """Refuse a list of parts no manifest may hold (spec [ZR-DS-006], [ZR-DS-008]) before any
    part is opened; the first `earlier` names are the latest version's, kept by extend."""
    if not names:
        raise ValueError(f"{where.shown!r}: a dataset needs at least one part")
    if len(names) > _manifest.PARTS_MAX:
        kept = f" ({earlier:,} of them the latest version's)" if earlier else ""
        raise ValueError(f"{where.shown!r}: {len(names):,} parts given{kept}; a dataset has at "
                         f"most {_manifest.PARTS_MAX:,} (write larger parts)")
    first: dict[str, int] = {}
    for k, name in enumerate(names):
        if name in first:
            j = first[name]
            said = (f"is part {j} of the latest version already" if j < earlier else
                    f"is given as part {j} and again as part {k}")
            raise ValueError(f"{where.shown!r}: {name!r} {said}: a dataset names each part once "
                             "[ZR-DS-006]")
        first[name] = k


def extend_dataset(path: StoreLocation, parts: Sequence[str | os.PathLike[str]], *,
                   storage_options: StorageOptions | None = None) -> int:
    """Publish the next version of the dataset at `path`: the latest version's parts followed
    by `parts` (as :func:`publish_dataset` takes them); the version before stays readable as
    it was. Returns the new version. ``StoreExistsError`` when another writer published the
    next version first: run it again to add to that one."""
    where = _Location(path, storage_options)
    if not parts:
        # Was: a new version with the same parts and digest as the latest.
        raise ValueError(f"{where.shown!r}: extend_dataset needs at least one new part; got none")
    latest = read_manifest(where, None)
    names = [p.name for p in latest.parts] + [_part_name(where, p) for p in parts]
    _check_part_list(where, names, earlier=len(latest.parts))
    return publish_dataset(path, names, version=latest.version + 1,
                           storage_options=storage_options)


def _create_manifest(where: _Location, version: int, data: bytes) -> None:
    """Create manifest `version` with bytes `data` where none exists ([ZR-DS-013])."""
    name = _manifest.file_name(version)
    if where.client is not None:
        try:
            where.client.put(name, data, create=True, part_bytes=max(len(data), 1) + 1)
        except FileExistsError:
            raise StoreExistsError(errno.EEXIST, f"{where.shown}/{name}: version {version} of the "
                                   "dataset exists (another writer, or an earlier run, published "
                                   "it); nothing was written") from None
        return
    final = where.join(name)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.zr-tmp-", dir=where.root)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, final)
            except FileExistsError:
                raise StoreExistsError(errno.EEXIST, f"{final}: version {version} of the dataset "
                                       "exists (another writer, or an earlier run, published it); "
                                       "nothing was written") from None
        finally:
            os.unlink(tmp)
        dir_fd = os.open(where.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        if isinstance(exc, ZrecordError):
            raise
        # A full disk, a quota, a read-only folder: which file, and whether it was published.
        state = ("it is published, but its folder was not flushed to stable storage"
                 if os.path.lexists(final) else "nothing was published")
        raise StoreOSError(exc.errno or errno.EIO, f"cannot write version {version} of the "
                           f"dataset, {final!r}: {exc.strerror or exc}; {state}") from exc


__all__ = ["DenseDataset", "RaggedDataset", "dataset_versions", "extend_dataset", "open_dataset",
           "publish_dataset"]
