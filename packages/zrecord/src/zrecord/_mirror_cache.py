"""The byte budget of a remote store's mirror (``storage_options["cache_bytes"]``): which parts
of its sparse shard files were used last, and the eviction that punches the least recently
used parts out when the mirror holds more than its budget.

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
  Readers of a mirror without a budget of their own read the word too (``PunchWord``).
- The unit is a chunk: ``CHUNK_BYTES`` of one shard file. ``lru.u64`` holds after its punch word,
  per chunk, the time (ns since the epoch) of its last write or read, 0 for a chunk holding
  nothing this module knows of, with ``FRESH`` set when that was a write (fetched, not read
  since).
- Fresh chunks are evicted only after ``FRESH_NS``: they hold records fetched for batches in
  flight or read ahead, and punching them out would make their gather fetch them again.
- Admission: a fetch is admitted before it starts (``reserve``): room is made for it and for
  this process's other fetches under way, and a prefetch fetches no more than fits, so the
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

import ctypes
import errno as _errno
import fcntl
import os
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO, cast

import numpy as np

# Chunks of 256 KiB: 4 bytes of LRU state per MiB of store, and a punch frees at most this much
# of records that were still wanted.
CHUNK_BYTES = 256 << 10
# The smallest budget: a batch fetched must fit, or the eviction after it would punch out what
# the gather is about to read.
BUDGET_MIN_BYTES = 16 * CHUNK_BYTES
# An eviction frees down to this share of the budget, so that it runs once per tenth of the
# budget fetched rather than after every fetch.
LOW_WATER = 0.9
# Stamp bit of a chunk written and not read since, and how long that protects it from eviction
# (a reader that fetched ahead and died leaves such chunks behind).
FRESH = 1 << 63
FRESH_NS = 60 * 10**9

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
            counts = [-(-size // CHUNK_BYTES) if p is not None else 0
                      for p, size in zip(shard_paths, shard_sizes)]
            self._base = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
            self._probe_punch(root_fd)
            words = 1 + int(self._base[-1])
            if os.fstat(lock_fd).st_size < 8 * words:
                os.ftruncate(lock_fd, 8 * words)
            with file_of(lock_fd, path, "r+b") as f:
                self._words = np.memmap(f, "<u8", "r+", shape=(words,))
        except BaseException:
            os.close(lock_fd)
            raise
        self._stamps = self._words[1:]
        self._lock_fd = lock_fd
        self._thread_lock = threading.Lock()
        self._by_shard: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.evicted_bytes = 0
        # Bytes this process's fetches under way were admitted for (reserve, release): what
        # the shard files do not hold yet but will.
        self._reserved = 0
        self._reserve_lock = threading.Lock()

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
        shards, starts, ends = shards[keep].astype(np.int64), starts[keep].astype(np.int64), ends[keep].astype(np.int64)
        first: np.ndarray = self._base[shards] + starts // CHUNK_BYTES
        last: np.ndarray = self._base[shards] + (ends - 1) // CHUNK_BYTES
        if first.size == 0 or int((last - first).max()) == 0:
            return first
        spans = last - first + 1
        within = np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans)
        out: np.ndarray = np.repeat(first, spans) + within
        return out

    def chunks_of(self, recs: np.ndarray) -> np.ndarray:
        """The chunks that records `recs` lie in."""
        recs = np.unique(recs[(recs >= 0) & (recs < self._records)]).astype(np.uint64)
        return self.chunks_at(*self._locate(recs))

    def chunks_at(self, shards: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """The chunks of records that lie at `offsets` of `shards`, `sizes` bytes each (what
        the caller located already)."""
        return self._chunks(shards, offsets, offsets + sizes)

    def touch(self, chunks: np.ndarray) -> None:
        """Chunks `chunks` (``chunks_of`` a batch) were read now."""
        self._stamps[chunks] = time.time_ns()

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
        """After a fetch: evict, least recently used chunks first, down to LOW_WATER of the
        budget when the mirror holds more than the budget, never the chunks `keep` (those of
        the batch being read: a batch larger than the budget would otherwise punch out its own
        records); nothing when another thread or process is evicting it. Every reader checks
        after every gather, fetched or not, since the readers of a host share the budget."""
        if self.used() <= self.budget or not self._thread_lock.acquire(blocking=False):
            return
        try:
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

    def reserve(self, incoming: int, keep: np.ndarray | None = None, *, partial: bool = False) -> int:
        """Admit a fetch of `incoming` bytes (file blocks it allocates): evict, least recently
        used first and never `keep` nor chunks fetched and not read yet, so that what the
        mirror holds, with what this process's other fetches were admitted for, stays within
        the budget after it; then count it as admitted until `release`. Returns the bytes
        admitted: `incoming` (a gather's fetch, which must be made), or with `partial` what
        fits (a prefetch's, which fetches no more)."""
        with self._reserve_lock:
            if self.used() + self._reserved + incoming > self.budget:
                with self._thread_lock:
                    try:
                        fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        pass  # another process evicts: it frees what it can
                    else:
                        try:
                            self._evict(keep, incoming + self._reserved)
                        finally:
                            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            granted = incoming
            if partial:
                granted = max(0, min(incoming, self.budget - self.used() - self._reserved))
            self._reserved += granted
            return granted

    def release(self, admitted: int) -> None:
        """A fetch admitted for `admitted` bytes (`reserve`) has ended: its bytes are in the
        files now (or it failed)."""
        with self._reserve_lock:
            self._reserved -= admitted

    def _evict(self, keep: np.ndarray | None, incoming: int = 0) -> None:
        # Measured again under the lock: another process may have evicted just before it.
        used = self.used()
        target = int(self.budget * LOW_WATER) - incoming
        if used + incoming <= self.budget:
            return
        stamps = np.array(self._stamps)  # one snapshot: readers and fetches go on meanwhile
        when = stamps & np.uint64(FRESH - 1)
        fresh = (stamps & np.uint64(FRESH)) != 0
        held = (stamps != 0) & ~(fresh & (when > np.uint64(max(0, time.time_ns() - FRESH_NS))))
        if keep is not None:
            held[keep] = False
        held = np.flatnonzero(held)
        order = held[np.argsort(when[held], kind="stable")]
        at = 0
        while used > target and at < order.shape[0]:
            n = max(1, -(-(used - target) // CHUNK_BYTES))
            chunks, at = order[at:at + n], at + n
            for c in chunks.tolist():
                if self._stamps[c] == stamps[c]:  # not fetched or read since the snapshot
                    self._punch_chunk(c)
            now = self.used()
            self.evicted_bytes += max(0, used - now)
            used = now

    def _punch_chunk(self, c: int) -> None:
        """Punch chunk `c` out: its records lose their bits first, and the punch word is odd
        while the punch is under way (module docstring)."""
        self._forget(np.array([c], np.int64))
        shard = int(np.searchsorted(self._base, c, side="right")) - 1
        start = (c - int(self._base[shard])) * CHUNK_BYTES
        self._words[0] += 1
        try:
            self._stamps[c] = 0
            _punch(self._fd(shard), start, CHUNK_BYTES)
        finally:
            self._words[0] += 1

    def _forget(self, chunks: np.ndarray) -> None:
        """Clear the presence bits of every record whose bytes lie in `chunks`."""
        shard_of = np.searchsorted(self._base, chunks, side="right") - 1
        found = []
        for shard in np.unique(shard_of).tolist():
            ids, starts = self._places_of(shard)
            a = (chunks[shard_of == shard] - self._base[shard]) * CHUNK_BYTES
            lo = np.maximum(np.searchsorted(starts, a, side="right") - 1, 0)
            hi = np.searchsorted(starts, a + CHUNK_BYTES, side="left")
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
        os.close(self._lock_fd)
        self._by_shard = {}


def punches_since(before: int, now: int) -> int:
    """The punches begun between two looks at a punch word, `before` and `now`, the one under
    way at the first look included (module docstring)."""
    return (now - (before & ~1) + 1) >> 1


class PunchWord:
    """The punch word of a shared mirror, for a reader without a budget of its own: readers
    with one punch its records all the same. 0 until one of them has made ``lru.u64``."""

    def __init__(self, root: str) -> None:
        self._path = os.path.join(root, "lru.u64")
        self._word: np.memmap[Any, np.dtype[np.uint64]] | None = None

    def __call__(self) -> int:
        if self._word is None:
            try:
                self._word = np.memmap(self._path, "<u8", "r", shape=(1,))
            except (OSError, ValueError):  # not made yet, or being made (still empty)
                return 0
        return int(self._word[0])
