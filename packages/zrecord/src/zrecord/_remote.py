"""The mirror: stores read from object storage (``s3://``) and web servers (``http(s)://``) by
byte range.

A remote store is read through a *mirror*: a local folder laid out as a store, whose
``header.zrh`` is the store's and whose other files are sparse files of the sizes the header
gives, filled as gathers need them. The native reader opens the mirror as it opens any store,
so every check of the spec (§9) runs on what was fetched, and every record is checked against
its checksum when it is read, whatever the network did. This module holds I/O only: what a
header says of the files, which index parts a batch needs and where its records lie, the core
answers (``_native.header_layout``, ``Reader.index_wants``, ``Reader.locate``); requests go
through the object client (``_objects``), the mirror's files are opened as ``_mirror_files``
says, and opening a store by path or URL is ``_opening``'s.

Two paths (decision 0008):
- *By part* (a store with index parts, format 1.2, read without ``cache_bytes`` and without
  ``validate="full"``): open is one GET, of ``header.zrh``; the core judges the header from its
  bytes. A gather asks the core which index parts (sum groups of ``index.zrs``, index blocks of
  ``index.zri``) its records need and it has not judged, fetches those the mirror does not hold
  (``parts.bits``) in ranged GETs joined as records' are, then asks where the records lie
  (which judges those parts first, spec §9.6) and fetches the records. The first GET of each
  object checks the object's size against the header's (what open checks by HEAD on the other
  path: step 3 deferred to the object's first read) and learns its ETag; every later request
  carries ``If-Match`` with it. A part that fails its check in the mirror is fetched once more
  before its failure is the store's.
- *Whole* (a store without parts, or with a budget or ``validate="full"``): open asks every
  object's size and ETag (HEAD) and judges the sizes against the header's before any body is
  read, and fetches ``index.zri`` (and ``index.zrs``) when it makes the mirror, each in one GET
  streamed in pieces of ``_STREAM_BYTES``, so memory does not grow with the index. Every
  request after the HEADs carries ``If-Match`` with the ETag they gave.
  A store replaced under a reader fails its next fetch of an object whose ETag the reader knows
  (:class:`~zrecord.errors.StoreChangedError`), and an object replaced before its first fetch
  fails the checks of the index the header commits to; it is never mixed. By part, index
  parts that fail their checks twice are the store's failure unless header.zrh is no longer
  the object opened (asked then): a store replaced between open and its first read is a
  StoreChangedError, not a damaged store. The two paths keep
  separate mirrors of one store (the mirror's name says which).

Invariants of this module:
- A gather first fetches the records of its batch that the mirror does not hold: sorted by
  shard and offset, neighbours whose gap is at most ``gap_bytes`` coalesced into one ranged GET
  of at most ``request_bytes_max`` bytes, ``max_in_flight`` requests at once (with a budget,
  joined only where it has room for the gaps' bytes). A record is marked present (one bit per
  record, ``present.bits`` beside the mirror) only after its bytes are written: those asked
  for, and those numbered between them that lie wholly in the bytes a joined GET wrote. A
  failed fetch fails the whole gather, never returns part of a batch.
- A GET of at least ``WRITE_THREAD_BYTES`` is written to the mirror by one of the mirror's
  writer threads while the event loop goes on with the other GETs (in a BLOCKS epoch over the
  link the loop's thread was busy 75% of the time, 63% in the kernel, most of it that copy
  into the page cache). Its records are marked present after the write, as any other's, and
  ``close()`` waits for the writes under way before it closes the files they write.
- No byte is asked for twice at once: the GETs under way (``_flights``: the byte ranges each
  writes, gaps included) are counted as such when they are decided, under
  one lock (``_claim``), and a gather waits for those that write any of its records, a
  prefetch leaves those records out. (Two gathers whose requests joined through each other's
  records fetched 12-16% of an epoch of photographs twice.)
- With a reader's known future (``foresee``), each gather also prefetches the reads that
  ``Foresight.plan`` returns (segments of half the budget's bytes, while less than
  half is planned ahead), joined through their gaps, into the room the budget admits
  (``Foresight.room_after``), the runs read soonest first; what it cannot admit yet goes back
  to the foresight, which returns it with the next plan, and a gather whose GETs would join
  any of it fetches it with its own records when the budget has room for it by then
  (``_with_deferred``: a deferred block is fetched whole, not piece by piece by each gather).
- The native reader of a mirror checks every read of a record against its checksum, not only the
  first (ZR_OPEN_CHECK_EVERY_READ): the mirror's files change while it reads them. A record
  whose bytes there fail (a damaged or half-written mirror, or one punched out by an eviction
  meanwhile) is fetched once more, and once more for each chunk punched out of the mirror since
  the gather began, by any of its readers (at most ``_REFETCHES_MAX`` times); a record that
  fails after that is the store's own corruption.
- With ``cache_bytes`` the mirror's shard files hold at most that many bytes after each fetch:
  the least recently used chunks are punched out (``_mirror_cache``).
- ``prefetch`` starts the fetches of records a reader will read soon and does not wait; a
  gather that needs records whose prefetch is still under way waits for it (and for its
  failure fetches them itself), so no record is asked for twice at once by one reader.
- ``close()`` cancels the fetches under way and waits for them to end; a gather or prefetch
  that races it raises :class:`~zrecord.errors.ClosedError`, and none starts after it.
- Messages name the URL and the object, never the mirror's path, a credential or a query
  string (the core names the URL itself: the mirror's reader is opened with it as its name);
  a mirror that this user may not use is named by its ``cache_dir`` (or TMPDIR), with what to
  do.
- The mirror's files are opened without following links, relative to their folder's
  descriptor, and checked to be regular files of this user's with no other link (and of their
  sizes): fetches write through the descriptors opened at open, never through a name that a
  link may have taken since. A mirror whose files are not what it made (missing, damaged,
  links, its ``index.zri`` or ``index.zrs`` changed since written, as the identities recorded
  in ``index.id`` tell) is set aside (renamed, then removed) and made again from the store;
  one whose folder is another user's is an error naming the URL and ``cache_dir``.
- Without ``cache_dir`` the mirror is a private folder in TMPDIR, removed at ``close()`` by the
  process that opened it, which holds a lock beside it for its life: the folder of a process
  that died is removed by the next one that opens a private mirror. With one, processes of one
  user that open the same store (same URL, ETags and header) share one mirror, made in a
  temporary folder beside it and renamed into place; what a process that died left being made
  or set aside there is removed by the next opener (``reap``).
- By part, a bit of ``parts.bits`` is set only after its part's bytes are written, and the
  core never uses a part it has not judged; a verify fetches the whole index first.
- fork(): a child forked after reads (or during them, on other threads) reads what the mirror
  holds and closes its copy; it drops the parent's event loop, prefetches, locks and client on
  first use (``Mirror._adopt``). It cannot fetch (``_objects._client_runs`` says why and what
  to do instead, never waits forever).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno as _errno
import hashlib
import os
import stat
import tempfile
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any, NamedTuple, NoReturn, TypeVar

import numpy as np

from zrecord import _native
from zrecord._foresight import Foresight
from zrecord._index import distinct
from zrecord._mirror_cache import Budget, file_of, punches_since
from zrecord._mirror_files import (
    ASIDE_PREFIX,
    BUILD_PREFIX,
    NEW_FILE,
    NOFOLLOW,
    Damaged,
    Files,
    Foreign,
    PrivateFolder,
    discard,
    ident_of,
    identity_of,
    locked_name,
    open_dir,
    open_file,
    pwrite_all,
    read_all,
    read_small,
    reap,
    remove,
    unlock,
    write_new,
)
from zrecord._objects import MAX_IN_FLIGHT_DEFAULT, Client, StorageSettings, scrub
from zrecord.errors import (
    ChecksumError,
    ClosedError,
    CorruptStoreError,
    NotPublishedError,
    RemoteError,
    StoreChangedError,
    StoreNotFoundError,
    StoreOSError,
    ZrecordError,
)

# The largest valid header (spec §8), from the core: a header.zrh larger than this is refused
# from its first bytes, never read whole. Everything else the mirror knows of the format it asks
# the core (`_native.header_layout`, `Reader.index_wants`, `Reader.locate`).
HEADER_SIZE_BYTES_MAX: int = _native.CONSTANTS["ZR_HEADER_SIZE_BYTES_MAX"]
# Index parts' files (zrecord.h ZR_PART_*), by what `Reader.index_wants` calls them.
_PART_GROUPS = _native.CONSTANTS["ZR_PART_GROUPS"]
_PART_FILES = {_native.CONSTANTS["ZR_PART_BLOCKS"]: "index.zri", _PART_GROUPS: "index.zrs"}

GAP_AUTO_MAX = 64 << 10
# Objects listed under a prefix that holds no header.zrh (one request: S3 lists 1,000 keys a
# page), and shown of them.
_LISTED_MAX = 1000
_SHOWN_MAX = 5
# The most times one gather fetches one record again after its bytes in the mirror failed.
_REFETCHES_MAX = 8
# The most records numbered between those a GET was made for that it looks at (_inside).
_BETWEEN_MAX = 1 << 20
# What one prefetch call fetches at most (the local prefetch's bounds, readahead.zig).
PREFETCH_RECORDS_MAX = 16 << 10
PREFETCH_BYTES_MAX = 64 << 20
# header.zrh, index.zri and index.zrs reach the mirror in pieces of about this size: what open
# holds of them in memory, whatever the index's size.
_STREAM_BYTES = 1 << 20
# A GET of at least this many bytes is written to the mirror by one of WRITE_THREADS threads,
# not on the event loop (module docstring). Smaller ones are written on the loop: for 147 KiB
# photographs read at random the hand-over cost more than it freed (392-413 MiB/s against
# 461-477, bench_remote.py remote_deep, 2026-12-06).
WRITE_THREAD_BYTES = 1 << 20
WRITE_THREADS = 2
# The mirror's name in its folder is a hash of this, the user, the URL, the ETags and the header.
_KEY_VERSION = "zrecord-mirror-2"
_T = TypeVar("_T")


# Held while a forked child adopts a mirror (Mirror._adopt); made anew in every child, since a
# thread of the parent may have held it at the fork.
_adopting = threading.Lock()


def _after_fork_in_child() -> None:
    global _adopting
    _adopting = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _claim_says(client: Client) -> str:
    """What the prefix's publish.claim says of an upload (``_publish.claim_state``: claims are
    the publisher's; imported here, as that module imports this one)."""
    from zrecord._publish import claim_state

    return claim_state(client)


class Mirror:
    """The local mirror of one remote store, and the fetches that fill it (module docstring)."""

    # Set by close(), under the lock: no fetch starts after it (_submit).
    _closed = False
    # The threads that write large GETs to the mirror (_write_off_loop), made on first use.
    _writers: concurrent.futures.ThreadPoolExecutor | None = None

    def __init__(self, url: str, settings: StorageSettings, *, whole_index: bool = False) -> None:
        self.options = settings
        # Ranged GETs at once: max_in_flight, or for "auto" the default until a link sizes it
        # from the store's mean record (_entries).
        self.in_flight = MAX_IN_FLIGHT_DEFAULT if settings.max_in_flight == "auto" \
            else settings.max_in_flight
        self.client = Client(url, self.options)
        self.url = self.client.shown
        self._private: PrivateFolder | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._slots: asyncio.Semaphore | None = None
        self._between_parts = asyncio.Lock()  # made again with each event loop
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}
        # Released by `_dropped` when collected unclosed, not at exit (close() detaches it).
        self._loop_box: list[asyncio.AbstractEventLoop] = []
        self._fd_maps: list[dict[Any, int]] = []
        self._dropped = weakref.finalize(self, _dropped, self._loop_box, self._fd_maps)
        self._dropped.atexit = False
        self._budget: Budget | None = None
        # The futures its readers told the budget (foresee), caught up before every gather.
        self._foresights: list[Foresight] = []
        # Prefetches under way: the records each fetches, and its future.
        self._pending: list[tuple[np.ndarray, concurrent.futures.Future[None]]] = []
        # GETs under way: the byte ranges each writes (gaps read through included), and an
        # event set when they have ended.
        self._flights: list[_Flight] = []
        # Held from the look at the GETs under way to counting a new one among them (_claim).
        self._claim_lock = threading.Lock()
        self.requests = self.bytes_fetched = self.index_requests = self.index_bytes = 0
        # Stored bytes of the distinct records of each gather: what the fetches were for.
        self.delivered_bytes = 0
        self.etags: dict[str, str | None] = {}
        # By part: each object's size as the header gives it, until a GET has confirmed it
        # (_check_object).
        self._unconfirmed: dict[str, int] = {}
        self._records = 0
        self._shard_sizes: list[int] = []
        self._present: np.ndarray = np.zeros(0, np.uint8)
        # By part: one bit per sum group, then one per index block, set once the mirror's
        # index.zrs or index.zri holds its bytes (parts.bits), and the writable descriptors of
        # those two files, by ZR_PART_* (_index_job).
        self._parts: np.ndarray = np.zeros(0, np.uint8)
        self._groups = self._gap = 0
        self._layout: dict[str, Any] = {}
        self._index_fds: dict[int, int] = {}
        self._native: _native.Reader | None = None
        self.by_part = False
        try:
            header = self._fetch_header()
            layout = _native.header_layout(np.frombuffer(header, np.uint8), len(header),
                                           self.client.where("header.zrh"))
            # By part where the core reads this store by part (index parts whose blocks fit
            # its buffer), unless the caller judges the whole index at open (validate="full")
            # or a budget evicts records (its eviction reads every index entry: _mirror_cache).
            self.by_part = bool(layout["by_part"]) and not whole_index and \
                self.options.cache_bytes is None
            plan = self._plan(header, layout)
            files = self._place(plan)
            try:
                with self._local():
                    self._entries(plan, files)
            finally:
                files.close()
        except BaseException:
            self.close()  # a private mirror made so far goes with it
            raise
        # What open cost (stats()): every request and byte of the client so far was open's.
        self.open_requests, self.open_bytes = self.client.requests, self.client.bytes

    def attach(self, reader: _native.Reader) -> None:
        """The native reader of the mirror, which says where records lie and which index parts
        they need (open_store opens it once the mirror is in place)."""
        self._native = reader
        if self._budget is not None:
            self._budget.check()  # a mirror left larger by an earlier reader or budget

    # -- open ---------------------------------------------------------------------------------

    def _fetch_header(self) -> bytearray:
        """header.zrh's bytes, from one GET whose answer's size is judged before its body is
        read: of a file larger than any header only the first bytes are read, and the core
        refuses it from them (its magic, its version, then its size: spec §9.2)."""
        client = self.client
        try:
            result = client.get_stream("header.zrh")
        except FileNotFoundError:
            self._no_header()
        size = int(result.meta["size"])
        self.etags["header.zrh"] = result.meta.get("e_tag")
        end = size if size <= HEADER_SIZE_BYTES_MAX else 12
        header = bytearray()
        with client.errors("header.zrh"):
            for chunk in result.stream(min_chunk_size=_STREAM_BYTES):
                client.count(nbytes=len(chunk))
                header += chunk[:end - len(header)]
                if len(header) >= end:
                    break
        if len(header) != end:
            raise self._changed("header.zrh", f"ended after {len(header)} of its {size} bytes")
        if size > HEADER_SIZE_BYTES_MAX:
            _native.header_layout(np.frombuffer(header, np.uint8), size, client.where("header.zrh"))
        return header

    def _no_header(self) -> NoReturn:
        """Refuse a location with no header.zrh, saying what is known of it: whether anything
        lies there (S3: a listing of the first few objects; HTTP: index.zri and the first
        shard), stores below it, and what a publisher's claim says of an upload."""
        if not self.url.startswith("s3://"):
            if not self.client.any_object():
                raise StoreNotFoundError(f"no store at {self.url}: no header.zrh, index.zri or "
                                         "data-000.zrd there")
            raise NotPublishedError(f"{self.url} is not a published store: the server has its "
                                    "index.zri or data-000.zrd but no header.zrh, which a store "
                                    "that is published whole has")
        names = self.client.listed(_LISTED_MAX)
        if not names:
            raise StoreNotFoundError(f"no store at {self.url}: no object under that prefix")
        below = sorted({n[:-len("/header.zrh")] for n in names if n.endswith("/header.zrh")})
        if below:
            raise StoreNotFoundError(f"no store at {self.url}: no header.zrh there, but stores below "
                                     "it, such as " + ", ".join(f"{self.url}/{b}" for b in below[:3])
                                     + "; open one of them")
        if all("/" in n for n in names):
            # Objects only in sub-prefixes, none of whose headers came in the listing's first
            # page (a store of many shards lists them before its header).
            raise StoreNotFoundError(f"no store at {self.url}: no header.zrh there, and the objects "
                                     f"under it lie below it, such as {self.url}/{scrub(names[0])[:200]}: "
                                     "a folder of stores? Open a store below it")
        shown = ", ".join(scrub(n)[:100] for n in names[:_SHOWN_MAX])
        more = " and more" if len(names) > _SHOWN_MAX else ""
        raise NotPublishedError(f"{self.url} is not a published store: no header.zrh there (a "
                                f"store's header is uploaded last), but objects ({shown}{more}); "
                                + _claim_says(self.client))

    def _plan(self, header: bytearray, layout: dict[str, Any]) -> _Plan:
        """What the mirror of the store with `header` (and its `layout`) holds. By part: every
        file of the sizes the header gives, the objects' own sizes checked by the first GET of
        each (_check_object): open makes no other request. Whole: the objects' sizes from their
        HEADs, checked against the header's before any body is read (spec §9.1 steps 3 and 4:
        the shards in order, then the index, then index.zrs: steps 4.1 and 4.2 of §9.6); what
        the native open would refuse before reading it (a shard or index.zri missing) is not
        asked for, and the native open then says what is wrong."""
        shard_sizes: list[int] = layout["shard_sizes"]
        if self.by_part:
            self._unconfirmed = {shard_name(k): size for k, size in enumerate(shard_sizes)}
            self._unconfirmed.update({"index.zri": layout["index_size"], "index.zrs": layout["sums_size"]})
            return _Plan(header, layout, layout["index_size"], list(shard_sizes), layout["sums_size"], True)
        sizes: list[int | None] = []
        for k, want in enumerate(shard_sizes):
            head = self.client.head(shard_name(k))
            if head is None:
                return _Plan(header, layout, None, [*sizes, None], None, False)
            size, self.etags[shard_name(k)] = head
            if size != want:
                raise self._wrong_size(shard_name(k), size, want)
            sizes.append(size)
        head = self.client.head("index.zri")
        if head is None:
            return _Plan(header, layout, None, sizes, None, False)
        size, self.etags["index.zri"] = head
        if size != layout["index_size"]:
            raise self._wrong_size("index.zri", size, layout["index_size"])
        return _Plan(header, layout, size, sizes, self._sums_size(layout), False)

    def _wrong_size(self, name: str, size: int, want: int) -> CorruptStoreError:
        """The error for object `name` whose server says it has `size` bytes where the header
        needs `want` (the rule the native open applies to a local file of that size)."""
        where = self.client.where(name)
        if name == "index.zri":
            return CorruptStoreError(f"'{where}' has {size} bytes (the size its server gives), but "
                                     f"the header's index_size says {want} (ZR-HDR-011)")
        if name == "index.zrs":
            return CorruptStoreError(f"'{where}' has {size} bytes (the size its server gives), but "
                                     f"the store's {want // 8} index blocks need exactly {want} (8 "
                                     "per block sum) (ZR-PRT-001)")
        return CorruptStoreError(f"'{where}' has {size} bytes (the size its server gives), but the "
                                 f"header's shard_sizes says {want} (ZR-HDR-010): the store's "
                                 "objects do not belong together")

    def _no_object(self, name: str) -> CorruptStoreError:
        """The error for a store file that the server does not have (ZR-GEN-001)."""
        if name == "index.zrs":
            return CorruptStoreError(f"store '{self.url}' has index parts (required_features bit 0) "
                                     "but no index.zrs (ZR-GEN-001, ZR-PRT-001): the server has no "
                                     f"object {self.client.where(name)}")
        return CorruptStoreError(f"store '{self.url}' is missing its file {name} (ZR-GEN-001): the "
                                 f"server has no object {self.client.where(name)}")

    def _sums_size(self, layout: dict[str, Any]) -> int | None:
        """The size of index.zrs, from its HEAD, in a store with index parts (None without):
        refused as the native open refuses the file (step 4.2: missing, or not 8 bytes per
        block sum) before its body is read, naming the URL."""
        if not layout["index_parts"]:
            return None
        head = self.client.head("index.zrs")
        if head is None:
            raise self._no_object("index.zrs")
        size, self.etags["index.zrs"] = head
        if size != layout["sums_size"]:
            raise self._wrong_size("index.zrs", size, layout["sums_size"])
        return int(size)

    def _stream(self, name: str, size: int, write: Callable[[bytes, int], None], *,
                end: int | None = None) -> None:
        """Bytes [0, `end`) of object `name` (all `size` of them without `end`) passed to
        `write(chunk, offset)` as they arrive, in pieces of about _STREAM_BYTES: one GET with
        If-Match on the ETag seen at open, whose object size is checked before its body is read.
        Memory stays bounded whatever the object's size, and an object replaced since its HEAD
        (on a server without ETags) fails as StoreChangedError, never as a short or long file."""
        want = size if end is None else end
        options: dict[str, Any] = {} if end is None else {"range": (0, end)}
        if self.etags.get(name) is not None:
            options["if_match"] = self.etags[name]
        client, at = self.client, 0
        result = client.get_stream(name, options)
        with client.errors(name):
            if int(result.meta["size"]) != size:
                raise self._changed(name, f"is {result.meta['size']} bytes, and its HEAD said {size}")
            for chunk in result.stream(min_chunk_size=_STREAM_BYTES):
                if at + len(chunk) > want:
                    raise self._changed(name, f"sent more than the {want} bytes asked for")
                write(chunk, at)
                at += len(chunk)
                client.count(nbytes=len(chunk))
        if at != want:
            raise self._changed(name, f"ended after {at} of its {want} bytes")

    def _changed(self, name: str, what: str) -> StoreChangedError:
        return StoreChangedError(_errno.ESTALE, f"{self.client.where(name)} {what}: it changed after "
                                 "the store was opened (replaced, or being uploaded); open it again")

    def _key(self, header: bytearray) -> str:
        """The mirror's name in its folder: one per user, URL, objects' ETags and header, and
        apart for readers with a budget: a reader without one never stamps what it reads in
        lru.u64, so the bytes it fetched into a shared mirror could never be evicted."""
        # By part, only header.zrh's ETag is known at open; the header commits to the rest
        # (its sums chain to every index entry, the entries to every record).
        parts = [_KEY_VERSION, "by part" if self.by_part else "whole", str(os.geteuid()),
                 self.client.url, *(f"{k}={v}" for k, v in sorted(self.etags.items()))]
        if self.options.cache_bytes is not None:
            parts.append("budget")
        return hashlib.sha256("\n".join(parts).encode() + header).hexdigest()[:32]

    def _place(self, plan: _Plan) -> Files:
        """The mirror's files for `plan`, each opened without following a link and checked to be
        what the mirror made (_open_placed): those of the mirror found in its folder, else of one
        made from the store (_build). One whose files are not (missing, damaged, links, another
        user's) is set aside and made again; a folder this user may not use is a clear error."""
        key = self._key(plan.header)
        with self._local():
            base = self._base()
            base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                if self._private is None:
                    reap(base, base_fd, (BUILD_PREFIX, ASIDE_PREFIX))
                why = ""
                # At most: set a damaged one aside, make it, lose the race to place it, open it.
                for _ in range(4):
                    try:
                        files = self._open_placed(base_fd, key, plan)
                    except Damaged as damage:
                        why = damage.why
                        discard(base, base_fd, key, damage.ident)
                        continue
                    if files is not None:
                        self.root = os.path.join(base, key)
                        self.store_path = os.path.join(self.root, "store")
                        return files
                    self._build(base, base_fd, key, plan)
            finally:
                os.close(base_fd)
        raise StoreOSError(_errno.EAGAIN, f"{self.url}: its mirror {self._where()} was changed by "
                           f"another program each time it was made ({why}); open the store again")

    def _base(self) -> str:
        """The folder the mirror lives in: cache_dir, else a private folder made in TMPDIR."""
        if self.options.cache_dir is None:
            self._private = PrivateFolder()
            return self._private.name
        base = os.path.abspath(os.fsdecode(self.options.cache_dir))
        os.makedirs(base, exist_ok=True)
        return base

    def _open_placed(self, base_fd: int, key: str, plan: _Plan) -> Files | None:
        """The descriptors of mirror `key`'s files, each checked to be what _fill made; None
        when there is no such mirror. Damaged when a file is missing or is not that (a link,
        another kind of file, another size, another header, an index.zri or index.zrs written
        since);
        Foreign when the mirror's folder is another user's."""
        try:
            st = os.stat(key, dir_fd=base_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        ident = ident_of(st)
        if stat.S_ISDIR(st.st_mode) and st.st_uid != os.geteuid():
            raise Foreign(key, st.st_uid)
        files = Files(open_dir(base_fd, key, ident))
        try:
            files.store = open_dir(files.root, "store", ident)
            fd = open_file(files.store, "header.zrh", os.O_RDONLY, ident, size=len(plan.header))
            try:
                if read_all(fd, len(plan.header)) != plan.header:
                    raise Damaged(ident, "its header.zrh is not the store's")
            finally:
                os.close(fd)
            for k, size in enumerate(plan.shard_sizes):
                if size is not None:
                    files.shards[k] = open_file(files.store, shard_name(k), os.O_WRONLY, ident, size=size)
            if plan.index_size is not None:
                # By part the index files are filled as gathers need them, and the native
                # reader judges each part before it is used; whole, they were streamed when the
                # mirror was made and must not have changed since (index.id).
                mode = os.O_RDWR if plan.by_part else os.O_RDONLY
                files.index = open_file(files.store, "index.zri", mode, ident, size=plan.index_size)
                if plan.sums_size is not None:
                    files.sums = open_file(files.store, "index.zrs", mode, ident, size=plan.sums_size)
                if plan.by_part:
                    files.parts = open_file(files.root, "parts.bits", os.O_RDWR, ident,
                                             size=_parts_bytes(plan.layout))
                else:
                    identity = identity_of(os.fstat(files.index))
                    if files.sums is not None:
                        identity += identity_of(os.fstat(files.sums))
                    if read_small(files.root, "index.id", ident) != identity:
                        raise Damaged(ident, "its index.zri or index.zrs was changed after it was written")
                files.present = open_file(files.root, "present.bits", os.O_RDWR, ident,
                                           size=(plan.layout["record_count"] + 7) // 8)
                if self.options.cache_bytes is not None:
                    files.lru = open_file(files.root, "lru.u64", os.O_RDWR | os.O_CREAT, ident)
            return files
        except BaseException:
            files.close()
            raise

    def _build(self, base: str, base_fd: int, key: str, plan: _Plan) -> None:
        """Make mirror `key` from the store, in a temporary folder beside it renamed into place
        when complete: processes sharing cache_dir find it whole or not at all. One that loses
        the race to place it keeps the winner's. A process that dies meanwhile leaves the
        temporary folder with a lock that nobody holds, and a later opener removes it (reap)."""
        name, lock = locked_name(base_fd, BUILD_PREFIX)
        try:
            os.mkdir(name, 0o700, dir_fd=base_fd)
            try:
                self._fill(base_fd, name, plan)
            except BaseException:
                remove(base, base_fd, name)
                raise
            try:
                os.rename(name, key, src_dir_fd=base_fd, dst_dir_fd=base_fd)
            except OSError as exc:
                remove(base, base_fd, name)
                # A folder is there (another process placed its mirror first: the caller opens
                # it), or something that is no folder (the caller finds it damaged).
                if exc.errno not in (_errno.EEXIST, _errno.ENOTEMPTY, _errno.ENOTDIR, _errno.EISDIR):
                    raise
        finally:
            unlock(base_fd, name, lock)

    def _fill(self, base_fd: int, name: str, plan: _Plan) -> None:
        """The files of the mirror of `plan` in the new folder `name`: store/header.zrh; the shard
        files, sparse, of the objects' sizes; store/index.zri (and store/index.zrs) streamed from
        the store, and their identities as the file system tells them (index.id, checked at
        every later open: a change to a file changes it); present.bits, every record absent."""
        root = os.open(name, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW, dir_fd=base_fd)
        try:
            os.mkdir("store", 0o700, dir_fd=root)
            store = os.open("store", os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW, dir_fd=root)
            try:
                write_new(store, "header.zrh", plan.header)
                for k, size in enumerate(plan.shard_sizes):
                    if size is not None:
                        self._sparse(store, shard_name(k), size)
                if plan.index_size is None:
                    return
                if plan.by_part:
                    self._sparse(store, "index.zri", plan.index_size)
                    if plan.sums_size is not None:
                        self._sparse(store, "index.zrs", plan.sums_size)
                    self._sparse(root, "parts.bits", _parts_bytes(plan.layout))
                else:
                    identity = self._stream_new(store, "index.zri", plan.index_size)
                    if plan.sums_size is not None:
                        identity += self._stream_new(store, "index.zrs", plan.sums_size)
                    write_new(root, "index.id", identity)
                self._sparse(root, "present.bits", (plan.layout["record_count"] + 7) // 8)
            finally:
                os.close(store)
        finally:
            os.close(root)

    def _stream_new(self, dir_fd: int, name: str, size: int) -> bytes:
        """Object `name` streamed into a new file of that name in folder `dir_fd`; the file's
        identity, taken after close (on NFS, what later opens see once the writes have landed)."""
        fd = os.open(name, NEW_FILE, 0o600, dir_fd=dir_fd)
        try:
            self._stream(name, size, lambda chunk, at: pwrite_all(fd, chunk, at))
        finally:
            os.close(fd)
        return identity_of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))

    def _sparse(self, dir_fd: int, name: str, size: int) -> None:
        """A new file `name` of `size` bytes, all holes (a shard file, or present.bits)."""
        fd = os.open(name, NEW_FILE, 0o600, dir_fd=dir_fd)
        try:
            os.ftruncate(fd, size)
        except (OverflowError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno not in (_errno.EFBIG, _errno.EINVAL):
                raise
            raise StoreOSError(_errno.EFBIG, f"'{self.client.where(name)}' has {size} bytes, more "
                               f"than a file {self._where()} can hold") from None
        finally:
            os.close(fd)

    def _where(self) -> str:
        """Where the mirror lives, as messages say it: never the mirror's own path."""
        if self.options.cache_dir is None:
            return f"in the temporary folder {tempfile.gettempdir()!r} (TMPDIR)"
        return f"in cache_dir {os.fspath(self.options.cache_dir)!r}"

    @contextlib.contextmanager
    def _local(self) -> Iterator[None]:
        """What the block's work on the mirror's folder and files raises, as zrecord's errors
        naming the URL and where the mirror lives: a folder or file this user may not use says
        so and what to do instead."""
        if self.options.cache_dir is None:
            instead = "set TMPDIR to a folder this user may write, or give storage_options a cache_dir"
        else:
            instead = "give storage_options a cache_dir of this user's own"
        try:
            yield
        except Foreign as exc:
            raise StoreOSError(_errno.EACCES, f"{self.url}: cannot use its mirror {self._where()}: "
                               f"the folder {exc.name} there belongs to another user (uid {exc.uid}), "
                               f"and mirrors are not shared between users; {instead}, or remove "
                               f"{exc.name} from it") from None
        except OSError as exc:
            if isinstance(exc, ZrecordError):
                raise
            if exc.errno in (_errno.EACCES, _errno.EPERM, _errno.EROFS):
                raise StoreOSError(exc.errno, f"{self.url}: cannot use its mirror {self._where()}: "
                                   f"{exc.strerror} (the folder, or a mirror in it, is another user's "
                                   f"or read-only); {instead}") from None
            raise StoreOSError(exc.errno or _errno.EIO, f"{self.url}: cannot make or open its mirror "
                               f"{self._where()}: {exc.strerror or exc}") from None

    def _entries(self, plan: _Plan, files: Files) -> None:
        """The mirror's state from the descriptors _open_placed checked (never opened again by
        name): the shards' and, by part, the index files' writable descriptors, the presence
        bits of records and of index parts, the gap, and the budget."""
        self._fds, files.shards = files.shards, {}
        self._fd_maps.append(self._fds)
        if files.index is None or files.present is None:
            return  # the native open fails on these files and says why
        layout = plan.layout
        self._records, self._shard_sizes = int(layout["record_count"]), list(layout["shard_sizes"])
        with file_of(files.present, os.path.join(self.root, "present.bits"), "r+b") as f:
            self._present = np.memmap(f, np.uint8, "r+", shape=((self._records + 7) // 8,))
        if self._records == 0:
            return
        if plan.by_part:
            assert files.parts is not None and files.sums is not None
            self._index_fds = {part: fd for part, fd in zip(_PART_FILES, (files.index, files.sums))}
            self._fd_maps.append(self._index_fds)
            files.index = files.sums = None  # the mirror's from here on
            self._groups, self._layout = int(layout["sum_groups"]), layout
            with file_of(files.parts, os.path.join(self.root, "parts.bits"), "r+b") as f:
                self._parts = np.memmap(f, np.uint8, "r+", shape=(_parts_bytes(layout),))
        gap = self.options.gap_bytes
        # The mean stored record from the header: the records' stored sizes add up to the
        # shards' sizes (ZR-DAT-001, checked at open), so the index need not be read whole.
        mean = sum(self._shard_sizes) // self._records
        link = self.options.link
        self._gap = int(gap) if gap != "auto" else \
            link.join_gap() if link is not None else min(GAP_AUTO_MAX, mean)
        if self.options.max_in_flight == "auto" and link is not None:
            self.in_flight = link.in_flight(mean)
        if self.options.cache_bytes is not None and files.lru is not None:
            paths = [os.path.join(self.store_path, shard_name(k)) if k in self._fds else None
                     for k in range(len(self._shard_sizes))]
            lru, files.lru = files.lru, None  # the budget's from here on
            self._budget = Budget(files.root, (lru, os.path.join(self.root, "lru.u64")), paths,
                                  self._shard_sizes, self._where_records, self._records,
                                  self._present, self.options.cache_bytes, self._fd)

    # -- gathers ------------------------------------------------------------------------------

    def read(self, idx: np.ndarray, gather: Callable[[np.ndarray], _T], *, whole_index: bool = False) -> _T:
        """`gather(idx)` over the mirror, after fetching what it lacks (with `whole_index`, the
        whole index first: for verify); a record that fails its checksum there is fetched again
        (module docstring). ClosedError once close() has begun."""
        self._adopt()
        with self._unless_closed():
            if whole_index and self.by_part:
                self._fetch_whole_index()
                self._confirm_objects()
            return self._read(idx, gather)

    def _confirm_objects(self) -> None:
        """For verify, by part: the size of every object no answer has confirmed yet (a shard
        no record was read from, one of empty records only) from its HEAD, so that the store
        the whole path refuses at open (an object missing, or of another size) is refused
        here too, not passed because no record needed that object."""
        with self._lock:
            left = dict(self._unconfirmed)
        for name, want in left.items():
            head = self.client.head(name)
            if head is None:
                raise self._no_object(name)
            if head[0] != want:
                raise self._wrong_size(name, head[0], want)
            self._check_object(name, head[0], head[1])

    def _read(self, idx: np.ndarray, gather: Callable[[np.ndarray], _T]) -> _T:
        for foresight in self._foresights:
            foresight.catch_up()
            self._plan_ahead(foresight)
        holds: list[Budget] = []
        try:
            return self._read_held(idx, gather, holds)
        finally:
            for budget in holds:
                budget.finished()

    def _read_held(self, idx: np.ndarray, gather: Callable[[np.ndarray], _T], holds: list[Budget]) -> _T:
        """`_read`; the budget admissions of its fetches are added to `holds`, which _read
        ends once the records are read."""
        before = self._punch_word()
        located = self.ensure(idx, holds=holds)
        with self._lock:
            self.delivered_bytes += int(located.sizes.sum())
        chunks = None
        if self._budget is not None:
            # After every gather's fetches, and after those its prefetches made for it.
            chunks = self._budget.chunks_at(located.shards, located.offsets, located.sizes)
            self._budget.check(keep=chunks)
        refetched: dict[int, int] = {}
        while True:
            try:
                result = gather(idx)
            except ChecksumError as exc:
                rec = exc.record
                # Once for bytes that were bad before (a damaged or half-written mirror), and
                # once for each punch since the read began, by any reader of the mirror: each
                # damages a record at most once (_mirror_cache's module docstring).
                punched = punches_since(before, self._punch_word())
                allowed = min(_REFETCHES_MAX, 1 + punched)
                if rec is None or refetched.get(rec, 0) >= allowed:
                    raise
                refetched[rec] = refetched.get(rec, 0) + 1
                if punched and self._budget is not None and chunks is not None:
                    # Punched out under the read: what is fetched again stays until read.
                    self._budget.shelter(chunks)
                # What an eviction took since has lost its bit and comes back with the rest;
                # the failed record is fetched whatever its bit says.
                self.ensure(idx, holds=holds)
                self.ensure(np.array([rec], np.uint64), force=True, holds=holds)
                continue
            except CorruptStoreError as exc:
                self._copy_cut(exc)
                raise
            if self._budget is not None and chunks is not None:
                self._budget.touch(chunks)
            return result

    def _copy_cut(self, exc: CorruptStoreError) -> None:
        """CorruptStoreError naming the mirror's file (from `exc`) when a shard's local copy is
        shorter than the object: a read of it ended early, or faulted in its mapping, and the
        core's message (written for a local store) said the store's file was truncated, which
        named the remote store. Only another program shortens the mirror's files."""
        with self._lock:
            fds = dict(self._fds)
        for shard, fd in sorted(fds.items()):
            try:
                size = os.fstat(fd).st_size
            except OSError:
                continue
            want = self._shard_sizes[shard]
            if size < want:
                raise CorruptStoreError(
                    f"{self.url}: the mirror's copy of {shard_name(shard)} {self._where()} is "
                    f"{size} bytes, not the object's {want}: a program other than zrecord "
                    "shortened it while this reader had it open (the store at the URL is not "
                    "at fault); close the store and open it again, and the mirror fetches what "
                    "was cut off") from exc

    def _punch_word(self) -> int:
        """The mirror's punch word (_mirror_cache): this reader's budget's, else 0 (a mirror
        without a budget is shared only by readers without one, and nothing punches it)."""
        return self._budget.punch_word() if self._budget is not None else 0

    def ensure(self, idx: np.ndarray, *, force: bool = False, holds: list[Budget] | None = None) -> _Places:
        """Fetch the records of `idx` that the mirror does not hold (all of them with `force`),
        after the index parts they need (by part) and after waiting for the prefetches under
        way that fetch any of them. Returns where the distinct records of `idx` lie. With
        `holds`, the budget's admission holds until the caller has read them (appended to
        `holds`: the caller calls ``finished()`` of each)."""
        self._adopt()
        recs = self._valid(idx)
        if not force:
            # A prefetch of any of them fetches their index parts and records: waited for, not
            # asked for twice.
            self._wait_prefetches(recs)
        located = self._locate(recs)
        places = self._missing(located, force=force)
        if places.recs.shape[0] == 0:
            return located
        keep = beyond = None
        if self._budget is not None:
            # Admission: room for what comes, never evicting the batch's own chunks. What a
            # reader that knows its future reads before this batch keeps its place too
            # (Belady's rule: only what is read after it may be evicted for it).
            keep = self._budget.chunks_at(located.shards, located.offsets, located.sizes)
            beyond = self._budget.foreseen_by(keep)
        runs, flight = self._claim(places, keep, beyond, wait=not force)
        if flight is None:
            return located
        budget, admitted = self._budget, 0
        try:
            if budget is not None:
                admitted = budget.reserve(_allocated(runs), keep, hold=holds is not None,
                                          own=len(holds or ()), beyond=beyond)
                if holds is not None:
                    holds.append(budget)
            future = self._submit(self._fetch_runs(runs))
        except BaseException:
            self._land(flight)
            if budget is not None:
                budget.release(admitted)
            raise
        future.add_done_callback(lambda _: self._land(flight))
        try:
            future.result()
        finally:
            if budget is not None:
                budget.release(admitted)
        return located

    def _claim(self, places: _Places, keep: np.ndarray | None, beyond: int | None, *,
               wait: bool) -> tuple[list[tuple[int, int, int, np.ndarray]], _Flight | None]:
        """The GETs of `places` (joined as the budget allows: ``_within_budget``), counted as
        under way (``_take_off``) at once, so that no other gather or prefetch asks for their
        bytes again meanwhile; with `wait`, after waiting for the GETs under way that write
        any of `places` (then those still missing). No flight when none is left to fetch."""
        while True:
            with self._claim_lock:
                events = self._in_flight(places)[1] if wait else []
                if not events:
                    # With a budget: joined with deferred planned records where they can be,
                    # else the gather's own GETs, within it (worked out only then).
                    runs = None if self._budget is None else self._with_deferred(places, keep, beyond)
                    if runs is None:
                        runs = self._runs(places)
                        if self._budget is not None:
                            runs = self._within_budget(places, runs, keep, beyond)
                    return (runs, self._take_off(runs)) if runs else ([], None)
            for done in events:
                done.wait()
            places = self._missing(places)
            if places.recs.shape[0] == 0:
                return [], None

    def _with_deferred(self, places: _Places, keep: np.ndarray | None,
                       beyond: int | None) -> list[tuple[int, int, int, np.ndarray]] | None:
        """A gather's GETs of `places` joined with the records its readers' foresights planned
        and the budget could not admit yet (``Foresight.defer``) wherever a GET of the gather
        would join them, when the budget has room for them all; else None. A planned read of a
        block deferred for room is otherwise fetched piece by piece, by each gather that
        needs some of its records, and its rest later in what pieces are left: the first
        gather that needs any of it fetches it whole (under the claim lock, as `_claim`)."""
        assert self._budget is not None
        deferred = [recs for foresight in self._foresights for recs in foresight.deferred_records()]
        if not deferred or places.recs.shape[0] == 0:
            return None
        # Distinct and sorted, and valid: a foresight plans only the store's records.
        more = distinct(np.concatenate(deferred).astype(np.uint64))
        more = more[~np.isin(more, places.recs, assume_unique=True)]
        extra = self._missing(self._located(more))
        extra = extra.take(~self._in_flight(extra)[0])
        if extra.recs.shape[0] == 0:
            return None
        both = _Places(*(np.concatenate([a, b]) for a, b in zip(places, extra)))
        runs = [run for run in self._runs(both) if np.isin(run[3], places.recs).any()]
        if sum(run[3].shape[0] for run in runs) == places.recs.shape[0]:
            return None  # nothing deferred joins the gather's GETs
        return runs if self._has_room(runs, keep, beyond) else None

    def _has_room(self, runs: list[tuple[int, int, int, np.ndarray]], keep: np.ndarray | None,
                  beyond: int | None) -> bool:
        """Whether the budget has room for `runs` once it has evicted what a gather may (never
        `keep`, nor what was fetched and not read yet; with `beyond`, only what is read after
        it): asked of the budget, and not kept (the gather's own admission follows)."""
        assert self._budget is not None
        joined = _allocated(runs)
        room = self._budget.reserve(joined, keep, partial=True, beyond=beyond)
        self._budget.release(room)
        return room >= joined

    def _within_budget(self, places: _Places, runs: list[tuple[int, int, int, np.ndarray]],
                       keep: np.ndarray | None, beyond: int | None = None) -> list[tuple[int, int, int, np.ndarray]]:
        """`runs`, the ranged GETs of `places` joined through gaps, where the budget has room
        for them once it has evicted what it may (never `keep`, nor what was fetched and not
        read yet); else the GETs of `places` with no gap read through. The bytes of a gap are
        written to the mirror too: joined where the budget cannot hold them, they would take
        it past its bound, or evict what the next gathers read."""
        if sum(end - start for _, start, end, _ in runs) <= int(places.sizes.sum()):
            return runs  # no gap read through
        return runs if self._has_room(runs, keep, beyond) else self._runs(places, 0)

    def foresee(self, batch_of: Callable[[int], np.ndarray],
                progress: Callable[[], int | None]) -> Foresight | None:
        """Tell the budget this reader's future (``_foresight``): the records of each step,
        and the step it has reached (None once it is gone), so that evictions take what is
        needed farthest ahead first. None without a budget (nothing is evicted). The
        foresight is forgotten by its close() or the mirror's."""
        self._adopt()
        with self._unless_closed():
            if self._budget is None:
                return None
            foresight = Foresight(self._budget, batch_of, progress, self._records)
            with self._lock:
                self._foresights = [f for f in self._foresights if not f.closed] + [foresight]
            return foresight

    def prefetch(self, idx: np.ndarray) -> None:
        """Start fetching the records of `idx` that the mirror lacks and no prefetch is fetching
        (of the first PREFETCH_RECORDS_MAX positions, the lowest-numbered records up to
        PREFETCH_BYTES_MAX stored bytes), and by part the index parts they need first, without
        waiting. ClosedError once close() has begun."""
        self._adopt()
        with self._unless_closed():
            self._prefetch(idx)

    def _plan_ahead(self, foresight: Foresight) -> None:
        """Reads planned from a reader's known future (``Foresight.plan``): what was deferred,
        then the next segment of its steps, each prefetched at once, so that requests join the
        neighbours of many steps;
        into the room ``Foresight.room_after`` allows (what is read before them keeps its
        place), the rest deferred again (module docstring)."""
        assert self._budget is not None
        for ahead, until in foresight.plan(self._budget.budget):
            self._prefetch(ahead, planned=(foresight, until))

    def _prefetch(self, idx: np.ndarray, planned: tuple[Foresight, int] | None = None) -> None:
        # A planned read is bounded by its plan (PLAN_RECORDS_MAX records), and cut in no
        # slices: slices of record numbers would cut its requests at their edges.
        recs = self._valid(idx if planned is not None else idx[:PREFETCH_RECORDS_MAX])
        with self._lock:
            self._pending = [(r, f) for r, f in self._pending if not f.done()]
            busy = [r for r, _ in self._pending]
        if busy and recs.shape[0]:
            recs = recs[~np.isin(recs, np.concatenate(busy))]
        if recs.shape[0] == 0:
            return
        future = self._submit(self._prefetch_job(recs, planned))
        with self._lock:
            self._pending.append((recs, future))

    async def _prefetch_job(self, recs: np.ndarray, planned: tuple[Foresight, int] | None = None) -> None:
        """The fetches of a prefetch, on the event loop: the index parts of `recs` (by part),
        then their records that the mirror lacks, up to PREFETCH_BYTES_MAX stored bytes. A
        `planned` one (a foresight's read, to step `until`) reads through every gap it joins,
        fetches what the budget has room for now and defers the rest to that foresight."""
        if self.by_part:
            await self._index_job(recs, force=False)
        located = self._located(recs)
        if self._budget is not None:
            # What the mirror holds of them already is to be read soon too: protected as if
            # just fetched (a chunk may hold nothing else of theirs).
            self._budget.expect(self._budget.chunks_at(located.shards, located.offsets, located.sizes))
        with self._claim_lock:  # no other fetch asks for what this one claims (_claim)
            runs, flight, admitted = self._claim_ahead(located, planned)
        try:
            await self._fetch_runs(runs)
        finally:
            self._land(flight)
            if self._budget is not None:
                self._budget.release(admitted)

    def _claim_ahead(self, located: _Places, planned: tuple[Foresight, int] | None
                     ) -> tuple[list[tuple[int, int, int, np.ndarray]], _Flight, int]:
        """A prefetch's GETs (``_prefetch_job``, under the claim lock): of `located`, what the
        mirror lacks and no GET under way writes, admitted by the budget, counted as under way;
        with the bytes admitted."""
        places = self._missing(located)
        places = places.take(~self._in_flight(places)[0])
        if planned is None:  # a planned read is bounded by the budget's admission alone
            places = places.take(np.cumsum(places.sizes, dtype=np.uint64) <= PREFETCH_BYTES_MAX)
        runs = self._runs(places)
        if self._budget is None:
            return runs, self._take_off(runs), 0
        if planned is None:
            runs = self._within_budget(places, runs, None)
        # Admission: room made by evicting what was read longest ago (never what was fetched
        # and not read yet; planned, only what is read well after it); the prefetch fetches the
        # runs that fit, and a planned one defers the others.
        if planned is not None and len(runs) > 1:
            # What the budget admits first is what is read first.
            shards, starts, ends = (np.array([run[k] for run in runs], np.int64) for k in range(3))
            runs = [runs[k] for k in np.argsort(self._budget.soonest(shards, starts, ends), kind="stable").tolist()]
        sizes = [_allocated([run]) for run in runs]
        beyond = None if planned is None else planned[0].room_after(planned[1])
        admitted = self._budget.reserve(sum(sizes), partial=True, beyond=beyond)
        fits = (np.cumsum(sizes, dtype=np.int64) <= admitted).tolist()
        if planned is not None and not all(fits):
            foresight, until = planned
            foresight.defer(np.concatenate([run[3] for run, ok in zip(runs, fits) if not ok]), until)
        runs = [run for run, ok in zip(runs, fits) if ok]
        return runs, self._take_off(runs), admitted

    def _submit(self, job: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        """Start `job` (a fetch) on the event loop; ClosedError once close() has begun.
        Under the lock that close() takes to begin: every fetch started before close() is
        queued on the loop before the cancellation close() queues, so none outlives it (nor
        leaves its waiter waiting on a loop that has stopped)."""
        with self._lock:
            if self._closed:
                job.close()
                raise self._closed_error()
            return asyncio.run_coroutine_threadsafe(job, self._loop())

    @contextlib.contextmanager
    def _unless_closed(self) -> Iterator[None]:
        """What fails in the block once close() has begun raised as ClosedError: a fetch that
        close() cancelled (CancelledError), or the arrays close() emptied under a gather."""
        try:
            yield
        except Exception as exc:
            if not self._closed or isinstance(exc, ClosedError):
                raise
            raise self._closed_error() from None

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"the store {self.url!r} is closed")

    def _adopt(self) -> None:
        """In a process forked from the one that used this mirror last (os.fork(), 'fork'
        workers), first drop what belongs to the parent: its event loop (whose thread is not
        here: a fetch queued on it would wait forever), its prefetches and GETs under way (they
        run and end in the parent), the locks one of its threads may have held, its budget's
        eviction lock, and its client (whose connections are the parent's sockets): this
        process makes its own on first use. A private mirror stays the parent's to remove."""
        if self.client.pid == os.getpid():
            return
        with _adopting:
            if self.client.pid == os.getpid():
                return
            self._lock = threading.Lock()
            self._event_loop = None
            self._loop_box.clear()  # the parent's loop: never stopped from here
            self._thread = None
            self._slots = None
            self._pending = []
            self._flights = []  # the parent's GETs: they end (and are waited for) there
            self._claim_lock = threading.Lock()
            self._writers = None  # the parent's threads: not here
            self._foresights = []  # the parent's loaders' futures, not this process's
            if self._budget is not None:
                self._budget.after_fork()
            if self._private is not None:
                # TemporaryDirectory removes the folder by a weakref.finalize (CPython's
                # _finalizer), which would run when this process drops it or exits.
                finalizer = getattr(self._private, "_finalizer", None)
                if finalizer is not None:
                    finalizer.detach()
                self._private = None
            self.client = Client(self.client.url, self.options, answered=self.client.answered)

    def _in_flight(self, places: _Places) -> tuple[np.ndarray, list[threading.Event]]:
        """Which of the records at `places` a GET under way writes (asked for, or read through
        its gaps), and the events of those GETs."""
        with self._lock:
            flights = list(self._flights)
        covered = np.zeros(places.recs.shape[0], bool)
        events: list[threading.Event] = []
        if not flights or places.recs.shape[0] == 0:
            return covered, events
        starts = places.offsets.astype(np.uint64)
        ends = starts + places.sizes.astype(np.uint64)
        for flight in flights:
            hit = np.zeros(places.recs.shape[0], bool)
            for shard, (first, last) in flight.runs.items():
                mine = places.shards == shard
                at = np.maximum(np.searchsorted(first, starts[mine], side="right") - 1, 0)
                hit[mine] = (first[at] <= starts[mine]) & (ends[mine] <= last[at])
            if hit.any():
                covered |= hit
                events.append(flight.done)
        return covered, events

    def _wait_prefetches(self, recs: np.ndarray) -> bool:
        """Wait for the prefetches under way that fetch any of `recs`; whether there were any.
        Their failures are left to the caller, which fetches what is still missing."""
        with self._lock:
            waits = [f for r, f in self._pending if not f.done() and np.isin(recs, r).any()]
        for future in waits:
            with contextlib.suppress(Exception):
                future.result()
        return bool(waits)

    def _valid(self, idx: np.ndarray) -> np.ndarray:
        """The distinct records of `idx` that the store has (the gather reports the others)."""
        if self._records == 0 or idx.shape[0] == 0:
            return np.empty(0, np.uint64)
        recs = distinct(np.asarray(idx).astype(np.uint64))
        out: np.ndarray = recs[recs < self._records]
        return out

    def locate(self, idx: np.ndarray) -> _Places:
        """Where the distinct valid records of `idx` lie (`_locate`), for callers outside a
        gather; ClosedError once close() has begun."""
        self._adopt()
        with self._unless_closed():
            return self._locate(idx)

    def _locate(self, idx: np.ndarray) -> _Places:
        """Where the distinct valid records of `idx` lie, as the core says once it has judged
        their index blocks; by part, after fetching the index parts they need. A part that
        fails there is fetched again once (the mirror's copy may be what is damaged), then its
        failure is the store's."""
        recs = self._valid(idx)
        if not self.by_part or recs.shape[0] == 0:
            return self._located(recs)
        self._submit(self._index_job(recs, force=False)).result()
        try:
            return self._located(recs)
        except (ChecksumError, CorruptStoreError):
            self._submit(self._index_job(recs, force=True)).result()
            try:
                return self._located(recs)
            except (ChecksumError, CorruptStoreError) as exc:
                self._replaced_since_open(exc)
                raise

    def _replaced_since_open(self, exc: Exception) -> None:
        """StoreChangedError (from `exc`) when header.zrh is no longer the object opened: by
        part, the index parts fetched after open carry no ETag to refuse them by, and a
        store replaced before its first read failed their checks, as a damaged store would."""
        opened = self.etags.get("header.zrh")
        if opened is None:
            return
        now = self.client.head("header.zrh")
        if now is None or now[1] != opened:
            raise self._changed("header.zrh", "is not the object opened") from exc

    def _located(self, recs: np.ndarray) -> _Places:
        n = recs.shape[0]
        shards, offsets, sizes = (np.zeros(n, np.uint64) for _ in range(3))
        if n:
            assert self._native is not None, "attach() gives the mirror its reader before any read"
            self._native.locate(recs, n, shards, offsets, sizes)
        return _Places(recs, shards, offsets, sizes)

    def _where_records(self, recs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The shards, offsets and stored sizes of records `recs` (the budget's view)."""
        places = self._located(recs)
        return places.shards, places.offsets, places.sizes

    def _missing(self, places: _Places, *, force: bool = False) -> _Places:
        """The records of `places` with bytes that the mirror does not hold (all of them with
        `force`); empty records are marked held on the way."""
        if places.recs.shape[0] == 0:
            return places
        if not force:
            recs = places.recs
            places = places.take((self._present[recs >> 3] >> (recs & 7).astype(np.uint8)) & 1 == 0)
        empty = places.sizes == 0
        self._mark(places.recs[empty])
        return places.take(~empty)

    def _runs(self, places: _Places, gap: int | None = None) -> list[tuple[int, int, int, np.ndarray]]:
        """(shard, start, end, records) of each ranged GET: records sorted by place, neighbours
        whose gap is at most `gap` (gap_bytes when None) joined while the request stays within
        request_bytes_max."""
        order = np.lexsort((places.offsets, places.shards))
        recs, shards, offsets = places.recs[order], places.shards[order], places.offsets[order]
        ends = offsets + places.sizes[order]
        gap, most = self._gap if gap is None else gap, self.options.request_bytes_max
        runs = []
        first = 0
        for i in range(1, recs.shape[0] + 1):
            if (i == recs.shape[0] or shards[i] != shards[first] or int(offsets[i]) > int(ends[i - 1]) + gap
                    or int(ends[i]) - int(offsets[first]) > most):
                runs.append((int(shards[first]), int(offsets[first]), int(ends[first:i].max()), recs[first:i]))
                first = i
        return runs

    # -- index parts (by part) ------------------------------------------------------------------

    async def _index_job(self, recs: np.ndarray, *, force: bool) -> None:
        """Fetch the index parts that judging `recs` needs and that the core has not judged:
        those the mirror does not hold (all of them with `force`), joined into ranged GETs of
        index.zri and index.zrs as records are (gap_bytes, request_bytes_max), written to the
        mirror's files, and marked held (parts.bits) once written."""
        wants = self._wants(recs)
        if wants.shape[0] == 0:
            return
        wants = np.unique(wants, axis=0)  # by file, then first part
        if not force:
            wants = wants[~self._held(wants)]
        gap, most = self._gap, self.options.request_bytes_max
        jobs, first = [], 0
        for i in range(1, wants.shape[0] + 1):
            if (i == wants.shape[0] or wants[i, 0] != wants[first, 0]
                    or int(wants[i, 3]) > int(wants[first:i, 4].max()) + gap
                    or int(wants[i, 4]) - int(wants[first, 3]) > most):
                jobs.append(self._fetch_parts(wants[first:i]))
                first = i
        await _all(jobs)

    def _held(self, wants: np.ndarray) -> np.ndarray:
        """Whether the mirror holds every part of each run of `wants` (parts.bits)."""
        bits = self._part_bits(wants)
        counts = (wants[:, 2] - wants[:, 1] + 1).astype(np.int64)
        held = (self._parts[bits >> 3] >> (bits & 7).astype(np.uint8)) & 1
        out: np.ndarray = np.logical_and.reduceat(held.astype(bool), np.cumsum(counts) - counts)
        return out

    def _part_bits(self, wants: np.ndarray) -> np.ndarray:
        """The bits of parts.bits of every part of the runs `wants`: sum group t is bit t, index
        block b bit T + b."""
        counts = (wants[:, 2] - wants[:, 1] + 1).astype(np.int64)
        base = wants[:, 1].astype(np.int64) + np.where(wants[:, 0] == _PART_GROUPS, 0, self._groups)
        out: np.ndarray = np.repeat(base, counts) + (np.arange(int(counts.sum())) -
                                                     np.repeat(np.cumsum(counts) - counts, counts))
        return out

    async def _fetch_parts(self, wants: np.ndarray) -> None:
        """One ranged GET of the runs `wants` of one index file, written to the mirror's copy."""
        await self._fetch_range(int(wants[0, 0]), int(wants[:, 3].min()), int(wants[:, 4].max()))
        bits = self._part_bits(wants)
        np.bitwise_or.at(self._parts, bits >> 3, (1 << (bits & 7)).astype(np.uint8))

    def _fetch_whole_index(self) -> None:
        """Fetch index.zri and index.zrs whole into the mirror unless it holds every part (by
        part), for verify, which judges the whole index: in ranged GETs of at most
        request_bytes_max, every part marked held once all are written."""
        count = self._groups + int(self._layout["index_blocks"])
        bits = np.unpackbits(np.asarray(self._parts), bitorder="little")[:count]
        if bool(bits.all()):
            return
        most = self.options.request_bytes_max
        jobs = []
        for part in _PART_FILES:
            size = int(os.fstat(self._index_fds[part]).st_size)
            jobs += [self._fetch_range(part, start, min(size, start + most)) for start in range(0, size, most)]
        self._submit(_all(jobs)).result()
        self._parts[:] = 0xFF

    async def _fetch_range(self, part: int, start: int, end: int) -> None:
        """Bytes [start, end) of index file `part` (ZR_PART_*) into the mirror's copy."""
        assert self._slots is not None
        async with self._slots:
            data = await self._get(_PART_FILES[part], start, end)
        with self._writing(_PART_FILES[part], start, len(data)):
            pwrite_all(self._index_fds[part], data, start)
        with self._lock:
            self.index_requests += 1
            self.index_bytes += len(data)

    async def _get(self, name: str, start: int, end: int) -> memoryview:
        """Bytes [start, end) of object `name` (Client.get_range), with If-Match on its ETag
        once known; by part, the first GET of each object also checks its size against the
        header's (what open checks from HEADs on the whole path) and learns its ETag."""
        try:
            data, size, etag = await self.client.get_range(name, start, end, self.etags.get(name))
        except FileNotFoundError:
            raise self._no_object(name) from None
        except (RemoteError, StoreChangedError) as exc:
            await self._confirm_size(name, exc)
            raise
        self._check_object(name, size, etag)
        return data

    async def _confirm_size(self, name: str, exc: Exception) -> None:
        """By part, a GET of an object whose size no answer has confirmed yet that failed: its
        size is asked (HEAD), and one that is not the header's is the failure (a range past
        the end was a 416 "after its retries", one across it "shorter than at open", though
        the object was that size all along), said as the whole path says it."""
        with self._lock:
            want = self._unconfirmed.get(name)
        if want is None:
            return
        head = await asyncio.to_thread(self.client.head, name)
        if head is not None and head[0] != want:
            raise self._wrong_size(name, head[0], want) from exc

    def _check_object(self, name: str, size: int, etag: str | None) -> None:
        with self._lock:
            want = self._unconfirmed.get(name)
            if want is not None and size != want:
                raise self._wrong_size(name, size, want)
            self._unconfirmed.pop(name, None)
            seen = self.etags.setdefault(name, etag)
        if seen is not None and etag is not None and seen != etag:
            raise self._changed(name, f"has ETag {etag}, and an earlier answer gave {seen}")

    async def _fetch_runs(self, runs: list[tuple[int, int, int, np.ndarray]]) -> None:
        """Every run's GET, at most max_in_flight of this reader's at once; the first failure
        cancels the rest and is raised."""
        await _all([self._fetch_run(*run) for run in runs])

    def _take_off(self, runs: list[tuple[int, int, int, np.ndarray]]) -> _Flight:
        """Count the GETs of `runs` as under way (``_in_flight``) until ``_land``."""
        by_shard: dict[int, list[tuple[int, int]]] = {}
        for shard, start, end, _ in runs:
            by_shard.setdefault(shard, []).append((start, end))
        spans = {shard: np.array(sorted(pairs), np.uint64).reshape(-1, 2) for shard, pairs in by_shard.items()}
        flight = _Flight({shard: (pairs[:, 0], pairs[:, 1]) for shard, pairs in spans.items()}, threading.Event())
        with self._lock:
            self._flights.append(flight)
        return flight

    def _land(self, flight: _Flight) -> None:
        """The GETs of `flight` have ended (written, failed or cancelled)."""
        with self._lock:
            self._flights = [f for f in self._flights if f is not flight]
        flight.done.set()

    async def _fetch_run(self, shard: int, start: int, end: int, recs: np.ndarray) -> None:
        name = shard_name(shard)
        assert self._slots is not None
        async with self._slots:
            data = await self._get(name, start, end)
        with self._writing(name, start, len(data)):
            if len(data) >= WRITE_THREAD_BYTES:
                await self._write_off_loop(self._fd(shard), data, start)
            else:
                pwrite_all(self._fd(shard), data, start)
        if self._budget is not None:
            self._budget.wrote(shard, start, start + len(data))
        with self._lock:
            self.requests += 1
            self.bytes_fetched += len(data)
        self._mark(recs)
        self._mark(await self._inside(shard, start, start + len(data), recs))

    @contextlib.contextmanager
    def _writing(self, name: str, start: int, size: int) -> Iterator[None]:
        """A write of object `name`'s bytes [start, start + size) into the mirror: its
        failure (a full disk, a quota) as a StoreOSError naming the object and the mirror."""
        try:
            yield
        except OSError as exc:
            if isinstance(exc, ZrecordError):
                raise
            raise StoreOSError(exc.errno or _errno.EIO, f"{self.client.where(name)}: cannot write "
                               f"its bytes {start:,}..{start + size:,} into the mirror "
                               f"{self._where()}: {exc.strerror or exc} (free room there, or give "
                               "storage_options a smaller cache_bytes or another cache_dir)"
                               ) from None

    async def _write_off_loop(self, fd: int, data: bytes | bytearray | memoryview, at: int) -> None:
        """`pwrite_all` on one of the mirror's writer threads (module docstring); cancelled,
        it still waits for the write to end, so that the GET's flight and admission end after
        its bytes are written, and its descriptor outlives it."""
        with self._lock:
            if self._writers is None:
                self._writers = concurrent.futures.ThreadPoolExecutor(
                    WRITE_THREADS, thread_name_prefix="zrecord-mirror-write")
            writers = self._writers
        done = writers.submit(pwrite_all, fd, data, at)
        try:
            await asyncio.wrap_future(done)
        except asyncio.CancelledError:
            concurrent.futures.wait([done])
            raise

    async def _inside(self, shard: int, start: int, end: int, recs: np.ndarray) -> np.ndarray:
        """The records numbered between `recs` (those a GET of bytes [start, end) of shard
        `shard` was made for) whose bytes lie wholly in that range: a GET joined through its
        gaps wrote them too, so they are held as the others are, not fetched again when asked
        for. By part, finding them needs their index parts, fetched first (joined, as a
        gather's are: a read of those records would fetch them anyway). None past
        _BETWEEN_MAX records."""
        lo, hi = int(recs.min()), int(recs.max())
        if hi - lo + 1 == recs.shape[0] or hi - lo >= _BETWEEN_MAX:
            return recs[:0]
        between = np.arange(lo, hi + 1, dtype=np.uint64)
        if self.by_part:
            # One at a time: runs written together would each fetch the parts they share.
            async with self._between_parts:
                await self._index_job(between, force=False)
        places = self._located(between)
        inside = (places.shards == shard) & (places.offsets >= start) & (places.offsets + places.sizes <= end)
        held: np.ndarray = places.recs[inside]
        return held

    def _wants(self, recs: np.ndarray) -> np.ndarray:
        """The core's index wants of `recs` it has not judged: rows (file, first part, last
        part, start, end) of the index files."""
        assert self._native is not None
        n = recs.shape[0]
        out = np.empty(10 * n, np.uint64)
        found = self._native.index_wants(recs, n, out)
        wants = out[:5 * found].reshape(found, 5)
        wants[:, 0] &= np.uint64(0xFFFFFFFF)  # zr_index_want.file (its reserved half is 0)
        return wants

    def _mark(self, recs: np.ndarray) -> None:
        """Set the presence bits of records `recs` (after their bytes are written): a few one
        by one (a random read's GET has one, and np.bitwise_or.at's 7 us a call were 10% of
        the fetch thread), more with np.bitwise_or.at."""
        n = recs.shape[0]
        if n == 0:
            return
        if n <= 8:
            present = self._present
            for rec in recs.tolist():
                present[rec >> 3] |= 1 << (rec & 7)
            return
        np.bitwise_or.at(self._present, recs >> 3, (1 << (recs & 7)).astype(np.uint8))

    def _fd(self, shard: int) -> int:
        """The mirror's writable descriptor of shard `shard`, opened and checked at open
        (_open_placed): never opened again by name, so that a link put in its place since is
        never written through."""
        with self._lock:
            fd = self._fds.get(shard)
        if fd is None:
            if self._closed:
                raise self._closed_error()
            raise CorruptStoreError(f"{self.url}: the mirror has no {shard_name(shard)}: the store has no "
                                    "such object")
        return fd

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The reader's event loop, in a daemon thread of its own, started on first use; the
        caller holds the lock."""
        if self._event_loop is None:
            loop = asyncio.new_event_loop()
            started = threading.Event()
            made: list[Any] = []
            in_flight = self.in_flight

            def run() -> None:  # holds no reference to the mirror (see _dropped)
                asyncio.set_event_loop(loop)
                made.extend((asyncio.Semaphore(in_flight), asyncio.Lock()))
                started.set()
                loop.run_forever()
                loop.close()

            self._thread = threading.Thread(target=run, name="zrecord-fetch", daemon=True)
            self._thread.start()
            started.wait()
            self._slots, self._between_parts = made
            self._event_loop = loop
            self._loop_box.append(loop)
        return self._event_loop

    def stats(self) -> dict[str, int]:
        """Ranged GETs of records made for gathers so far (``requests``) and the bytes they
        brought (``bytes``); those of index parts (``index_requests``, ``index_bytes``: by
        part, the parts of index.zri and index.zrs that gathers needed); what open cost: its
        requests (``open_requests``: the GET of header.zrh, and on the whole path the HEAD of
        every object and the GETs of index.zri and index.zrs when it made the mirror; a first
        request tried again with retries counts twice) and the bytes they brought
        (``open_bytes``); the stored bytes of the records the gathers asked for
        (``delivered_bytes``: each record once per gather, held or fetched), against which
        ``bytes`` is the payload's amplification; with a budget, the bytes the mirror holds
        now and those this reader's evictions freed."""
        self._adopt()
        with self._lock:
            out = {"requests": self.requests, "bytes": self.bytes_fetched,
                   "delivered_bytes": self.delivered_bytes,
                   "index_requests": self.index_requests, "index_bytes": self.index_bytes,
                   "open_requests": self.open_requests, "open_bytes": self.open_bytes}
        if self._budget is not None:
            out.update(cache_bytes=self._budget.used(), evicted_bytes=self._budget.evicted_bytes,
                       evictions=self._budget.evictions())
        elif self.options.cache_bytes is not None:
            # A budget over a store with no records to hold: nothing held, nothing evicted.
            out.update(cache_bytes=0, evicted_bytes=0, evictions=0)
        return out

    def close(self) -> None:
        self._adopt()
        self._dropped.detach()
        with self._lock:
            self._closed = True
            loop, self._event_loop = self._event_loop, None
            fds, self._fds = self._fds, {}
            index_fds, self._index_fds = self._index_fds, {}
            self._pending = []
            foresights, self._foresights = self._foresights, []
        for foresight in foresights:
            foresight.close()
        if loop is not None:
            # Fetches still under way (prefetches, and gathers racing this close) are cancelled,
            # and end, before their files close; their waiters get ClosedError (_submit).
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_tasks(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join()
        writers, self._writers = self._writers, None
        if writers is not None:
            writers.shutdown(wait=True)
        if self._budget is not None:
            # First: it waits for an eviction under way, which punches through these
            # descriptors, and allows no other.
            self._budget.close()
            self._budget = None
        for fd in (*fds.values(), *index_fds.values()):
            os.close(fd)
        self._present = self._parts = np.zeros(0, np.uint8)
        self._records = 0
        if self._private is not None:
            self._private.cleanup()
            self._private = None
        self.client.close()


def _dropped(loops: list[asyncio.AbstractEventLoop], fd_maps: list[dict[Any, int]]) -> None:
    """A mirror collected without close(): its event loop stopped (its thread then ends) and
    its descriptors closed. Its private folder has a finalizer of its own (PrivateFolder).
    The loop's thread must not hold the mirror (Mirror._loop), or it is never collected."""
    for loop in loops:
        with contextlib.suppress(RuntimeError):  # closed already
            loop.call_soon_threadsafe(loop.stop)
    for fds in fd_maps:
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        fds.clear()


async def _all(jobs: list[Coroutine[Any, Any, None]]) -> None:
    """Run `jobs` at once; the first failure cancels the rest and is raised."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()


class _Flight(NamedTuple):
    """GETs under way (``Mirror._take_off``): by shard, the first and the end byte of each
    (sorted), and an event set once they have all ended."""

    runs: dict[int, tuple[np.ndarray, np.ndarray]]
    done: threading.Event


class _Places(NamedTuple):
    """Distinct records and where they lie (Mirror._locate): shard, offset, stored size."""

    recs: np.ndarray
    shards: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray

    def take(self, keep: np.ndarray) -> _Places:
        return _Places(self.recs[keep], self.shards[keep], self.offsets[keep], self.sizes[keep])


async def _cancel_tasks() -> None:
    """Cancel every other task of the running loop and wait until they have ended."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _allocated(runs: list[tuple[int, int, int, np.ndarray]]) -> int:
    """The bytes of file blocks that fetching `runs` (shard, start, end, records) allocates at
    most in the mirror's sparse files: each run widened to whole 4 KiB blocks."""
    return sum((end + 4095) // 4096 * 4096 - start // 4096 * 4096 for _, start, end, _ in runs)


def shard_name(k: int) -> str:
    """The name of shard `k`'s file (spec §3)."""
    return f"data-{k:03d}.zrd"


class _Plan(NamedTuple):
    """What a mirror holds (Mirror._plan): header.zrh's bytes; what the core read in them
    (_native.header_layout); index.zri's size (None: not fetched, as the native open fails
    before reading it); the shards' sizes, up to the first shard missing (None); index.zrs's
    size (None: a store without index parts, or index.zri not fetched); whether the index is
    fetched by part as gathers need it (else whole, when the mirror is made)."""

    header: bytearray
    layout: dict[str, Any]
    index_size: int | None
    shard_sizes: list[int | None]
    sums_size: int | None
    by_part: bool


def _parts_bytes(layout: Mapping[str, Any]) -> int:
    """The size of parts.bits: one bit per sum group, then one per index block."""
    return (int(layout["sum_groups"]) + int(layout["index_blocks"]) + 7) // 8

