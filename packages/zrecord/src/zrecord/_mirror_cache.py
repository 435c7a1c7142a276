"""The byte budget of a remote store's mirror (``storage_options["cache_bytes"]``): which parts
of its sparse shard files were used last and when its readers expect to use them next, and the
eviction that punches out the parts needed farthest ahead (or, where nobody knows, used least
recently) when the mirror holds more than its budget.

Invariants of this module:
- Correctness never depends on it. The native reader of a mirror checks every read against the
  record's checksum (``ZR_OPEN_CHECK_EVERY_READ``), so a record read while its bytes are being
  punched out reads as zeros, fails, and is fetched again (``Mirror.read``). Eviction keeps the
  presence bits honest so that such retries stay rare: a chunk's records lose their bit before
  its bytes are punched.
- Every punch is counted, so that a reader can tell a record punched under it from a corrupt
  one: the first word of ``lru.u64`` (the *punch word*) goes up by one just before a chunk is
  punched and by one again just after, so it is odd while a punch is under way and
  ``punches_since`` counts the punch under way at a reader's first look as one that came after
  it. Each punch damages a record's bytes at most once between two fetches of it (a fetch that
  follows the punch finds the punch complete: the file system orders them), so a record read
  fails at most once more than the punches counted since the read began (``Mirror.read``).
  Only readers with a budget share a mirror that has one (``Mirror._key``): a reader without
  one never stamps what it fetches, so its bytes could never be evicted.
- The unit is a chunk: ``chunk_bytes_for(the shards' bytes)`` of one shard file (the same for
  every reader of the store). ``lru.u64`` holds after its punch word,
  per chunk, the time (ns since the epoch) of its last write or read, 0 for a chunk holding
  nothing this module knows of, with ``FRESH`` set when that was a write (fetched, not read
  since); then, per chunk, its *hint*: the time at which a reader that knows its future
  expects to read it next (``_foresight``), 0 for none. A file made before hints existed is
  lengthened with zeros (no hints), so older readers of the same mirror go on with theirs.
- Eviction order (Belady's rule where the future is known, LRU where it is not): first the
  chunks without a live hint (none, or older than ``HINT_GRACE_NS``: its reader stalled or
  left), least recently used first; then those with one, the latest hint first (needed
  farthest ahead). Without any reader that foresees, every hint is 0: plain LRU.
- Fresh chunks without a live hint are evicted only after ``FRESH_NS``: they hold records
  fetched for batches in flight or read ahead, and punching them out would make their gather
  fetch them again. A fresh chunk with a live hint is ordered by its hint like any other (a
  read planned far ahead must not outrank what is read before it).
- Belady's rule at admission too (``reserve(beyond=T)``): a gather whose chunks a reader
  foresees evicts only chunks foreseen later than its own (never what the gathers of earlier
  steps, in flight beside it, are about to read), and a read planned ahead only what is
  foreseen well after its steps (``Foresight.room_after``); both may evict what nobody
  foresees. A gather that still does not fit and has no other gather of this process in
  flight (or has waited for them) evicts in Belady's order over everything foreseen: hints
  follow delivered steps, so the step a loader has just gathered still looks foreseen.
- Admission: a fetch is admitted before it starts (``reserve``): room is made for it and for
  this process's other fetches under way into the mirror, of every reader of it in the
  process (one ``_Admission`` per mirror, shared), and a prefetch fetches no more than fits, so the
  mirror holds at most its budget at its peak, not only after a trim; it exceeds it only by
  a batch whose own chunks (with those fetched and not read yet) are more than the budget,
  or by fetches of other processes admitted at the same moment. An
  eviction chooses from a snapshot of the stamps and passes over a chunk whose stamp changed
  since (fetched or read meanwhile).
- What the mirror holds is what its shard files have allocated (``st_blocks``), measured after
  every fetch, not an estimate kept in memory: several processes share one mirror.
- One eviction at a time per mirror on a host: an exclusive ``flock`` on ``lru.u64`` (and a lock
  for the threads of this process), never waited for: whoever finds it taken leaves the work to
  the holder. Readers and fetches take no lock. A forked child opens ``lru.u64`` again for its
  flock (``after_fork``): through the parent's descriptor it would share the parent's lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as _errno
import fcntl
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, BinaryIO, cast

import numpy as np

from zrecord._index import distinct

# Chunks are as small as a punched hole can be (a 4 KiB file system block), so that an
# eviction frees little of the records around it that are still wanted (256 KiB chunks cost
# 21% more fetches than the optimum on 147 KiB photographs, 4 KiB ones 1.4%), and grow with the
# store so that it has at most CHUNKS_MAX of them (16 bytes each in lru.u64: 64 MiB; 256 KiB
# chunks from a 1 TiB store up).
CHUNK_BYTES_MIN = 4 << 10
CHUNKS_MAX = 1 << 22
# The most one punch frees: neighbouring chunks chosen by one eviction are punched together, up
# to this many bytes (a punch is a system call, and one chunk of 4 KiB each would be slow).
PUNCH_RUN_BYTES = 4 << 20
# How long a gather's fetch waits for the gathers in flight to read theirs before it is made
# anyway (reserve): a fetch stalled by the network must not stall every gather.
ROOM_WAIT_S = 10.0
# How often a fetch waiting for room looks again without being woken (another process's
# eviction or reads free room without a notification in this one).
ROOM_POLL_S = 0.5
# The most eviction passes a fetch that must be made runs to fit the budget (reserve).
EVICT_PASSES_MAX = 4
# The smallest budget: a batch fetched must fit, or the eviction after it would punch out what
# the gather is about to read.
BUDGET_MIN_BYTES = 4 << 20
# An eviction frees down to this share of the budget, so that it runs once per tenth of the
# budget fetched rather than after every fetch.
LOW_WATER = 0.9
# Stamp bit of a chunk written and not read since, and how long that protects it from eviction
# (a reader that fetched ahead and died leaves such chunks behind).
FRESH = 1 << 63
FRESH_NS = 60 * 10**9
# A hint older than this counts as none: its reader has stalled or gone (a live reader
# renews its hints as its steps go by: _foresight).
HINT_GRACE_NS = 30 * 10**9

_FALLOC_FL_KEEP_SIZE = 1
_FALLOC_FL_PUNCH_HOLE = 2
_libc: Any = None


def _punch(fd: int, offset: int, length: int) -> None:
    """Deallocate bytes [offset, offset + length) of the file `fd`, keeping its size (the range
    then reads as zeros)."""
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        lib.fallocate.restype = ctypes.c_int
        _libc = lib
    if _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def file_of(fd: int, path: str, mode: str) -> BinaryIO:
    """A file object of a copy of descriptor `fd` named `path` (what np.memmap records as its
    filename): a memmap made of a descriptor opened and checked by the mirror, never of a name
    that a link may have taken since."""
    return cast(BinaryIO, open(path, mode, opener=lambda _path, _flags: os.dup(fd)))  # noqa: SIM115


def chunk_bytes_for(store_bytes: int) -> int:
    """The chunk of a store whose shards hold `store_bytes`: CHUNK_BYTES_MIN, doubled until
    the store has at most CHUNKS_MAX chunks."""
    chunk = CHUNK_BYTES_MIN
    while chunk * CHUNKS_MAX < store_bytes:
        chunk *= 2
    return chunk


def parse_budget(value: Any) -> int | None:
    """``cache_bytes``: None (no bound) or a whole number of bytes of at least BUDGET_MIN_BYTES."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"storage option cache_bytes must be a number of bytes or None; got {value!r}")
    if int(value) < BUDGET_MIN_BYTES:
        raise ValueError(f"storage option cache_bytes must be at least {BUDGET_MIN_BYTES} "
                         f"({BUDGET_MIN_BYTES >> 20} MiB, room for the batches being read); got {value}")
    return int(value)


class _Admission:
    """What this process's fetches into one mirror were admitted for, shared by every reader
    of the mirror in the process (``reserve``): two readers of one mirror each counting only
    their own fetches admitted theirs together past the budget (by 15-47% in one process)."""

    def __init__(self) -> None:
        self.room = threading.Condition(threading.Lock())
        # Bytes the fetches under way were admitted for (reserve, release): what the shard
        # files do not hold yet but will.
        self.reserved = 0
        # Gathers admitted and not done reading (hold, finished): their chunks become
        # evictable once read, so a gather that does not fit waits for them.
        self.holding = 0
        self.readers = 0


# The admissions of the mirrors this process reads, by their lru.u64 (device, inode).
_admissions: dict[tuple[int, int], _Admission] = {}
_admissions_lock = threading.Lock()


def _admission_of(lock_fd: int) -> tuple[tuple[int, int], _Admission]:
    """The admission this process shares for the mirror whose lru.u64 is `lock_fd`, counted as
    used by one more reader (``_admission_done``)."""
    st = os.fstat(lock_fd)
    key = (st.st_dev, st.st_ino)
    with _admissions_lock:
        admission = _admissions.setdefault(key, _Admission())
        admission.readers += 1
        return key, admission


def _admission_done(key: tuple[int, int], admission: _Admission) -> None:
    with _admissions_lock:
        admission.readers -= 1
        if admission.readers <= 0 and _admissions.get(key) is admission:
            del _admissions[key]


def _admissions_after_fork() -> None:
    """In a forked child: the parent's fetches and gathers are not its own, and a thread of
    the parent may have held the lock."""
    global _admissions_lock
    _admissions.clear()
    _admissions_lock = threading.Lock()


os.register_at_fork(after_in_child=_admissions_after_fork)


class Budget:
    """The LRU state and eviction of one mirror (module docstring)."""

    def __init__(self, root_fd: int, lru: tuple[int, str], shard_paths: list[str | None],
                 shard_sizes: list[int], locate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]],
                 records: int, present: np.ndarray, budget: int, fd_of: Callable[[int], int]) -> None:
        """`root_fd` is the mirror's folder and `lru` the descriptor and path of its lru.u64, both
        opened by the mirror without following links and checked; the descriptor is the
        budget's from here on (its eviction lock), closed by close(), or here on failure.
        `locate(recs)` says where records `recs` (distinct, valid) of the store's `records`
        lie: their shards, offsets and stored sizes, as the core reads them in the index."""
        lock_fd, path = lru
        try:
            self.budget = budget
            self._fd = fd_of  # the mirror's writable descriptor of a shard
            # The shards the mirror holds files of (an empty shard has none).
            self._held = [k for k, p in enumerate(shard_paths) if p is not None]
            self._locate, self._records = locate, records
            self._present = present
            self.stored_bytes = sum(shard_sizes)
            self.chunk_bytes = chunk = chunk_bytes_for(self.stored_bytes)
            counts = [-(-size // chunk) if p is not None else 0
                      for p, size in zip(shard_paths, shard_sizes)]
            self._base = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
            self._probe_punch(root_fd)
            self.chunk_count = int(self._base[-1])
            words = 1 + 2 * self.chunk_count
            if os.fstat(lock_fd).st_size < 8 * words:
                os.ftruncate(lock_fd, 8 * words)
            with file_of(lock_fd, path, "r+b") as f:
                self._words = np.memmap(f, "<u8", "r+", shape=(words,))
        except BaseException:
            os.close(lock_fd)
            raise
        self._stamps = self._words[1:1 + self.chunk_count]
        self._hints = self._words[1 + self.chunk_count:]
        self._lock_fd = lock_fd
        # Held by every eviction, and by close(): no punch runs once close() has returned, so
        # a shard descriptor closed after it, its number reused by another file, is never
        # punched (that would zero part of an unrelated file).
        self._thread_lock = threading.Lock()
        self._closed = False
        self._by_shard: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.evicted_bytes = 0
        self._admission_key, self._admission = _admission_of(lock_fd)
        # What a budget collected without close() (its reader dropped unclosed) releases:
        # _budget_dropped, which close() detaches; kept current after a fork (_adopt).
        self._release: list[Any] = [lock_fd, self._admission_key, self._admission]
        self._finalizer = weakref.finalize(self, _budget_dropped, self._release)
        self._finalizer.atexit = False  # at exit, a daemon thread may still be evicting

    @staticmethod
    def _probe_punch(root_fd: int) -> None:
        probe = f".punch-{os.getpid()}-{threading.get_ident()}"
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(probe, flags, 0o600, dir_fd=root_fd)
        try:
            os.write(fd, b"\0" * 8192)
            _punch(fd, 0, 4096)
        except OSError as exc:
            if exc.errno in (_errno.EOPNOTSUPP, _errno.ENOSYS, _errno.EINVAL):
                raise ValueError("storage option cache_bytes needs a cache folder on a file system "
                                 "that can punch holes in files (fallocate PUNCH_HOLE: ext4, xfs, "
                                 "btrfs, tmpfs); this one cannot") from None
            raise
        finally:
            os.close(fd)
            os.unlink(probe, dir_fd=root_fd)

    # -- what was used ----------------------------------------------------------------------

    def _chunks(self, shards: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Every chunk that the byte ranges [starts, ends) of `shards` touch."""
        keep = ends > starts
        return _expand(*self._chunk_ranges(shards[keep], starts[keep], ends[keep]))

    def _chunk_ranges(self, shards: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The first chunk and the number of chunks (int64) of each byte range [start, end)
        (not empty) of `shards`."""
        shards, starts, ends = shards.astype(np.int64), starts.astype(np.int64), ends.astype(np.int64)
        first: np.ndarray = self._base[shards] + starts // self.chunk_bytes
        last: np.ndarray = self._base[shards] + (ends - 1) // self.chunk_bytes
        return first, last - first + 1

    def chunks_of(self, recs: np.ndarray) -> np.ndarray:
        """The chunks that records `recs` lie in."""
        recs = distinct(recs[(recs >= 0) & (recs < self._records)]).astype(np.uint64)
        return self.chunks_at(*self._locate(recs))

    def chunks_at(self, shards: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """The chunks of records that lie at `offsets` of `shards`, `sizes` bytes each (what
        the caller located already)."""
        return self._chunks(shards, offsets, offsets + sizes)

    def hint(self, chunks: np.ndarray, times: np.ndarray, mine: np.ndarray) -> None:
        """A reader that knows its future expects to read chunks `chunks` (distinct) next at
        `times` (ns since the epoch; 0: not in its horizon). `mine` is that reader's memory of
        the hints it wrote, by chunk (updated here). A hint of another reader that is still
        live and earlier is kept; the reader's own earlier hints, and stale ones, are replaced.
        Unlocked: a hint lost to a race costs at most a fetch, never a wrong record."""
        if chunks.shape[0] == 0:
            return
        times = times.astype(np.uint64)
        now = np.uint64(time.time_ns())
        held = np.asarray(self._hints[chunks])
        other = (held != mine[chunks]) & (held + np.uint64(HINT_GRACE_NS) >= now) & (held != 0)
        earlier = other & ((times == 0) | (held < times))
        self._hints[chunks] = np.where(earlier, held, times)
        mine[chunks] = times

    def stored_sizes(self, recs: np.ndarray) -> np.ndarray:
        """The stored sizes of records `recs` (distinct, valid), as uint64."""
        return self._locate(recs)[2]

    def chunk_spans(self, recs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The first and last chunk (int64) that each of records `recs` (distinct, valid)
        lies in; an empty record lies in none (last = first - 1): it needs no bytes, and may
        lie at the end of its shard, past the last chunk."""
        shards, offsets, sizes = self._locate(recs)
        base = self._base[shards.astype(np.int64)]
        offsets, sizes = offsets.astype(np.int64), sizes.astype(np.int64)
        first = base + offsets // self.chunk_bytes
        last = np.where(sizes > 0, base + (offsets + sizes - 1) // self.chunk_bytes, first - 1)
        return first, last

    def _live_hints(self, chunks: np.ndarray) -> np.ndarray:
        """The hints of chunks `chunks`, 0 where none is live (module docstring)."""
        hints = np.array(self._hints[chunks])
        hints[hints + np.uint64(HINT_GRACE_NS) < np.uint64(time.time_ns())] = 0
        return hints

    def foreseen_by(self, chunks: np.ndarray) -> int | None:
        """The latest live hint of chunks `chunks` (a batch's): the time by which a reader that
        knows its future reads them; None where none of them has one."""
        latest = int(self._live_hints(chunks).max()) if chunks.shape[0] else 0
        return latest or None

    def soonest(self, shards: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """For each byte range [start, end) (not empty) of `shards`, the earliest live hint of
        the chunks it lies in: when a reader that knows its future first reads any of them
        (2**64 - 1: none does)."""
        first, spans = self._chunk_ranges(shards, starts, ends)
        hints = self._live_hints(_expand(first, spans))
        hints[hints == 0] = np.uint64((1 << 64) - 1)
        soonest: np.ndarray = np.minimum.reduceat(hints, np.cumsum(spans) - spans)
        return soonest

    def touch(self, chunks: np.ndarray) -> None:
        """Chunks `chunks` (``chunks_of`` a batch) were read now."""
        self._stamps[chunks] = time.time_ns()

    def expect(self, chunks: np.ndarray) -> None:
        """Chunks `chunks` are to be read soon (a prefetch of records the mirror holds): those
        held are stamped as if just fetched (FRESH)."""
        held = chunks[np.asarray(self._stamps[chunks]) != 0]
        self._stamps[held] = np.uint64(time.time_ns() | FRESH)

    def shelter(self, chunks: np.ndarray) -> None:
        """Chunks `chunks` hold a gather's records that evictions punched out under it: their
        hints are cleared, so that once fetched again (FRESH) no eviction takes them before they
        are read (``touch``) or FRESH_NS has passed. Otherwise readers sharing a budget too
        small for their gathers together punch each other's foreseen records out again and
        again, and a record failed its read as corrupt after _REFETCHES_MAX tries. The mirror
        may then go past its budget by such a batch, as ``reserve`` allows. Unlocked: a
        reader's next refresh may hint them again, which costs at most a fetch."""
        self._hints[chunks] = 0

    def wrote(self, shard: int, start: int, end: int) -> None:
        """Bytes [start, end) of shard `shard` were written now, to be read soon (FRESH)."""
        chunks = self._chunks(np.array([shard]), np.array([start]), np.array([end]))
        self._stamps[chunks] = np.uint64(time.time_ns() | FRESH)

    def used(self) -> int:
        """Bytes the shard files hold on disk, through the mirror's own descriptors (never a
        name)."""
        return sum(os.fstat(self._fd(k)).st_blocks * 512 for k in self._held)

    def evictions(self) -> int:
        """Chunks punched out of this mirror so far, by every process on the host."""
        return self.punch_word() >> 1

    def punch_word(self) -> int:
        """The punch word now (module docstring; compare two with ``punches_since``)."""
        return int(self._words[0])

    # -- eviction ---------------------------------------------------------------------------

    def check(self, keep: np.ndarray | None = None) -> None:
        """After a fetch: evict, in the module's order, down to LOW_WATER of the
        budget when the mirror holds more than the budget, never the chunks `keep` (those of
        the batch being read: a batch larger than the budget would otherwise punch out its own
        records); nothing when another thread or process is evicting it. Every reader checks
        after every gather, fetched or not, since the readers of a host share the budget."""
        if self.used() <= self.budget or not self._thread_lock.acquire(blocking=False):
            return
        try:
            if self._closed:
                return
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            try:
                self._evict(keep)
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def after_fork(self) -> None:
        """In a process forked from this budget's: an eviction lock of its own. The inherited
        descriptor shares the parent's open file description, whose flock the parent may hold,
        so flock through it would not exclude the parent's evictions (nor the parent's, this
        process's); and the thread lock may have been held by a thread that is not here."""
        path = self._words.filename
        assert path is not None  # a memmap of lru.u64, made by __init__
        inherited, self._lock_fd = self._lock_fd, os.open(path, os.O_RDWR)
        os.close(inherited)
        self._thread_lock = threading.Lock()
        # The parent's fetches and gathers are not this process's (the registry was emptied
        # at the fork): one admission shared with this process's other readers of the mirror.
        self._admission_key, self._admission = _admission_of(self._lock_fd)
        self._release[:] = [self._lock_fd, self._admission_key, self._admission]

    def reserve(self, incoming: int, keep: np.ndarray | None = None, *, partial: bool = False,
                hold: bool = False, own: int = 0, beyond: int | None = None) -> int:
        """Admit a fetch of `incoming` bytes (file blocks it allocates): evict, in the module's
        order and never `keep` nor chunks fetched and not read yet, so that what the
        mirror holds, with what this process's other fetches were admitted for, stays within
        the budget after it; then count it as admitted until `release`. Returns the bytes
        admitted: `incoming` (a gather's fetch, which must be made), or with `partial` what
        fits (a prefetch's, which fetches no more). A gather's fetch (`hold`) that does not fit
        while other gathers of this process are admitted and not done reading waits for them
        (their records become evictable once read; ROOM_WAIT_S at most), so that the
        gathers in flight share the budget instead of exceeding it together; it then counts
        as holding until `finished`. `own`: how many of the holds are the caller's own (a
        gather that fetches again), which it does not wait for. With `beyond` (a time, ns
        since the epoch), it evicts only chunks that no reader foresees or that are foreseen
        later than that: a fetch planned ahead for steps read by then must not take the room
        of what is read before them (Belady's rule, applied to admission)."""
        deadline = time.monotonic() + ROOM_WAIT_S
        admission = self._admission
        with admission.room:
            while True:
                if self.used() + admission.reserved + incoming > self.budget:
                    self._evict_locked(keep, incoming + admission.reserved, beyond)
                fits = self.used() + admission.reserved + incoming <= self.budget
                left = deadline - time.monotonic()
                last = not hold or admission.holding <= own or left <= 0
                if not fits and not partial and last and beyond is not None:
                    # A fetch that must be made, and no other gather of this process is
                    # reading what is foreseen before it (their hints lag the reads): every
                    # foreseen chunk in Belady's order rather than past the budget. Again, on
                    # a fresh snapshot, while it does not fit and a pass passed over chunks
                    # whose stamps changed under it (a prefetch of held records marking them
                    # expected meanwhile): that took the mirror 1 MiB past a 5 MiB budget in
                    # about 1 run of 50 on starved cores.
                    for _ in range(EVICT_PASSES_MAX):
                        raced = self._evict_locked(keep, incoming + admission.reserved)
                        fits = self.used() + admission.reserved + incoming <= self.budget
                        if fits or not raced:
                            break
                # Closed meanwhile: nothing more to wait for (the caller's fetch then raises
                # ClosedError); close() wakes the waiters.
                if partial or fits or last or self._closed:
                    break
                admission.room.wait(min(left, ROOM_POLL_S))
            granted = incoming
            if partial:
                granted = max(0, min(incoming, self.budget - self.used() - admission.reserved))
            admission.reserved += granted
            admission.holding += hold
            return granted

    def _evict_locked(self, keep: np.ndarray | None, incoming: int, beyond: int | None = None) -> int:
        """`_evict` under the eviction locks; what it passed over (0 when another process
        evicts)."""
        with self._thread_lock:
            if self._closed:
                return 0
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0  # another process evicts: it frees what it can
            try:
                return self._evict(keep, incoming, beyond)
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def release(self, admitted: int) -> None:
        """A fetch admitted for `admitted` bytes (`reserve`) has ended: its bytes are in the
        files now (or it failed)."""
        with self._admission.room:
            self._admission.reserved -= admitted
            self._admission.room.notify_all()

    def finished(self) -> None:
        """A gather admitted with `hold` has read its records (or failed): they are evictable
        now, and gathers waiting for room look again."""
        with self._admission.room:
            self._admission.holding -= 1
            self._admission.room.notify_all()

    def _evict(self, keep: np.ndarray | None, incoming: int = 0, beyond: int | None = None) -> int:
        """Evict so that `incoming` more bytes fit (module docstring); returns how many chosen
        chunks it passed over because their stamps changed since its snapshot."""
        # Measured again under the lock: another process may have evicted just before it.
        used = self.used()
        if used + incoming <= self.budget:
            return 0
        stamps = np.array(self._stamps)  # one snapshot: readers and fetches go on meanwhile
        now = time.time_ns()
        when = stamps & np.uint64(FRESH - 1)
        held = stamps != 0
        if keep is not None:
            held[keep] = False
        held = np.flatnonzero(held)
        hints = np.asarray(self._hints[held])
        live = hints + np.uint64(HINT_GRACE_NS) >= np.uint64(now)
        # Fresh protects what was fetched for a reader that did not tell when it reads it; a
        # chunk foreseen is ordered by its hint like the others.
        fresh = ((stamps[held] & np.uint64(FRESH)) != 0) & (when[held] > np.uint64(max(0, now - FRESH_NS)))
        unknown, known, hints = held[~live & ~fresh], held[live], hints[live]
        if beyond is not None:
            later = hints > np.uint64(beyond)
            known, hints = known[later], hints[later]
        # Chunks nobody foresees go down to LOW_WATER (an eviction per tenth of the budget
        # fetched); chunks some reader will read again only as far as the budget requires:
        # each of those punched out is a fetch to come.
        used, passed = self._evict_in(unknown[np.argsort(when[unknown], kind="stable")], stamps,
                                      used, int(self.budget * LOW_WATER) - incoming)
        return passed + self._evict_in(known[np.argsort(hints, kind="stable")[::-1]], stamps, used,
                                       self.budget - incoming)[1]

    def _evict_in(self, order: np.ndarray, stamps: np.ndarray, used: int,
                  target: int) -> tuple[int, int]:
        """Punch out chunks of `order`, first first, until the mirror holds at most `target`
        bytes; a chunk whose stamp is no longer its `stamps` snapshot (fetched or read since)
        is passed over. Returns the bytes held then and the chunks passed over."""
        at = passed = 0
        while used > target and at < order.shape[0]:
            n = max(1, -(-(used - target) // self.chunk_bytes))
            chunks, at = order[at:at + n], at + n
            # Not fetched or read since the snapshot; neighbours in one shard punched at once,
            # the runs in the order of their first chosen chunk.
            chosen = chunks.shape[0]
            chunks = chunks[np.asarray(self._stamps[chunks]) == stamps[chunks]]
            passed += chosen - chunks.shape[0]
            rank = np.argsort(chunks, kind="stable")
            chunks = chunks[rank]
            shard_of = np.searchsorted(self._base, chunks, side="right") - 1
            cut = np.flatnonzero((np.diff(chunks) != 1) | (np.diff(shard_of) != 0)) + 1
            most = max(1, PUNCH_RUN_BYTES // self.chunk_bytes)
            runs = [(int(r[k:k + most].min()), run[k:k + most])
                    for run, r in zip(np.split(chunks, cut), np.split(rank, cut))
                    for k in range(0, run.shape[0], most)]
            for _, run in sorted(runs, key=lambda pair: pair[0]):
                self._punch_run(run)
            now = self.used()
            self.evicted_bytes += max(0, used - now)
            used = now
        return used, passed

    def _punch_run(self, run: np.ndarray) -> None:
        """Punch out chunks `run` (consecutive, of one shard): their records lose their bits
        first, and the punch word is odd while the punch is under way (module docstring)."""
        self._forget(run.astype(np.int64))
        first = int(run[0])
        shard = int(np.searchsorted(self._base, first, side="right")) - 1
        start = (first - int(self._base[shard])) * self.chunk_bytes
        self._words[0] += 1
        try:
            self._stamps[run] = 0
            _punch(self._fd(shard), start, run.shape[0] * self.chunk_bytes)
        finally:
            self._words[0] += 1

    def _forget(self, chunks: np.ndarray) -> None:
        """Clear the presence bits of every record whose bytes lie in `chunks`."""
        shard_of = np.searchsorted(self._base, chunks, side="right") - 1
        found = []
        for shard in np.unique(shard_of).tolist():
            ids, starts = self._places_of(shard)
            a = (chunks[shard_of == shard] - self._base[shard]) * self.chunk_bytes
            lo = np.maximum(np.searchsorted(starts, a, side="right") - 1, 0)
            hi = np.searchsorted(starts, a + self.chunk_bytes, side="left")
            for x, y in zip(lo.tolist(), hi.tolist()):
                found.append(ids[x:y])
        if found:
            recs = np.concatenate(found).astype(np.int64)
            np.bitwise_and.at(self._present, recs >> 3, ~(1 << (recs & 7)).astype(np.uint8))

    def _places_of(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        """The records of `shard` sorted by offset, and their offsets (built once)."""
        if shard not in self._by_shard:
            shards, offsets, _ = self._locate(np.arange(self._records, dtype=np.uint64))
            ids = np.flatnonzero(shards == shard)
            starts = np.asarray(offsets[ids], dtype=np.int64)
            if starts.shape[0] > 1 and bool((np.diff(starts) < 0).any()):
                order = np.argsort(starts, kind="stable")
                ids, starts = ids[order], starts[order]
            self._by_shard[shard] = (ids, starts)
        return self._by_shard[shard]

    def close(self) -> None:
        """Once an eviction under way has ended: no eviction after it (the caller closes the
        shard descriptors after this)."""
        self._finalizer.detach()
        with self._thread_lock:
            self._closed = True
            _admission_done(self._admission_key, self._admission)
            os.close(self._lock_fd)
            self._by_shard = {}
        # A gather of this reader waiting for room (reserve) stops waiting now, not at its
        # next timeout (up to ROOM_WAIT_S). Outside the eviction lock: reserve takes the room's
        # lock first and the eviction lock under it.
        with self._admission.room:
            self._admission.room.notify_all()


def _budget_dropped(held: list[Any]) -> None:
    """A budget collected without close(): its lru.u64 descriptor closed and its share of
    the process's admission given back."""
    fd, key, admission = held
    with contextlib.suppress(OSError):
        os.close(fd)
    _admission_done(key, admission)


def _expand(first: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Chunks first[k] .. first[k] + spans[k] - 1 of every k, in order."""
    if first.size == 0 or int(spans.max()) == 1:
        return first
    within = np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans)
    out: np.ndarray = np.repeat(first, spans) + within
    return out


def punches_since(before: int, now: int) -> int:
    """The punches begun between two looks at a punch word, `before` and `now`, the one under
    way at the first look included (module docstring)."""
    return (now - (before & ~1) + 1) >> 1
