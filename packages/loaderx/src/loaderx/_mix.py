"""Weighted mixing of several sources into one batch stream: ``loaderx.sampler.Mix``.

Semantics (per-record mixing with a deterministic schedule):

- Each source is a stream dict (Mix builds its sampler), a ``(streams, sampler)`` pair, or a
  bare sampler (indices only). Each source has its own record stream: record ``j`` of source
  ``k`` is position ``j`` of its sampler's steps read one after another,
  ``sampler.batch(j // b)[j % b]`` with ``b`` its batch size. The samplers Mix builds for
  CYCLIC run in passes (``passes=``, as many as a Sampler counts): record ``j`` is position
  ``j % n`` of cycle ``j // n``'s permutation of the source's ``n`` records, so each cycle
  shows every record once, where full batches would leave out ``n mod b`` of them. A source
  cycles through its own records at its own pace, whatever its length: a small source with a
  large weight repeats more often.
- The weights become integer quanta ``q`` with period ``D = sum(q)``: exact when the weights
  are integers or short decimals (common denominator at most ``PERIOD_MAX``), else rounded to
  ``1/PERIOD_MAX``, a positive weight never rounding to zero. Global record slots
  ``0, 1, 2, ...`` are assigned to sources by a fixed table of ``D`` entries that spreads each
  source evenly over the period (source ``k``'s ``i``-th slot sits at ``(i + 1/2) / q_k`` of
  it), so every period holds exactly ``q_k`` records of source ``k`` and any prefix of the
  stream stays within a few records of the exact proportions.
- Step ``s`` of rank ``r`` is the slots ``[s*G + r*B, s*G + (r+1)*B)`` with ``G = B *
  world_size``: a pure function of (seed, step), so ``seek`` is O(1) and a resumed run draws
  exactly what the uninterrupted one would have. The slots of source ``k`` inside one step
  have consecutive record numbers, so a step costs at most ``ceil(n / b) + 1`` ``batch()``
  calls for a source with ``n`` records in the step and sampler batch size ``b``: at most two
  when ``b`` is at least Mix's batch size (Mix builds its samplers with ``b = min(G,
  length)``), more for a source shorter than the batch. Mix never moves its sources' samplers (it only calls ``batch(step)``).
- Elastic resume: what slot ``p`` of step ``s`` holds depends on ``G``, not on how ``G`` is
  split into ranks, and the samplers Mix builds draw ``min(G, length)`` records per step, so
  a state resumes exactly with another world size of the same ``G``. Samplers passed in are
  the caller's: they must be built the same way in the resumed run.
- Indices are positions in the concatenation of the sources (source ``k``'s record ``i`` is
  ``offsets[k] + i``); ``Mix.streams`` gathers them back from each source, so
  ``DataLoader(mix.streams, mix)`` delivers mixed batches unchanged in the loader.
- Dependencies: a stream is anything with ``len`` and batch indexing
  (``loaderx.protocols.Stream``); Mix checks that a stream agrees across sources when it has
  a Dense store's schema (``dtype``, ``item_shape``), a Ragged store's (``dtype``, ``ndim``,
  ``shapes``) or is an ndarray, and imports no zrecord class. Samplers come from ``loaderx._sampler_api``, which imports
  nothing of Mix, so there is no import cycle.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

import numpy as np

from loaderx._sampler_api import (
    TOPOLOGY,
    U64_MAX,
    Mode,
    ModeName,
    Sampler,
    _check_topology,
    mode_of,
    reshard_state,
    saved_step,
)
from loaderx.dataloader import _remote_counts, _type_name, check_sampler_length
from loaderx.protocols import Stream

# The longest schedule period (table entries). Weights whose exact period is longer are
# rounded to multiples of 1/PERIOD_MAX.
PERIOD_MAX = 1 << 16
_SEED_STEP = 0x9E3779B97F4A7C15


@runtime_checkable
class _FixedShapeStream(Stream, Protocol):
    """A stream of records of one dtype and shape (a zrecord Dense store)."""

    dtype: np.dtype[Any]
    item_shape: tuple[int, ...]


@runtime_checkable
class _VariableShapeStream(Stream, Protocol):
    """A stream of records of one dtype and rank, each with its own shape (a zrecord Ragged
    store)."""

    dtype: np.dtype[Any]
    ndim: int

    def shapes(self, key: Any = ..., /) -> np.ndarray: ...


class _StepSampler(Protocol):
    """What Mix needs from a source's sampler: any step's indices, and their count."""

    batch_size: int
    length: int

    def batch(self, step: int, /) -> np.ndarray: ...


def _records(sampler: _StepSampler, j0: int, n: int, step: int, k: int) -> np.ndarray:
    """Records j0 .. j0 + n - 1 of a source's record stream, which is its sampler's steps
    one after another: each step `batch_size` records, but in passes (the samplers Mix builds
    for CYCLIC) the last step of each pass shorter, where the pass's permutation ends."""
    b = int(sampler.batch_size)
    if getattr(sampler, "passes", None) is None:
        def at(j: int) -> tuple[int, int]:
            return divmod(j, b)
        last = U64_MAX
    else:
        length = int(sampler.length)
        per = -(-length // b)  # steps a pass

        def at(j: int) -> tuple[int, int]:
            cycle, pos = divmod(j, length)
            return cycle * per + pos // b, pos % b
        last = int(sampler.steps) - 1  # type: ignore[attr-defined]
    (s0, lo), (s1, _) = at(j0), at(j0 + n - 1)
    if s1 > last:
        raise ValueError(f"Mix step {step} draws step {s1} of source {k}, past the last step "
                         f"its Sampler draws ({last})")
    drawn = [np.asarray(sampler.batch(s)) for s in range(s0, s1 + 1)]
    idx = drawn[0] if len(drawn) == 1 else np.concatenate(drawn)
    out: np.ndarray = idx[lo:lo + n].astype(np.uint64)
    return out


def _step(value: Any) -> int:
    step = operator.index(value)
    if not 0 <= step <= U64_MAX:
        raise ValueError(f"Mix step must be in 0..2**64-1; got {step}")
    return step


def _quanta(weights: Sequence[Any], sources: int) -> list[int]:
    """Integer quanta proportional to `weights` (reduced to the shortest period)."""
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence | np.ndarray):
        raise TypeError(f"Mix weights must be a sequence of numbers; got {type(weights).__name__}")
    if len(weights) != sources:
        raise ValueError(f"Mix needs one weight per source: {sources} sources but "
                         f"{len(weights)} weights")
    exact: list[Fraction] = []
    for k, w in enumerate(weights):
        if isinstance(w, (bool, np.bool_)) or not isinstance(w, (int, float, np.integer,
                                                                 np.floating, Fraction)):
            raise TypeError(f"Mix weight {k} must be a real number; got {w!r}")
        if isinstance(w, (float, np.floating)) and not math.isfinite(float(w)):
            raise ValueError(f"Mix weight {k} must be finite; got {w!r}")
        if w < 0:
            raise ValueError(f"Mix weights must be >= 0; weight {k} is {w!r}")
        # repr() of a float is its shortest decimal, so 0.7 is taken as 7/10, not as the
        # binary fraction nearest to it.
        if isinstance(w, (float, np.floating)):
            exact.append(Fraction(repr(float(w))))
        else:
            exact.append(w if isinstance(w, Fraction) else Fraction(int(w)))
    total = sum(exact, Fraction(0))
    if total == 0:
        raise ValueError(f"Mix weights must not all be zero; got {list(weights)!r}")
    positive = sum(1 for w in exact if w > 0)
    if positive > PERIOD_MAX:
        # A period of PERIOD_MAX slots cannot give each a slot: some would never be drawn.
        raise ValueError(f"Mix takes at most {PERIOD_MAX:,} sources of positive weight; got "
                         f"{positive:,} (concatenate sources into fewer)")
    share = [w / total for w in exact]
    period = math.lcm(*(s.denominator for s in share))
    if period <= PERIOD_MAX:
        quanta = [int(s * period) for s in share]
    else:
        # Largest remainder to PERIOD_MAX, then no positive weight may vanish.
        raw = [s * PERIOD_MAX for s in share]
        quanta = [math.floor(r) for r in raw]
        order = sorted(range(sources), key=lambda k: (-(raw[k] - quanta[k]), k))
        for k in order[:PERIOD_MAX - sum(quanta)]:
            quanta[k] += 1
        vanished = [k for k in range(sources) if share[k] > 0 and quanta[k] == 0]
        for k in vanished:
            quanta[k] = 1
        # Each slot they took comes from the largest quantum at that moment (ties: the first
        # source): a heap, not a scan of every source per slot (65,536 sources took minutes).
        heap = [(-q, j) for j, q in enumerate(quanta)]
        heapq.heapify(heap)
        for _ in vanished:
            q, j = heapq.heappop(heap)
            quanta[j] -= 1
            heapq.heappush(heap, (q + 1, j))
    g = math.gcd(*quanta)
    return [q // g for q in quanta]


def _schedule(quanta: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(source of each slot of one period, that slot's rank among its source's slots)."""
    keys = np.concatenate([(2 * np.arange(q, dtype=np.float64) + 1) / (2 * q) for q in quanta
                           if q])
    src = np.concatenate([np.full(q, k, dtype=np.int64) for k, q in enumerate(quanta) if q])
    rank = np.concatenate([np.arange(q, dtype=np.int64) for q in quanta if q])
    order = np.lexsort((src, keys))  # by position in the period, ties by source
    return src[order], rank[order]


def _schema(stream: Stream) -> tuple[Any, ...] | None:
    """What must agree between the same stream of two sources (None: not checkable)."""
    if isinstance(stream, np.ndarray):
        return ("Dense", stream.dtype, stream.shape[1:])
    if isinstance(stream, _FixedShapeStream):
        return ("Dense", stream.dtype, tuple(stream.item_shape))
    if isinstance(stream, _VariableShapeStream):
        return ("Ragged", stream.dtype, stream.ndim)
    return None


class _Concat:
    """One stream of every source, addressed by position in the sources' concatenation."""

    def __init__(self, name: str, parts: list[Any], offsets: np.ndarray) -> None:
        self.name = name
        self.parts = parts
        self.offsets = offsets
        self.ends = offsets[1:]
        # The sources (by id) whose reads a loader plans (foresee): they get no hints.
        self._planned: set[int] = set()

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def digest(self) -> str | None:
        """A digest of the sources' digests in order (None unless every source has one), so
        that a loader state names the exact data it was saved with."""
        digests = [getattr(p, "digest", None) for p in self.parts]
        if not all(isinstance(d, str) for d in digests):
            return None
        return hashlib.blake2b("\n".join(str(d) for d in digests).encode(),
                               digest_size=8).hexdigest()

    def describe(self) -> str:
        """For the DataLoader's repr: the first source's schema, and how many sources."""
        first = self.parts[0]
        if isinstance(first, _FixedShapeStream):
            schema = f"{_type_name(first)} {first.dtype} {tuple(first.item_shape)}"
        elif isinstance(first, _VariableShapeStream):
            schema = f"{_type_name(first)} {first.dtype} ndim={first.ndim}"
        elif isinstance(first, np.ndarray):
            schema = f"ndarray {first.dtype} {tuple(first.shape[1:])}"
        else:
            schema = _type_name(first)
        return f"{schema} mixed from {len(self.parts)} sources"

    def foresee(self, batch_of: Callable[[int], Any], progress: Callable[[], int | None]) -> Any:
        """Tell every source that takes it (a zrecord store opened by URL with a cache budget)
        its share of the future: the positions of each step that fall in it, as its own
        positions. A handle whose close() closes theirs, or None when no source took it.
        Until then the sources that took it get no read-ahead hints (`prefetch`), which would
        only compete with their planned reads; the others still do (the handle's
        `takes_hints`)."""
        handles, planned = [], set()
        for k, part in enumerate(self.parts):
            foresee = getattr(part, "foresee", None)
            if not callable(foresee):
                continue
            handle = foresee(_share_of(batch_of, int(self.offsets[k]), int(self.offsets[k + 1])),
                             progress)
            if handle is not None:
                handles.append(handle)
                planned.add(id(part))
        if not handles:
            return None
        self._planned |= planned
        hinted = any(id(p) not in planned and callable(getattr(p, "prefetch", None)) for p in self.parts)
        return _Handles(handles, self, planned, hinted)

    def _by_part(self, idx: Any) -> dict[int, tuple[Any, np.ndarray]]:
        """The positions `idx` as each distinct source object's own (a store given as two
        sources is one object, one mirror): ``{id: (part, its positions)}``."""
        idx = np.asarray(idx, dtype=np.uint64).ravel()
        src = np.searchsorted(self.ends, idx, side="right")
        out: dict[int, tuple[Any, np.ndarray]] = {}
        for k in np.unique(src).tolist():
            part = self.parts[k]
            own = idx[src == k] - self.offsets[k]
            if id(part) in out:
                own = np.concatenate([out[id(part)][1], own])
            out[id(part)] = (part, own)
        return out

    def prefetch(self, idx: Any) -> None:
        """Read-ahead hints for the records `idx`, each source's share to that source (those
        that take hints: zrecord stores)."""
        for part, own in self._by_part(idx).values():
            prefetch = getattr(part, "prefetch", None)
            if callable(prefetch) and own.size and id(part) not in self._planned:
                prefetch(own)

    @property
    def billed_parts(self) -> list[Any]:
        """The sources' streams, which ``DataLoader.bill`` counts (each store once, across
        every stream of the loader: one store given under two names of a source is one)."""
        return self.parts

    def remote_stats(self) -> dict[str, int] | None:
        """The billed counts of the sources opened by URL added up (each store once, however
        many sources it is: the loader's own rule); None when no source is read by URL."""
        return _remote_counts({self.name: self}).get(self.name)

    @property
    def cache_budget_bytes(self) -> int | None:
        """The smallest ``cache_bytes`` budget of the sources that have one (None when none
        has): with ``cache_cost``, what a loader sizes its window by."""
        budgets = [b for p in self.parts
                   if isinstance(b := getattr(p, "cache_budget_bytes", None), int) and b > 0]
        return min(budgets) if budgets else None

    def cache_cost(self, idx: Any) -> int:
        """The most that records `idx` take of any budgeted source's budget, scaled to the
        smallest budget (``cache_budget_bytes``): a window of steps that fits it fits every
        source's own."""
        least = self.cache_budget_bytes
        worst = 0
        for part, own in self._by_part(idx).values():
            budget = getattr(part, "cache_budget_bytes", None)
            if least is None or not isinstance(budget, int) or budget <= 0:
                continue
            worst = max(worst, -(-int(part.cache_cost(own)) * least // budget))
        return worst

    def __getitem__(self, idx: Any) -> Any:
        idx = np.asarray(idx, dtype=np.uint64)
        if idx.ndim != 1:
            raise TypeError(f"mixed stream {self.name!r} takes a one-dimensional index array; "
                            f"got shape {idx.shape}")
        if idx.size and int(idx.max()) >= len(self):
            raise IndexError(f"index {int(idx.max())} is out of range for mixed stream "
                             f"{self.name!r} with {len(self)} records")
        src = np.searchsorted(self.ends, idx, side="right")
        present = np.unique(src)
        if len(present) <= 1:
            k = int(present[0]) if len(present) else 0
            return self.parts[k][idx - self.offsets[k]]
        out: Any = None
        for k in present.tolist():
            where = np.flatnonzero(src == k)
            values = self.parts[k][idx[where] - self.offsets[k]]
            if isinstance(values, np.ndarray):
                if out is None:
                    out = np.empty((len(idx), *values.shape[1:]), dtype=values.dtype)
                elif not isinstance(out, np.ndarray):
                    raise TypeError(f"stream {self.name!r} is an array in one source and a "
                                    "list in another")
                out[where] = values
            else:
                if out is None:
                    out = [None] * len(idx)
                elif not isinstance(out, list):
                    raise TypeError(f"stream {self.name!r} is an array in one source and a "
                                    "list in another")
                for pos, value in zip(where.tolist(), values, strict=True):
                    out[pos] = value
        return out


def _share_of(batch_of: Callable[[int], Any], lo: int, hi: int) -> Callable[[int], np.ndarray]:
    """The positions of each step of `batch_of` in [lo, hi), from lo."""
    def share(step: int) -> np.ndarray:
        idx = np.asarray(batch_of(step), dtype=np.int64)
        out: np.ndarray = idx[(idx >= lo) & (idx < hi)] - lo
        return out
    return share


class _Handles:
    """The foresight handles of a mixed stream's sources, closed together; `takes_hints`
    when some source took none and takes read-ahead hints (the loader then still hints the
    stream, whose prefetch leaves out the planned sources)."""

    def __init__(self, handles: list[Any], stream: _Concat, planned: set[int], takes_hints: bool) -> None:
        self.handles = handles
        self._stream = stream
        self._ids = planned
        self.takes_hints = takes_hints

    def close(self) -> None:
        self._stream._planned -= self._ids
        for handle in self.handles:
            handle.close()


def _parse_source(k: int, source: Any) -> tuple[dict[str, Stream] | None, Any]:
    """(streams, sampler) of one item of Mix's `sources`; either may be None."""
    if isinstance(source, Mapping):
        streams, sampler = dict(source), None
    elif isinstance(source, tuple) and len(source) == 2 and isinstance(source[0], Mapping):
        streams, sampler = dict(source[0]), source[1]
    elif callable(getattr(source, "batch", None)):
        streams, sampler = None, source
    else:
        raise TypeError(f"Mix source {k} must be a stream dict, a (streams, sampler) pair or a "
                        f"sampler with batch(step); got {type(source).__name__}")
    if streams is not None:
        if not streams:
            raise ValueError(f"Mix source {k} has no streams")
        for name, stream in streams.items():
            if isinstance(stream, (str, bytes, os.PathLike)):
                # A str has a length of its own, which would pass for a record count.
                raise TypeError(f"stream {name!r} of Mix source {k} is a path ({stream!r}), "
                                "not a store: open it first (zrecord.open_store(path), "
                                "Dense.open or Ragged.open) and give the store")
        lengths = {name: len(s) for name, s in streams.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"the streams of Mix source {k} must have the same length; got " +
                             ", ".join(f"{n}={v}" for n, v in lengths.items()))
    if sampler is not None:
        for attr in ("batch", "batch_size", "length"):
            if not hasattr(sampler, attr):
                raise TypeError(f"the sampler of Mix source {k} ({type(sampler).__name__}) has "
                                f"no {attr!r}: Mix reads any step of it with batch(step)")
        if getattr(sampler, "steps", None) is not None:
            raise ValueError(f"the sampler of Mix source {k} ends after {sampler.steps} steps "
                             "(passes=...); Mix repeats each source at its own pace, so its "
                             "samplers must be endless")
    return streams, sampler


def _common_batch_size(given: list[Any], batch_size: int | None) -> int:
    """`batch_size`, or else the one batch size that every given sampler shares."""
    if batch_size is None:
        sizes = {s.batch_size for s in given if s is not None}
        if None in given or len(sizes) != 1:
            raise TypeError("Mix needs batch_size= unless every source is a sampler with the "
                            "same batch_size")
        batch_size = sizes.pop()
    size = operator.index(batch_size)
    if size < 1:
        raise ValueError(f"Mix batch_size must be at least 1; got {batch_size}")
    return size


class _Sources:
    """Mix(...)'s per-source samplers, record counts and optional stream dicts."""

    def __init__(self, sources: Any, batch_size: int | None, mode: Any, seed: int,
                 world_size: int, subset: bool = False) -> None:
        if isinstance(sources, Mapping) or not isinstance(sources, Sequence) or not sources:
            raise TypeError("Mix sources must be a non-empty list of stream dicts, "
                            "(streams, sampler) pairs or samplers; got "
                            f"{type(sources).__name__}")
        parsed = [_parse_source(k, source) for k, source in enumerate(sources)]
        self.streams: list[dict[str, Stream] | None] = [streams for streams, _ in parsed]
        self.batch_size = _common_batch_size([sampler for _, sampler in parsed], batch_size)
        # The samplers Mix builds read one global batch per step, so that a source's record
        # stream does not depend on how the global batch is split into ranks (elastic resume).
        self.global_batch = self.batch_size * world_size
        self.samplers: list[_StepSampler] = []
        self.lengths: list[int] = []
        for k, (streams, sampler) in enumerate(parsed):
            sampler, length = self._resolve(k, streams, sampler, mode, seed, subset)
            self.samplers.append(sampler)
            self.lengths.append(length)

    def _resolve(self, k: int, streams: dict[str, Stream] | None, sampler: Any, mode: Any,
                 seed: int, subset: bool) -> tuple[_StepSampler, int]:
        """Source `k`'s sampler (built when not given) and its record count: a given sampler
        draws from all of its streams' records, or with `subset` from the first ones (the
        DataLoader's rule)."""
        n = None if streams is None else len(next(iter(streams.values())))
        if sampler is None:
            assert n is not None  # _parse_source gives streams or a sampler
            if n < 1:
                raise ValueError(f"Mix source {k} is empty")
            if mode_of(mode) is Mode.BLOCKS:
                raise ValueError(f"Mix source {k} is a stream dict, for which Mix builds a "
                                 "Sampler of `mode`, and mode BLOCKS needs block_records: give "
                                 "it as a (streams, Sampler(len, batch_size, 'blocks', "
                                 "block_records=...)) pair (loaderx.sampler.block_records sizes "
                                 "blocks from a store)")
            b = min(self.global_batch, n)
            # CYCLIC in passes: pass c is cycle c's permutation whole, so that the source's
            # record stream shows every record once a cycle (endless, full batches would
            # leave out n mod b records of each cycle, up to half of them, where Mix takes
            # records one at a time and needs no full batches).
            passes = U64_MAX // -(-n // b) if mode_of(mode) is Mode.CYCLIC else None
            sampler = Sampler(n, b, mode, (seed + (k + 1) * _SEED_STEP) & U64_MAX,
                              passes=passes)
        length = int(sampler.length)
        if n is not None:
            try:
                check_sampler_length(sampler, n, subset)
            except ValueError as exc:
                raise ValueError(f"Mix source {k}: {exc}") from None
            length = n
        return sampler, length


class Mix:
    """Weighted, per-record mixing of several sources into one endless batch stream.

    ``Mix(sources, weights, seed=0, *, batch_size=None, mode="cyclic", rank=0, world_size=1,
    source_key=None, subset=False)``. `sources` is a list whose items are stream dicts
    ``{name: store}`` (Mix samples each with its own ``Sampler(len, min(len, batch_size *
    world_size), mode)``, seeded from `seed`), ``(streams, sampler)`` pairs (a sampler that
    draws from fewer records than its streams hold is refused unless `subset` is True, as by
    the DataLoader), or bare samplers. `weights` (one per source, >= 0, not all
    zero) are the proportions of records; `seed` is 0..2**64-1, as for ``Sampler``. ``next()`` returns this rank's indices of the next
    step in the concatenation of the sources, a borrowed read-only view like
    ``Sampler.next()``; ``DataLoader(mix.streams, mix)`` turns them into batches. Resumes
    exactly with ``seek(step)`` or ``state_dict()``. See the module documentation.
    """

    def __init__(self, sources: Sequence[Any], weights: Sequence[Any], seed: int = 0, *,
                 batch_size: int | None = None, mode: Mode | ModeName | int = "cyclic",
                 rank: int = 0, world_size: int = 1, source_key: str | None = None,
                 subset: bool = False) -> None:
        seed = operator.index(seed)
        if not 0 <= seed <= U64_MAX:
            raise ValueError(f"Mix seed must be in 0..2**64-1; got {seed}")
        world_size = operator.index(world_size)
        rank = operator.index(rank)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"Mix rank must be in 0..world_size-1 and world_size at least 1; "
                             f"got rank {rank}, world_size {world_size}")
        resolved = _Sources(sources, batch_size, mode, seed, world_size, subset)
        self.quanta = _quanta(weights, len(resolved.samplers))
        self._src = resolved
        self.batch_size = resolved.batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.period = sum(self.quanta)
        self.offsets = np.concatenate([[0], np.cumsum(resolved.lengths)]).astype(np.uint64)
        self._table_src, self._table_rank = _schedule(self.quanta)
        self._quanta = np.array(self.quanta, dtype=np.int64)
        self._step = 0
        self._buffer = np.empty(self.batch_size, dtype=np.uint64)
        self._view = self._buffer[:]
        self._view.flags.writeable = False
        self._source_ids = _SourceIds(self.offsets)
        self._streams = self._build_streams(source_key)

    def _build_streams(self, source_key: str | None) -> dict[str, Any] | None:
        dicts = self._src.streams
        if any(d is None for d in dicts):
            return None
        names = list(dicts[0])  # type: ignore[arg-type]
        for k, d in enumerate(dicts):
            if set(d) != set(names):  # type: ignore[arg-type]
                raise ValueError(f"every Mix source must have the same stream names: source 0 "
                                 f"has {sorted(names)}, source {k} has {sorted(d)}")  # type: ignore[arg-type]
        out: dict[str, Any] = {}
        for name in names:
            parts = [d[name] for d in dicts]  # type: ignore[index]
            schemas = [(k, _schema(p)) for k, p in enumerate(parts)]
            known = [(k, s) for k, s in schemas if s is not None]
            for k, s in known[1:]:
                if s != known[0][1]:
                    raise ValueError(f"stream {name!r} differs between Mix sources: source "
                                     f"{known[0][0]} is {known[0][1]}, source {k} is {s}")
            out[name] = _Concat(name, parts, self.offsets)
        if source_key is not None:
            if source_key in out:
                raise ValueError(f"source_key {source_key!r} is already a stream name")
            out[source_key] = self._source_ids
        return out

    # -- the schedule ---------------------------------------------------------------------

    @property
    def length(self) -> int:
        """Records in the concatenation of the sources (what Mix's indices address)."""
        return int(self.offsets[-1])

    @property
    def streams(self) -> dict[str, Any]:
        """``{name: mixed stream}`` for ``DataLoader(mix.streams, mix)``; with `source_key`,
        also a stream giving each record's source number."""
        if self._streams is None:
            raise TypeError("Mix.streams needs every source to be a stream dict or a "
                            "(streams, sampler) pair; this Mix was given bare samplers")
        return self._streams

    def _fill(self, step: int, out: np.ndarray) -> np.ndarray:
        B = self.batch_size
        first = step * B * self.world_size + self.rank * B
        period, off0 = divmod(first, self.period)
        off = np.arange(off0, off0 + B, dtype=np.int64)
        wraps = off // self.period  # periods past `period` (0 or a few): small
        off %= self.period
        src = self._table_src[off]
        for k in np.unique(src).tolist():
            where = np.flatnonzero(src == k)
            # In Python's ints: the record numbers of a step past 2**57 overflowed int64
            # (a negative step for a source, or silently wrong records).
            first_slot = int(where[0])
            j0 = ((period + int(wraps[first_slot])) * int(self._quanta[k])
                  + int(self._table_rank[off[first_slot]]))
            n = len(where)  # this source's records in the step are j0 .. j0 + n - 1
            out[where] = _records(self._src.samplers[k], j0, n, step, k) + self.offsets[k]
        return out

    def source_of(self, indices: Any) -> np.ndarray:
        """The source number of each index drawn by this Mix."""
        return self._source_ids[indices]

    # -- the sampler protocol -------------------------------------------------------------

    def next(self) -> np.ndarray:
        """This rank's indices of the next step: a read-only view of one reused buffer,
        borrowed until the next draw."""
        self._fill(self._step, self._buffer)
        self._step += 1
        return self._view

    def __next__(self) -> np.ndarray:
        return self.next()

    def __iter__(self) -> Mix:
        return self

    def batch(self, step: int) -> np.ndarray:
        """A new array with the indices of `step`; the Mix's own step is unchanged."""
        return self._fill(_step(step), np.empty(self.batch_size, dtype=np.uint64))

    @property
    def step(self) -> int:
        """The step the next draw returns."""
        return self._step

    def seek(self, step: int) -> None:
        """Make `step` the next step drawn. O(1): nothing is replayed."""
        self._step = _step(step)

    def _config(self) -> dict[str, Any]:
        sources = []
        for sampler, length in zip(self._src.samplers, self._src.lengths, strict=True):
            config = dict(sampler.state_dict()) if hasattr(sampler, "state_dict") else {
                "sampler": type(sampler).__name__}
            config.pop("step", None)
            sources.append({"records": length, "sampler": config})
        return {"kind": "Mix", "quanta": list(self.quanta), "batch_size": self.batch_size,
                "seed": self.seed, "rank": self.rank, "world_size": self.world_size,
                "sources": sources}

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("a Mix is not pickled or copied (its sources hold open stores and "
                        "samplers): save mix.state_dict() and build the Mix again from its "
                        "sources, then load_state_dict(state)")

    def state_dict(self) -> dict[str, Any]:
        """The configuration and the next step: small and JSON-serialisable."""
        return {**self._config(), "step": self._step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Seek to a saved step after checking that the configuration is the same, except for
        the split into ranks: as for ``Sampler``, a state saved with another world size
        resumes exactly when the global batch is the same, and is refused otherwise."""
        step = saved_step("Mix", state)
        # First: a different global batch also changes what derives from it (Mix's source
        # samplers), and its message says what would work.
        _check_topology("Mix", state, self.batch_size, self.world_size, self.rank)
        config = self._config()
        different = [k for k in config if k not in TOPOLOGY and state.get(k) != config[k]]
        if different:
            raise ValueError("Mix state was saved with a different configuration: " +
                             ", ".join(f"{k} saved {state.get(k)!r} != current {config[k]!r}"
                                       for k in different))
        self.seek(step)

    @staticmethod
    def reshard(state: Mapping[str, Any], *, world_size: int, rank: int) -> dict[str, Any]:
        """A saved ``state_dict()`` for rank `rank` of `world_size` ranks with the same global
        batch (see ``Sampler.reshard``); ``state["batch_size"]`` is the new batch size."""
        return reshard_state("Mix", state, world_size, rank)

    def __repr__(self) -> str:
        """``<Mix of 3 sources: 70.0% of 10,000 records, 20.0% of 500, 10.0% of 3,000;
        batch_size=256 seed=42 rank=0 world_size=1; step 12>``: each source's share of the
        records (as used, after rounding) and its size."""
        shares = ", ".join(
            f"{100 * q / self.period:.1f}% of {n:,}{' records' if k == 0 else ''}"
            for k, (q, n) in enumerate(zip(self.quanta, self._src.lengths, strict=True)))
        return (f"<Mix of {len(self.quanta)} sources: {shares}; batch_size={self.batch_size} "
                f"seed={self.seed} rank={self.rank} world_size={self.world_size}; "
                f"step {self._step}>")


class _SourceIds:
    """The `source_key` stream: each record's source number, computed from its index."""

    def __init__(self, offsets: np.ndarray) -> None:
        self.offsets = offsets

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def describe(self) -> str:
        """For the DataLoader's repr."""
        return f"source numbers (int64) of {len(self.offsets) - 1} sources"

    def __getitem__(self, idx: Any) -> np.ndarray:
        return np.searchsorted(self.offsets[1:], np.asarray(idx, dtype=np.uint64),
                               side="right").astype(np.int64)


__all__ = ["PERIOD_MAX", "Mix"]
