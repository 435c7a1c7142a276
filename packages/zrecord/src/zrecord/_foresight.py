"""The known future of a reader of a remote store's mirror (``Reader.foresee``): which chunks of
the mirror its next steps read, and when, written as hints for the eviction under a
``cache_bytes`` budget (``_mirror_cache``), so that it punches out what is needed farthest ahead
(Belady's rule) rather than what was read longest ago.

Invariants of this module:
- Correctness never depends on it: hints only order evictions. A wrong or lost hint costs a
  fetch, never a wrong record (the mirror checks every read against its checksum).
- The future is the caller's: ``batch_of(step)`` returns the records that step reads (a
  stateless sampler's ``batch``) and ``progress()`` the first step not yet consumed, or None
  once the caller is gone (the foresight then closes). Nothing else is assumed of the order.
- The horizon: steps ``[base, end)`` are drawn and located at once, at most ``records_max``
  record draws (the first ``FIRST_RECORDS``, so that the first gather does not wait for a long
  one; each later one twice the one before), or up to the first step ``batch_of`` refuses
  (the end of a finite run), and at most ``HORIZON_EPOCHS`` times the store's records; it
  is drawn again from the current step when progress passes its middle or leaves it (a
  seek). What it holds: per (chunk, step) pair one 64-bit key, twice (by chunk, and by
  step); the draws are also cut to ``KEYS_MAX`` over the chunks a mean record spans.
- A chunk's hint is the time at which its next use at or after ``progress()`` is expected:
  the time of the last refresh plus the steps from that refresh's step times the measured
  time per step (one origin for all, so a reader's hints order its chunks as its steps do).
  When progress passes steps, the chunks those steps read get their next use again (the only
  hints that a step changes); all hints are written again, from a new origin, when the horizon
  is drawn again, when the pace changes by more than a quarter, and every ``REFRESH_NS``, so
  that they follow the run and never go stale while the reader lives (``HINT_GRACE_NS``).
- Planned reads (``plan``): the records of the steps ahead, drawn in segments whose stored
  bytes are half of what the caller allows (the mirror: its budget), one segment per call
  while what is planned ahead of progress (a segment partly passed counted for its steps
  still ahead, its bytes spread evenly over them) is under half of it, each returned
  once (a seek back plans again from there). The mirror fetches a segment's records
  together, so that its requests join the neighbours of many steps (in loaderx's BLOCKS
  order, whole blocks) where a step's own would join only its own. A segment's steps end
  where its budget does, which in BLOCKS order is inside a window: each block of that window
  would be fetched in the pieces that each segment's records leave of it (1.3-1.6x the GETs
  of whole blocks, measured). So a segment also takes, from as many steps after it as it
  spans, the records of each run of consecutive records (back to back in the store) where
  its own and those later ones are shuffled among each other (their spans overlap): the rest
  of each block it reads. A run read in order is not taken early. What the budget has no
  room for yet is handed back (``defer``) and returned again by each later ``plan``, before
  any new segment, until progress reaches the end of its segment: room frees as the steps
  before it are read, and a planned read dropped for lack of room is made later by the
  gathers, one step's records at a time (photographs in 8 MiB blocks: 8x the GETs of whole
  blocks, for 1.4x the bytes). Meanwhile a gather that needs some of a deferred read's
  records fetches the rest of it with them where its GETs join (``deferred_records``).
- Room for a planned read (``room_after``): besides what no reader foresees, the chunks whose
  next use comes after its segment's end by at least ``ROOM_LEADS`` times as many steps as
  the segment ends ahead of progress. Fetching early by evicting what is read sooner fetches
  more than the optimal policy (a chunk evicted for a read planned far ahead may be needed
  before a record read meanwhile whose next use is later), the more the farther ahead: in
  the test of a second cyclic epoch through a cache of half the records, 1 to 3 leads
  fetched up to 5-18% over the optimum in some runs, 4 leads the optimum in every run; with
  nothing foreseen evictable, a planned read waits for room that a window of blocks being
  read never frees, and the gathers fetch record by record.
- Thread safety: one lock per foresight; gathers on any thread call ``catch_up`` and ``plan``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from zrecord._index import distinct, distinct_sorted

if TYPE_CHECKING:
    from zrecord._mirror_cache import Budget

# Record draws of the first horizon (each later one twice the one before, up to the most).
FIRST_RECORDS = 1 << 14
# Record draws located per horizon, at most; and (chunk, step) keys, at most (16 bytes each:
# 64 MiB), which bound the draws of stores whose records span many chunks.
RECORDS_MAX = 1 << 21
KEYS_MAX = 1 << 22
# ... and at most this many epochs' draws (the store's records this many times over): an order
# that reads every record once an epoch has given each chunk's next use within one, so a longer
# horizon only costs memory (a 20,000-record store's horizon grew to 105 epochs and 200 MiB).
HORIZON_EPOCHS = 2
# All hints are written again at least this often (well inside _mirror_cache.HINT_GRACE_NS).
REFRESH_NS = 5 * 10**9
# The time per step assumed until the run's pace is measured.
STEP_NS_GUESS = 100 * 10**6
# The pace is measured over at least this long (shorter spans are noise).
PACE_SPAN_NS = 200 * 10**6

_STEP_BITS = 32
_STEP_MASK = (1 << _STEP_BITS) - 1
# The most steps, and record draws, one planned segment spans.
PLAN_STEPS_MAX = 1 << 16
PLAN_RECORDS_MAX = 1 << 18
# A read planned up to a step `lead` steps ahead of progress may take the room of chunks next
# used this many leads after that step, at the soonest (module docstring).
ROOM_LEADS = 4
# Refusals that end a horizon: the end of a finite run (Sampler.batch raises ValueError).
_ENDS = (ValueError, IndexError, StopIteration)


class Foresight:
    """One reader's future over one mirror's budget (module docstring)."""

    def __init__(self, budget: Budget, batch_of: Callable[[int], np.ndarray],
                 progress: Callable[[], int | None], records: int, *,
                 records_max: int = RECORDS_MAX) -> None:
        # `progress` is called outside the lock: it may drop the last reference to its
        # caller's loader, whose finalizer closes this foresight (which takes the lock).
        self._budget, self._batch_of, self._progress = budget, batch_of, progress
        spans = 1 + budget.stored_bytes // max(1, records) // budget.chunk_bytes
        self._records = records
        self._records_max = max(1, min(int(records_max), KEYS_MAX // spans,
                                       max(FIRST_RECORDS, HORIZON_EPOCHS * records)))
        # The first horizon is short, so the first gather does not wait for a long one to be
        # drawn; each one drawn after is twice as long, up to _records_max.
        self._horizon = min(self._records_max, FIRST_RECORDS)
        self._lock = threading.Lock()
        self._mine = np.zeros(budget.chunk_count, np.uint64)
        self._base = self._end = self._done = 0
        self._by_chunk = self._by_step = np.empty(0, np.int64)
        # The distinct chunks the horizon reads (sorted), kept from its draw for each refresh.
        self._chunks = np.empty(0, np.int64)
        self._built = False
        self._step_ns = STEP_NS_GUESS
        self._pace: tuple[int, int] | None = None
        self._measured = False
        self._refreshed = 0
        # The time and step that hints are measured from, fixed at each refresh: between two
        # refreshes every hint of this reader is origin + (step - origin step) * step time,
        # so its hints order its chunks exactly as its steps do.
        self._origin = (0, 0)
        self.closed = False
        # Planned reads: the first step not planned yet, the progress last seen, and (first
        # step, end step, stored bytes) of each segment planned, oldest first.
        self._planned = self._plan_seen = -1
        self._segments: list[tuple[int, int, int]] = []
        # Planned records not fetched yet for lack of room, with the end step of their segment.
        self._deferred: list[tuple[np.ndarray, int]] = []

    # -- the horizon ------------------------------------------------------------------------

    def _step_records(self, step: int) -> np.ndarray:
        """The records step `step` reads (the caller's ``batch_of``), as int64; what it raises
        at the end of a finite run (_ENDS) goes to the caller."""
        return np.asarray(self._batch_of(step)).astype(np.int64, copy=False).ravel()

    def _in_store(self, batch: np.ndarray) -> np.ndarray:
        """The records of `batch` (from _step_records) that the store holds."""
        out: np.ndarray = batch[(batch >= 0) & (batch < self._records)]
        return out

    def _draw(self, start: int) -> None:
        """Draw and locate the horizon from step `start`."""
        batches: list[np.ndarray] = []
        drawn = 0
        step = start
        while drawn < self._horizon and step - start < _STEP_MASK:
            try:
                batch = self._step_records(step)
            except _ENDS:
                break
            batches.append(batch)
            drawn += batch.shape[0]
            step += 1
        self._base, self._end, self._done, self._built = start, step, start, True
        self._horizon = min(self._records_max, 2 * self._horizon)
        if not batches:
            self._by_chunk = self._by_step = self._chunks = np.empty(0, np.int64)
            return
        recs = np.concatenate(batches)
        rel = np.repeat(np.arange(len(batches), dtype=np.int64), [b.shape[0] for b in batches])
        ok = (recs >= 0) & (recs < self._records)
        recs, rel = recs[ok], rel[ok]
        each, inverse = np.unique(recs, return_inverse=True)
        first, last = self._budget.chunk_spans(each.astype(np.uint64))
        first, last = first[inverse], last[inverse]
        spans = last - first + 1
        if spans.shape[0] and int(spans.min()) == 0:  # empty records: no chunk to foresee
            busy = spans > 0
            first, spans, rel = first[busy], spans[busy], rel[busy]
        if spans.shape[0] and int(spans.max()) > 1:
            within = np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans)
            chunks = np.repeat(first, spans) + within
            rel = np.repeat(rel, spans)
        else:
            chunks = first
        self._by_chunk = distinct((chunks << _STEP_BITS) | rel)
        self._by_step = distinct((rel << _STEP_BITS) | chunks)
        # The keys are sorted by chunk, so their chunks are too: no second sort of hundreds of
        # thousands of keys (35 ms, at each refresh before).
        self._chunks = distinct_sorted(self._by_chunk >> _STEP_BITS)

    def _next_use(self, chunks: np.ndarray, step: int) -> np.ndarray:
        """The first step at or after `step` at which each of `chunks` is read, -1 for none
        in the horizon."""
        keys = self._by_chunk
        if keys.shape[0] == 0:
            return np.full(chunks.shape[0], -1, np.int64)
        at = np.searchsorted(keys, (chunks << _STEP_BITS) | (step - self._base))
        found = np.minimum(at, keys.shape[0] - 1)
        hit = (at < keys.shape[0]) & ((keys[found] >> _STEP_BITS) == chunks)
        out: np.ndarray = np.where(hit, self._base + (keys[found] & _STEP_MASK), -1)
        return out

    def _steps_chunks(self, first: int, stop: int) -> np.ndarray:
        """The distinct chunks read by steps [first, stop) of the horizon."""
        lo = (max(first, self._base) - self._base) << _STEP_BITS
        hi = (min(stop, self._end) - self._base) << _STEP_BITS
        keys = self._by_step[np.searchsorted(self._by_step, lo):np.searchsorted(self._by_step, hi)]
        out: np.ndarray = distinct(keys & _STEP_MASK)
        return out

    # -- the hints --------------------------------------------------------------------------

    def _write(self, chunks: np.ndarray, step: int) -> None:
        """Hint chunks `chunks` (distinct) with their next use at or after `step`."""
        nxt = self._next_use(chunks, step)
        origin, first = self._origin
        ahead = np.minimum(np.maximum(nxt - first, 0), (1 << 61) // self._step_ns)
        times = np.where(nxt >= 0, origin + 1 + ahead * self._step_ns, 0)
        self._budget.hint(chunks, times.astype(np.uint64), self._mine)

    def room_after(self, until: int) -> int:
        """The time (ns since the epoch, as this reader's hints count it) after which a chunk's
        next use lets a read planned up to step `until` take its room (module docstring):
        that of step ``until + ROOM_LEADS * (until - progress)``."""
        with self._lock:
            origin, first = self._origin
            step = until + ROOM_LEADS * max(0, until - max(self._plan_seen, first))
            return origin + 1 + max(0, step - first) * self._step_ns

    def _refresh(self, step: int, now: int) -> None:
        """Write every hint again: the horizon's chunks, and this reader's own earlier hints
        of chunks now outside it (cleared)."""
        # Those of the horizon and those this reader hinted before, by a mask over the chunks
        # (a union of sorted arrays took another 35 ms a refresh, which a gather waited for).
        wanted = self._mine != 0
        wanted[self._chunks] = True
        chunks = np.flatnonzero(wanted).astype(np.int64)
        self._origin = (now, step)
        self._write(chunks, step)
        self._refreshed = now

    def _measure(self, step: int, now: int) -> bool:
        """Update the time per step from progress; whether it changed by more than a quarter."""
        if self._pace is None or step < self._pace[1]:
            self._pace = (now, step)
            return False
        t0, s0 = self._pace
        if step == s0 or now - t0 < PACE_SPAN_NS:
            return False
        pace = max(1, (now - t0) // (step - s0))
        self._pace = (now, step)
        old, self._step_ns = self._step_ns, (self._step_ns + pace) // 2 if self._measured else pace
        self._measured = True
        return not 0.75 * old <= self._step_ns <= 1.25 * old

    def catch_up(self) -> None:
        """Bring the hints up to the caller's progress (module docstring). Cheap when nothing
        changed: a call of ``progress()``."""
        step = self._progress()
        with self._lock:
            if self.closed:
                return
            if step is None:
                self._close()
                return
            now = time.time_ns()
            drifted = self._measure(step, now)
            if not self._built or step < self._base or (
                    step >= (self._base + self._end + 1) // 2 if self._end > self._base
                    else step != self._base):
                self._draw(step)
                self._refresh(step, now)
                return
            if drifted or now - self._refreshed > REFRESH_NS:
                self._refresh(step, now)
                self._done = step
                return
            if step > self._done:
                self._write(self._steps_chunks(self._done, step), step)
                self._done = step

    def plan(self, bytes_max: int) -> list[tuple[np.ndarray, int]]:
        """The reads to make ahead, each as its records (distinct, sorted) and the step its
        segment ends at: first those deferred and still ahead of the caller's progress, then
        the records of the next segment of steps when what is planned ahead of progress holds
        under half of `bytes_max` stored bytes (module docstring)."""
        step = self._progress()
        with self._lock:
            if self.closed or step is None:
                self._deferred = []
                return []
            if self._planned < 0 or step < self._plan_seen or step > self._planned:
                # The first plan, a seek, or behind: planned again from here.
                self._planned, self._segments, self._deferred = step, [], []
            self._plan_seen = step
            due = [(recs, end) for recs, end in self._deferred if end > step]
            self._deferred = []
            self._segments = [seg for seg in self._segments if seg[1] > step]
            half = max(1, bytes_max // 2)
            # A segment partly passed counts for its steps still ahead (its bytes spread
            # evenly over its steps), so the next one is planned before progress reaches it.
            ahead = sum(size * (end - max(step, first)) // (end - first) for first, end, size in self._segments)
            if ahead >= half:
                return due
            # The segment's records, in pieces of up to 16 steps' distinct records, and their
            # stored bytes (a record in two pieces counts twice: the segment ends sooner).
            pieces: list[np.ndarray] = []
            pending: list[np.ndarray] = []
            size = count = drawn = 0
            end = self._planned
            while (size < half and count < self._records and drawn < PLAN_RECORDS_MAX
                   and end - self._planned < PLAN_STEPS_MAX):
                try:
                    batch = self._step_records(end)
                except _ENDS:
                    break
                pending.append(self._in_store(batch))
                drawn += batch.shape[0]
                end += 1
                if len(pending) == 16 or end - self._planned <= 16:
                    size, count = self._piece(pieces, pending, size, count)
                    pending = []
            size, count = self._piece(pieces, pending, size, count)
            first = self._planned
            if end > first:
                self._segments.append((first, end, size))
            self._planned = end
            if not count:
                return due
            recs: np.ndarray = distinct(np.concatenate(pieces)) if len(pieces) > 1 else pieces[0]
            return due + [(self._with_runs(recs, end, end - first), end)]

    def _with_runs(self, recs: np.ndarray, end: int, steps: int) -> np.ndarray:
        """The records `recs` of a segment ending at step `end`, with those of the next `steps`
        steps that share a run of consecutive records with them, shuffled among them (module
        docstring): fetched with the segment, not as the pieces it leaves of each run."""
        later: list[np.ndarray] = []
        drawn = 0
        for step in range(end, end + steps):
            if drawn >= PLAN_RECORDS_MAX:
                break
            try:
                batch = self._step_records(step)
            except _ENDS:
                break
            later.append(self._in_store(batch).astype(np.uint64))
            drawn += batch.shape[0]
        if not later:
            return recs
        both = distinct(np.concatenate([recs, *later]))
        mine = np.isin(both, recs, assume_unique=True)
        if mine.all():
            return recs
        # Runs of consecutive record numbers (back to back in the store), and in each the
        # lowest and highest of the segment's records and of the later ones (a run without
        # one of them: lowest `top`, highest 0, so that no span overlaps it).
        breaks = np.diff(both) != 1
        run = np.concatenate([[0], np.cumsum(breaks)])
        starts = np.concatenate([[0], np.flatnonzero(breaks) + 1])
        top = np.uint64(np.iinfo(np.uint64).max)
        lo_mine = np.minimum.reduceat(np.where(mine, both, top), starts)
        hi_mine = np.maximum.reduceat(np.where(mine, both, 0), starts)
        lo_later = np.minimum.reduceat(np.where(mine, top, both), starts)
        hi_later = np.maximum.reduceat(np.where(mine, 0, both), starts)
        # Shuffled among them: their spans overlap (a run read in order, the segment's records
        # before the later ones, is not taken early).
        mixed = (lo_later < hi_mine) & (hi_later > lo_mine)
        out: np.ndarray = both[mine | mixed[run]]
        return out

    def _piece(self, pieces: list[np.ndarray], batches: list[np.ndarray], size: int,
               count: int) -> tuple[int, int]:
        """Add the distinct records of `batches` to `pieces`; `size` and `count` with their
        stored bytes and number added."""
        if not batches:
            return size, count
        piece = distinct(np.concatenate(batches)).astype(np.uint64)
        if piece.shape[0] == 0:
            return size, count
        pieces.append(piece)
        return size + int(self._budget.stored_sizes(piece).sum()), count + piece.shape[0]

    def defer(self, recs: np.ndarray, until: int) -> None:
        """Records `recs` of a read planned up to step `until` that the budget had no room for
        yet: returned again by the next ``plan`` while progress is before `until`."""
        if recs.shape[0] == 0:
            return
        with self._lock:
            if not self.closed:
                self._deferred.append((recs, until))

    def deferred_records(self) -> list[np.ndarray]:
        """The records of the planned reads deferred for room (``defer``), not returned by a
        ``plan`` since and still ahead of the caller's progress: a gather that needs any of
        them may fetch them with its own."""
        step = self._progress()
        with self._lock:
            if self.closed or step is None:
                return []
            return [recs for recs, until in self._deferred if until > step]

    def close(self) -> None:
        """Forget this future: the hints this reader wrote are cleared where still its own."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        ours = np.flatnonzero(self._mine).astype(np.int64)
        self._budget.hint(ours, np.zeros(ours.shape[0], np.uint64), self._mine)
        self._by_chunk = self._by_step = self._chunks = np.empty(0, np.int64)
        self._deferred = []
