"""The step-based, thread-pool prefetching DataLoader: endless by default.

``DataLoader(streams, sampler, transform=None, *, workers=4, prefetch=4, readahead=2,
state=None)`` turns a dict of equal-length streams (zrecord stores, or any
``loaderx.protocols.Stream``: an object with ``__len__`` and batch indexing) and a sampler
(``Sampler``, ``Mix``, or any ``loaderx.protocols.BatchSampler``: an object whose ``next()``
returns the next step's indices) into an iterator of batches ``{name: values}``: every stream
is gathered at the same indices, so record ``i`` lines up across them. Dense streams give
stacked arrays, Ragged streams lists of arrays; nothing is padded. The iterator is as long as
the sampler: endless for the default ``Sampler``, ``len(sampler)`` steps for one built with
``passes`` (evaluation), after which ``next()`` raises StopIteration.

Invariants:
- Step order. The sampler is drawn only by the consuming thread, in step order, and its
  borrowed index view is copied before the next draw. Gather and transform run on ``workers``
  threads and may finish in any order, but batches are delivered strictly in step order.
- One meaning of "step". ``loader.step``, ``state_dict()["step"]``, ``Sampler.step`` and
  ``Mix.step`` are all the step of the *next* batch: the number of steps before it, counted
  from step 0. ``loader.last_step`` is the step of the batch last delivered (``step - 1``, or
  None before this loader delivered one). While a loader runs, its sampler's own ``step`` is
  ahead of ``loader.step`` by the steps in flight and read ahead; the loader's is the one to
  save.
- Exact resume. The sampler is a pure function of (seed, step), so ``state_dict()`` (the next
  step to deliver, plus the sampler's configuration) is all a resumed run needs: stopping after
  any k batches and resuming yields exactly the batches the uninterrupted run would have.
  With another world size and the same global batch, the ranks together continue the same
  global sequence of records (``reshard``). The state also holds every stream's digest
  (``stream_digests``), and a state is refused on a stream whose digest differs: the same
  step on other records would not be a resume.
- Reproducible transforms. A transform that requires two positional arguments is called as
  ``transform(batch, ctx)`` with a ``BatchContext``: the step, the record indices, and a
  generator that is a pure function of (seed, step, rank), so random augmentation drawn from
  it is part of the exact-resume guarantee. One-argument transforms (the seed's) are called
  as before.
- The end. When the sampler's ``next()`` raises StopIteration, no further step is drawn; the
  steps already drawn are delivered, then ``next()`` raises StopIteration (every time) and the
  loader stays open until ``close()``. A StopIteration raised by the transform is a
  RuntimeError in the consumer, never a silent end.
- Bounded memory. ``prefetch`` is a budget of batches: at most ``prefetch`` batches exist at
  once, counting the one last delivered (the consumer still holds it while it asks for the
  next), so ``prefetch - 1`` steps are in flight (at least one). Peak batch memory is about
  ``max(prefetch, 2)`` times the bytes of one gathered batch (plus the transform's output).
- Read-ahead. The ``readahead`` steps after those in flight are drawn early (in step order,
  on the consuming thread) and their indices handed to every stream that has a
  ``prefetch(indices)`` method (zrecord stores: a hint to the kernel, no buffers), so a cold
  disk works on them while the model computes. What it holds: ``readahead`` index arrays, and
  page cache the kernel may reclaim; batches themselves stay bounded by ``prefetch``.
- A cache budget bounds the window. When a stream's cache has a byte budget
  (``cache_budget_bytes``: a zrecord store opened by URL with ``cache_bytes``), the steps in
  flight and read ahead together are cut to what the smallest budget holds (its bytes over
  the most bytes one step of that stream took of it, ``cache_cost(indices)`` where the stream
  has it, else the bytes gathered; one step until that is known), so that the records fetched
  ahead never take more than the budget. A stream that took the sampler's future (below)
  counts half its budget: the other half is for the reads it plans from that future (over
  nginx, photographs in BLOCKS order through a 128 MiB cache: 235 GETs an epoch where the
  whole budget for the window made 800-870).
- Foresight. With a sampler that can draw any step (``batch(step)``: Sampler, Mix), every
  stream that has a ``foresee(batch_of, progress)`` method is told the sampler's future and
  the loader's step (zrecord stores opened by URL with a ``cache_bytes`` budget: their mirror
  then evicts what is needed farthest ahead, not what was read longest ago, and fetches the
  steps ahead itself, planned from that future). Such a stream gets no read-ahead hints: its
  own planned reads cover those steps, and hints would compete with them for its budget. The
  streams hold the loader weakly; ``close()`` takes the future back. A store opened by URL
  without a budget plans nothing (it evicts nothing either), so in ``BLOCKS`` order each
  batch fetches its own records, a request for each run of them, not a block a request: the
  loader warns of it (a ``UserWarning``, at construction).
- Threads. ``close()`` cancels what has not started, waits for what has, and joins every
  thread; it is idempotent, and the same shutdown of the threads runs when the loader is
  garbage-collected or the interpreter exits (not the sampler's move back to ``step``, which
  only ``close()`` makes: a finalizer cannot know whether another loader uses it by then).
  An exception in gather or transform reaches the consumer with its original traceback,
  after the loader has closed itself.
- Closing from another thread. ``close()`` may run on any thread while the consumer is inside
  ``next()``; that ``next()`` (and every later one) raises ``LoaderClosedError``, never a
  batch, ``CancelledError`` or an executor error. One lock orders ``close()`` against the
  consumer's submissions, so no work is ever submitted after the executor is shut down.
"""

from __future__ import annotations

import collections
import concurrent.futures
import inspect
import operator
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sized
from typing import Any, Generic, TypeVar, overload

import numpy as np

import zrecord
from loaderx._constants import warn_if_contended
from loaderx._sampler_api import reshard_state
from loaderx.protocols import BatchSampler, Stream, _Foreseeing, _Prefetching, _Resumable, _Seekable

STATE_VERSION = 1


# What one batch is: the gathered dict ``{name: values}`` without a transform, else what the
# transform returns. DataLoader is generic in it, so that ``next(loader)`` is typed.
_Batch = TypeVar("_Batch")
_Self = TypeVar("_Self", bound="DataLoader[Any]")
# A gathered batch: a stacked array per Dense stream, a list of arrays per Ragged stream.
Batch = dict[str, Any]


class LoaderClosedError(RuntimeError):
    """The DataLoader was closed (explicitly, by an error, or at interpreter exit)."""


class _Exhausted(Exception):
    """Internal: a finite sampler has ended and every drawn step was delivered."""


def _on_worker(executor: concurrent.futures.ThreadPoolExecutor) -> bool:
    """Whether this thread is one of `executor`'s (a transform that closes its loader, or a
    collection of the loader that runs there)."""
    return threading.current_thread() in getattr(executor, "_threads", ())


def _shutdown(executor: concurrent.futures.ThreadPoolExecutor, foresights: list[Any]) -> None:
    """Stop the loader's threads, joined unless this is one of them (a thread cannot join
    itself, and another may be waiting for it: they end once their work is done), then take
    the streams' foresight back whatever happened."""
    try:
        executor.shutdown(wait=not _on_worker(executor), cancel_futures=True)
    finally:
        for handle in foresights:
            handle.close()


def _progress_of(loader: weakref.ref[DataLoader[Any]]) -> Callable[[], int | None]:
    """The loader's progress for a stream's foresight: the step of its next batch, None once
    it is closed or gone (the foresight then forgets its future). Holds the loader weakly."""
    def progress() -> int | None:
        it = loader()
        return None if it is None or it._closed else it._next_step
    return progress


class _Stats:
    """Counters updated by the worker threads and the consumer (under one lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches = 0
        self.gather_s = 0.0
        self.transform_s = 0.0
        self.wait_s = 0.0
        self.started = time.perf_counter()
        # The streams whose cache has a byte budget, and the most bytes one step of each
        # gathered so far (the loader's window is cut to what the budget holds).
        self.budgeted: frozenset[str] = frozenset()
        self.step_bytes: dict[str, int] = {}


# The first word of every batch generator's derivation path (SeedSequence spawn_key), so that
# no generator a user derives from the same seed by spawning collides with the loader's.
_RNG_DOMAIN = 0x6C6F61646572_78  # "loaderx"


class BatchContext:
    """What a two-argument transform receives beside the batch: ``transform(batch, ctx)``.

    ``step`` is the batch's step, ``indices`` its record indices (a read-only int64 array,
    in the batch's order: every index is below 2**63, so int64 holds it; unlike the
    sampler's uint64, it indexes a torch tensor and stays integer when an int64 is
    subtracted), ``seed``, ``rank`` and ``world_size`` the sampler's. ``rng`` is a
    ``numpy.random.Generator`` that is a pure function of ``(seed, step, rank)``: a random
    augmentation that draws only from it gives the same result in a resumed run as in the
    uninterrupted one, on any thread, however many workers run. Each batch gets its own
    generator, built on first use.
    """

    __slots__ = ("_rng", "indices", "rank", "seed", "step", "world_size")

    def __init__(self, step: int, indices: np.ndarray, seed: int, rank: int,
                 world_size: int) -> None:
        self.step = step
        self.indices = indices
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self._rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        """This batch's generator: PCG64 seeded by ``SeedSequence(seed, spawn_key=(domain,
        step, rank))``, independent of every other (step, rank)."""
        if self._rng is None:
            sequence = np.random.SeedSequence(self.seed,
                                              spawn_key=(_RNG_DOMAIN, self.step, self.rank))
            self._rng = np.random.Generator(np.random.PCG64(sequence))
        return self._rng

    def __repr__(self) -> str:
        return (f"<BatchContext step={self.step} rank={self.rank}/{self.world_size} "
                f"seed={self.seed} records={len(self.indices)}>")


def _wants_context(transform: Callable[..., Any]) -> bool:
    """True when `transform` requires a second positional argument (``def f(batch, ctx)``);
    a one-argument transform, one whose second parameter has a default, or one whose
    signature cannot be read is called with the batch alone, as the seed's transforms are."""
    try:
        signature = inspect.signature(transform)
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in signature.parameters.values()
                if p.kind in positional and p.default is inspect.Parameter.empty]
    return len(required) >= 2


def _run_step(streams: dict[str, Stream], transform: Callable[..., Any] | None,
              stats: _Stats, indices: np.ndarray, ctx: BatchContext | None) -> Any:
    """Runs on a worker thread: gather every stream at `indices`, then transform (with `ctx`
    as its second argument when given).

    A plain function of its arguments, so queued work never holds the loader itself: dropping
    the last reference to a loader finalizes it at once, on the consumer's thread.
    """
    t0 = time.perf_counter()
    batch = {}
    for name, stream in streams.items():
        try:
            batch[name] = stream[indices]
        except StopIteration as exc:
            # In the consumer's next() it would read as the end of the data (PEP 479's reason).
            raise RuntimeError(f"stream {name!r} raised StopIteration when gathered") from exc
    t1 = time.perf_counter()
    for name in stats.budgeted:
        cost = getattr(streams[name], "cache_cost", None)
        size = int(cost(indices)) if callable(cost) else _nbytes(batch[name])
        with stats.lock:
            stats.step_bytes[name] = max(size, stats.step_bytes.get(name, 0))
    try:
        if transform is None:
            out = batch
        elif ctx is None:
            out = transform(batch)
        else:
            out = transform(batch, ctx)
    except StopIteration as exc:
        # In the consumer's next() it would read as the end of the data (PEP 479's reason).
        raise RuntimeError("the transform raised StopIteration") from exc
    t2 = time.perf_counter()
    with stats.lock:
        stats.gather_s += t1 - t0
        stats.transform_s += t2 - t1
    return out


def _nbytes(value: Any) -> int:
    """The bytes of a gathered batch: an array's, or the sum of a list of arrays'."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    return sum(int(getattr(v, "nbytes", 0)) for v in value) if isinstance(value, list) else 0


def _warn_of_unplanned_blocks(sampler: Any, streams: Mapping[str, Any], foreseen: Mapping[str, Any],
                              stacklevel: int) -> None:
    """A UserWarning for each stream opened by URL that a BLOCKS sampler reads without planned
    reads (module docstring, "Foresight"), attributed to the frame `stacklevel` above the
    caller."""
    if getattr(getattr(sampler, "mode", None), "name", None) != "BLOCKS":
        return
    for name, stream in streams.items():
        stats = getattr(stream, "remote_stats", None)
        if name in foreseen or not callable(stats) or stats() is None:
            continue
        warnings.warn(
            f"stream {name!r} is read by URL without a cache_bytes budget, so its mirror plans "
            "no reads: in BLOCKS order each batch then fetches its own records, a request for "
            "each run of them, not a block a request (measured: 4,110 GETs for an epoch of "
            "60 blocks). Open the store with storage_options={'cache_bytes': ...}, two windows "
            "of blocks or more (block bytes x window_blocks x 2), to read whole blocks",
            UserWarning, stacklevel=stacklevel + 1)


# The counts of zrecord's remote_stats() that DataLoader.bill reports.
_BILLED = ("requests", "bytes", "index_requests", "index_bytes", "delivered_bytes")


def _remote_counts(streams: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """``remote_stats()`` of each stream opened by URL (a zrecord store's; None for a local
    one), by name; a store given as several streams once, under the first of their names
    (its counts are the store's, whichever stream asked). A stream made of other streams (a
    Mix's, whose ``billed_parts`` are its sources' streams) adds up its parts' counts, each
    store once across all the streams."""
    out: dict[str, dict[str, int]] = {}
    seen: set[int] = set()
    for name, stream in streams.items():
        parts = getattr(stream, "billed_parts", None)
        for part in parts if isinstance(parts, (list, tuple)) else (stream,):
            if id(part) in seen:
                continue
            seen.add(id(part))
            stats = getattr(part, "remote_stats", None)
            counts = stats() if callable(stats) else None
            if counts is not None:
                total = out.setdefault(name, dict.fromkeys(_BILLED, 0))
                for k in _BILLED:
                    total[k] += int(counts.get(k, 0))
    return out


def stream_digests(streams: Mapping[str, Stream]) -> dict[str, str | None]:
    """``{name: digest}`` of a dict of streams: a zrecord store's ``digest`` (its header
    checksum), a Mix stream's digest of its sources' digests, None for a stream without one
    (a NumPy array, say). Equal digests mean the same records in the same order, so this is
    what to compare across hosts before training; ``loaderx.torch.check_same_stores`` does
    it for a process group."""
    out: dict[str, str | None] = {}
    for name, stream in streams.items():
        digest = getattr(stream, "digest", None)
        out[name] = digest if isinstance(digest, str) else None
    return out


def _check_digests(saved: Mapping[str, Any], streams: Mapping[str, Stream]) -> None:
    """Refuse to resume on data other than the state was saved with."""
    current = stream_digests(streams)
    for name, digest in saved.items():
        if digest is None or name not in current:
            continue  # an unknown name is reported with the stream lengths
        if current[name] is None:
            raise ValueError(f"stream {name!r} has no digest now, but the state was saved "
                             f"with a store of digest {digest}: resume on that store (a "
                             "zrecord store has a digest), or drop 'digests' from the state "
                             "to skip the check")
        if current[name] != digest:
            path = getattr(streams[name], "path", None)
            version = getattr(streams[name], "version", None)
            where = (f" at {path!r}" if path is not None else "") + \
                (f" (version {version} of a dataset)" if isinstance(version, int) else "")
            raise ValueError(f"stream {name!r}{where} is not the store the state was saved "
                             f"with: its digest is {current[name]}, the state's {digest}. Its "
                             "records differ (another build, or another version of the data), "
                             "so the saved position would not mean the same records")


def _describe_stream(stream: Stream) -> str:
    """A short description of one stream for reprs: kind, dtype and record shape when known
    (``Dense float32 (2, 3)``, ``Ragged int32 ndim=1``, ``ndarray int64 ()``). A stream may
    describe itself with a ``describe()`` method (Mix's streams do)."""
    describe = getattr(stream, "describe", None)
    if callable(describe):
        return str(describe())
    dtype = getattr(stream, "dtype", None)
    if isinstance(stream, np.ndarray):
        return f"ndarray {stream.dtype} {tuple(stream.shape[1:])}"
    item_shape = getattr(stream, "item_shape", None)
    if dtype is not None and item_shape is not None:
        return f"{_type_name(stream)} {dtype} {tuple(item_shape)}"
    ndim = getattr(stream, "ndim", None)
    if dtype is not None and ndim is not None:
        return f"{_type_name(stream)} {dtype} ndim={ndim}"
    return _type_name(stream)


def _type_name(stream: Any) -> str:
    """The name reprs and messages give a stream's type: a zrecord store's kind (``Dense``,
    ``Ragged``: an opened store's own type is ``DenseReader``, say), else its type's name."""
    for kind in (zrecord.Dense, zrecord.Ragged):
        if isinstance(stream, kind):
            return kind.__name__
    return type(stream).__name__


def _count(name: str, value: Any) -> int:
    """An int argument `name` (an integer type, not bool), or a TypeError that names it."""
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int; got {_given(value)}") from None


def _given(value: object) -> str:
    """How an error message names a wrong argument: its type, and a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _stream_lengths(streams: Mapping[str, Stream]) -> dict[str, int]:
    """``{name: len(stream)}`` after checking that `streams` is a non-empty dict of streams of
    one length; the errors say what was given and what a stream needs."""
    if not isinstance(streams, Mapping) or not streams:
        raise TypeError("streams must be a non-empty dict {name: store} of Streams (zrecord "
                        "stores, NumPy arrays: anything with __len__ and batch indexing); "
                        f"got {_given(streams)}")
    lengths = {}
    for name, stream in streams.items():
        if isinstance(stream, (str, bytes, os.PathLike)):
            # A str has __len__ and __getitem__: its length would pass for a record count.
            raise TypeError(f"stream {name!r} is a path ({stream!r}), not a store: open it "
                            "first (zrecord.open_store(path), Dense.open or Ragged.open) and "
                            "give the store")
        if isinstance(stream, (list, tuple, range)):
            # They have __len__ and __getitem__, but not with an index array.
            raise TypeError(f"stream {name!r} is a {type(stream).__name__}, which takes no "
                            "index array (a batch's indices): give np.asarray(...) of it, or "
                            "a zrecord store")
        if not isinstance(stream, Stream):
            missing = [m for m in ("__len__", "__getitem__") if not hasattr(stream, m)]
            raise TypeError(f"stream {name!r} ({type(stream).__name__}) has no "
                            f"{' and no '.join(missing)}: a Stream needs __len__ and batch "
                            "indexing (__getitem__ with an index array), as a zrecord store or "
                            "a NumPy array has")
        try:
            lengths[name] = len(stream)
        except TypeError as exc:
            raise TypeError(f"stream {name!r} ({type(stream).__name__}) has no usable "
                            f"__len__ ({exc}): a Stream needs a length, the number of its "
                            "records") from exc
    if len(set(lengths.values())) > 1:
        raise ValueError("all streams must have the same length; got " +
                         ", ".join(f"{k}={v}" for k, v in lengths.items()))
    return lengths


def check_sampler_length(sampler: Any, length: int, subset: bool) -> None:
    """Refuse a sampler that draws beyond the streams, and one that draws from fewer records
    than they have unless `subset` says that only the first ones are meant: a sampler built
    for another store would otherwise leave the rest of the data unread without a word."""
    drawn = getattr(sampler, "length", None)
    if drawn is None:
        return  # a user's sampler that does not say its length: nothing to check
    if drawn > length:
        raise ValueError(f"the sampler draws from {drawn} records but the streams have "
                         f"{length}: build it with Sampler(len(store), ...)")
    if drawn < length and not subset:
        raise ValueError(f"the sampler draws from the first {drawn} records but the streams "
                         f"have {length}, so records {drawn}..{length - 1} would never be "
                         "read: build it with Sampler(len(store), ...), or pass subset=True "
                         f"if only the first {drawn} records are meant")


def _callable_name(fn: Any) -> str:
    """A callable's name for reprs, without the ``<locals>`` path of a nested function."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not name:
        return type(fn).__name__  # an instance with __call__
    return str(name).rsplit("<locals>.", 1)[-1]


# PyTorch's DataLoader's keywords, and what loaderx's DataLoader takes instead: a user coming
# from PyTorch gets pointed at it, not only told that the keyword is unexpected.
_TORCH_KEYWORDS = {
    "num_workers": "workers= (threads of this process; loaderx starts no processes)",
    "batch_size": "the sampler: Sampler(length, batch_size, mode, seed)",
    "shuffle": "the sampler's mode: Sampler(length, batch_size, Sampler.Mode.IID or CYCLIC)",
    "batch_sampler": "the sampler, the second argument (its next() gives a step's indices)",
    "collate_fn": "transform= (called with the gathered batch, a dict of arrays)",
    "prefetch_factor": "prefetch= (how many batches exist at once)",
    "pin_memory": "a transform that pins (the loader guide's PyTorch section shows one)",
    "drop_last": "nothing: every batch is whole (the sampler draws whole batches)",
    "persistent_workers": "nothing: the loader's threads live until close()",
    "worker_init_fn": "nothing: the loader's threads need no set-up",
    "dataset": "streams= (a dict of stores or other streams, gathered at the same indices)",
}

# loaderx 2.x's DataLoader keywords, renamed in 3.0 (docs/coming-from.md's table).
_LOADERX2_KEYWORDS = {
    "transform_workers": "workers= (the threads that gather and transform)",
    "prefetch_size": "prefetch= (how many batches exist at once)",
}


class DataLoader(Generic[_Batch]):
    """Iterator of index-aligned batches from a dict of streams, as long as its sampler
    (endless by default). See the module docs.

    Parameters:

    - ``streams``: a dict of equal-length streams (zrecord stores, or any
      ``loaderx.protocols.Stream``), all gathered at the same indices each step.
    - ``sampler``: where each step's indices come from: a ``Sampler``, a ``Mix``, or any
      object whose ``next()`` returns the next step's index array. It sets the batch size,
      the order and the length (endless unless built with ``passes``).
    - ``transform``: called on each gathered batch on the loader's threads, as
      ``transform(batch)`` or, if it requires two arguments, ``transform(batch, ctx)`` with a
      ``BatchContext`` (step, indices, a reproducible random generator).
    - ``workers``: threads that gather and transform (the GIL is released while gathering).
    - ``prefetch``: how many batches exist at once, the one last delivered included.
    - ``readahead``: steps after those in flight whose indices are handed to the streams'
      ``prefetch`` early, so a cold disk reads ahead.
    - ``state``: a ``state_dict()`` of an earlier loader, to resume exactly where it stopped.
    - ``subset``: True when a sampler drawing from fewer records than the streams hold (its
      ``length``) is meant: only the first ``length`` records are read. Without it such a
      sampler is refused, since it usually was built for other data.

    ``next(loader)`` is typed: a ``dict[str, Any]`` of the gathered streams, or what the
    transform returns.

    PyTorch's keywords (``num_workers``, ``batch_size``, ``shuffle``, ``collate_fn``, ...)
    and loaderx 2.x's (``transform_workers``, ``prefetch_size``) raise a ``TypeError`` that
    names what to use here instead.
    """

    def __new__(cls: type[_Self], *args: Any, **kwargs: Any) -> _Self:
        for word in kwargs:
            if word in _TORCH_KEYWORDS:
                raise TypeError(f"DataLoader() got an unexpected keyword argument {word!r}: that "
                                f"is PyTorch's DataLoader's; loaderx's takes {_TORCH_KEYWORDS[word]}")
            if word in _LOADERX2_KEYWORDS:
                raise TypeError(f"DataLoader() got an unexpected keyword argument {word!r}: that "
                                f"is loaderx 2.x's; loaderx 3 takes {_LOADERX2_KEYWORDS[word]}")
        return super().__new__(cls)

    @overload
    def __init__(self: DataLoader[Batch], streams: Mapping[str, Stream],
                 sampler: BatchSampler, transform: None = None, *, workers: int = 4,
                 prefetch: int = 4, readahead: int = 2,
                 state: Mapping[str, Any] | None = None, subset: bool = False) -> None: ...

    @overload
    def __init__(self, streams: Mapping[str, Stream], sampler: BatchSampler,
                 transform: Callable[[Batch], _Batch] | Callable[[Batch, BatchContext], _Batch],
                 *, workers: int = 4, prefetch: int = 4, readahead: int = 2,
                 state: Mapping[str, Any] | None = None, subset: bool = False) -> None: ...

    def __init__(self, streams: Mapping[str, Stream], sampler: BatchSampler,
                 transform: Callable[..., Any] | None = None, *,
                 workers: int = 4, prefetch: int = 4, readahead: int = 2,
                 state: Mapping[str, Any] | None = None, subset: bool = False) -> None:
        lengths = _stream_lengths(streams)
        if not (isinstance(sampler, BatchSampler) and callable(sampler.next)):
            raise TypeError("sampler must be a BatchSampler (a Sampler, a Mix, or any object "
                            "with a next() method returning the next step's index array); "
                            f"got {_given(sampler)}")
        length = next(iter(lengths.values()))
        check_sampler_length(sampler, length, subset)
        self._workers = _count("workers", workers)
        self._prefetch = _count("prefetch", prefetch)
        if self._workers < 1:
            raise ValueError(f"workers must be at least 1; got {workers}")
        if self._prefetch < 1:
            raise ValueError(f"prefetch must be at least 1; got {prefetch}")
        self._readahead = _count("readahead", readahead)
        if self._readahead < 0:
            raise ValueError(f"readahead must be 0 or more; got {readahead}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable; got {type(transform).__name__}")
        warn_if_contended(transform, stacklevel=2)
        self._streams = dict(streams)
        self._sampler = sampler
        self._pid = os.getpid()  # its threads are this process's (fork: __next__)
        self._consumer = threading.Lock()  # held by the one next() running
        self._transform = transform
        self._with_context = transform is not None and _wants_context(transform)
        self._seed = int(getattr(sampler, "seed", 0))
        self._rank = int(getattr(sampler, "rank", 0))
        self._world_size = int(getattr(sampler, "world_size", 1))
        self._length = length
        self._pending: collections.deque[tuple[int, concurrent.futures.Future[Any]]] = \
            collections.deque()
        # Steps drawn and hinted to the streams (read-ahead), after those in _pending. Without
        # read-ahead a step is submitted as soon as it is drawn, and its gather hints a cold
        # batch itself (zrecord): a hint at the draw would repeat that work.
        self._drawn: collections.deque[np.ndarray] = collections.deque()
        self._stats = _Stats()
        self._budgets = {name: int(b) for name, s in streams.items()
                         if isinstance(b := getattr(s, "cache_budget_bytes", None), int)}
        self._stats.budgeted = frozenset(self._budgets)
        # Guards _closed and _pending: close() may run on another thread while the consumer is
        # inside next(). _shut: set once the close() that closed the loader joined its threads.
        self._lock, self._closed, self._shut = threading.Lock(), False, threading.Event()
        self._exhausted = False  # the sampler raised StopIteration: no step after _drawn
        self._error: BaseException | None = None
        self._next_step = int(getattr(sampler, "step", 0))
        self._last_step: int | None = None
        if state is not None:
            self.load_state_dict(state)
        # What the streams opened by URL had fetched when the loader was made, so that bill()
        # reports what this loader did.
        self._fetched_before = _remote_counts(self._streams)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._workers, thread_name_prefix="loaderx")
        self._foresights: list[Any] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._executor, self._foresights)
        foreseen = self._foresee()
        self._foresights.extend(foreseen.values())
        self._planning = frozenset(foreseen)
        _warn_of_unplanned_blocks(self._sampler, self._streams, foreseen, stacklevel=2)
        # A stream that took the future plans its reads ahead from it: read-ahead hints would
        # only compete with those reads for its budget (module docstring). A mixed stream some
        # of whose sources took none still gets them (its prefetch leaves the others out).
        self._hinted = [s.prefetch for name, s in streams.items()
                        if (name not in foreseen or getattr(foreseen[name], "takes_hints", False))
                        and isinstance(s, _Prefetching) and callable(s.prefetch)] \
            if self._readahead else []

    def _foresee(self) -> dict[str, Any]:
        """Tell every stream that takes it the sampler's future (module docstring): the
        handles of those that took it, by stream name."""
        batch_of = getattr(self._sampler, "batch", None)
        if not callable(batch_of):
            return {}
        progress = _progress_of(weakref.ref(self))
        handles = {}
        for name, stream in self._streams.items():
            if isinstance(stream, _Foreseeing) and callable(stream.foresee):
                handle = stream.foresee(batch_of, progress)
                if handle is not None:
                    handles[name] = handle
        return handles

    # -- the pipeline ---------------------------------------------------------------------

    def _draw(self, hint: bool = True) -> None:
        """Draw the next step's indices (in step order, on this thread) and, with `hint`,
        hint them to the streams that read ahead."""
        indices = np.asarray(self._sampler.next())
        if indices.ndim != 1:
            raise ValueError(f"the sampler returned indices of shape {indices.shape}; a "
                             "one-dimensional array is required")
        if indices.dtype.kind not in "iu":
            # A mask, floats: cast to uint64 they read other records, silently.
            raise TypeError(f"the sampler returned indices of dtype {indices.dtype}; record "
                            "indices are integers (a boolean mask: np.flatnonzero(mask))")
        if indices.dtype.kind == "i" and indices.size and int(indices.min()) < 0:
            raise ValueError(f"the sampler returned a negative index ({int(indices.min())}); "
                             "record indices are 0..len-1")
        # The sampler's view is borrowed until its next draw; the worker needs its own copy.
        own = np.array(indices, dtype=np.uint64, copy=True)
        own.flags.writeable = False  # shared by the gather and the transform's context
        for prefetch in self._hinted if hint else ():
            prefetch(own)
        self._drawn.append(own)

    def _submit(self) -> None:
        """Queue the work of the oldest drawn step."""
        own = self._drawn.popleft()
        step = self._next_step + len(self._pending)
        # int64, the same memory: torch indexes with it, and arithmetic with Python ints
        # stays integer (uint64 - int64 is float64 in NumPy).
        ctx = BatchContext(step, own.view(np.int64), self._seed, self._rank,
                           self._world_size) if self._with_context else None
        future = self._executor.submit(_run_step, self._streams, self._transform, self._stats,
                                       own, ctx)
        self._pending.append((step, future))

    def __iter__(self: _Self) -> _Self:
        return self

    @property
    def step(self) -> int:
        """The step of the next batch: the number of steps before it, from step 0. Equal to
        ``state_dict()["step"]`` (and to ``Sampler.step`` when nothing is in flight)."""
        return self._next_step

    @property
    def last_step(self) -> int | None:
        """The step of the batch last delivered by this loader (``step - 1``); None before
        its first batch and right after ``load_state_dict``."""
        return self._last_step

    def _claim(self) -> tuple[int, concurrent.futures.Future[Any]]:
        """Top up the steps in flight and take the oldest, under the lock that close() takes,
        so that nothing is submitted to an executor that close() has shut down."""
        with self._lock:
            if self._closed:
                raise self._closed_error()
            in_flight, readahead = self._window()
            while (not self._exhausted and
                   len(self._pending) + len(self._drawn) < in_flight + readahead):
                try:
                    # No read-ahead left in the window (a cache budget cut it): the step is
                    # submitted as soon as it is drawn, and a hint would only compete with its
                    # own gather for the budget.
                    self._draw(hint=readahead > 0)
                except StopIteration:
                    self._exhausted = True  # a finite sampler (passes=...) has ended
            while len(self._pending) < in_flight and self._drawn:
                self._submit()
            if not self._pending:
                raise _Exhausted
            return self._pending.popleft()

    def _window(self) -> tuple[int, int]:
        """Steps in flight and steps read ahead (module docstring): ``prefetch - 1`` (the
        consumer still holds the batch last delivered) and ``readahead``, cut to what the
        smallest cache budget of the streams holds: one step until a step's bytes are known,
        then budget // step bytes steps in all."""
        in_flight = max(1, self._prefetch - 1)
        if not self._budgets:
            return in_flight, self._readahead
        with self._stats.lock:
            known = dict(self._stats.step_bytes)
        if len(known) < len(self._budgets):
            return 1, 0
        # A stream that plans its reads from the future keeps half its budget for them.
        fits = max(1, min(budget // (2 if name in self._planning else 1) // max(1, known[name])
                          for name, budget in self._budgets.items()))
        in_flight = min(in_flight, fits)
        return in_flight, max(0, min(self._readahead, fits - in_flight))

    def _closed_error(self) -> LoaderClosedError:
        return LoaderClosedError("the DataLoader is closed" +
                                 (f" after an error: {self._error!r}" if self._error else ""))

    def __next__(self) -> _Batch:
        if os.getpid() != self._pid:
            # Its threads did not survive the fork: work queued to them would never run.
            raise RuntimeError(f"this DataLoader was made in process {self._pid}, and its "
                               "threads do not survive fork(): make a new DataLoader in this "
                               "process (state=parent_loader.state_dict() to continue its run)")
        if not self._consumer.acquire(blocking=False):
            raise RuntimeError("next() of this DataLoader is running on another thread: a "
                               "loader has one consumer at a time (its steps, ctx and state "
                               "follow the order of delivery); give each thread its own loader")
        try:
            return self._next_batch()
        finally:
            self._consumer.release()

    def _next_batch(self) -> _Batch:
        try:
            step, future = self._claim()
            t = time.perf_counter()
            result: _Batch = future.result()
            wait = time.perf_counter() - t
        except _Exhausted:
            # Every step of a finite sampler was delivered: the iteration ends; the loader
            # stays open (load_state_dict can rewind it) until close().
            raise StopIteration from None
        except BaseException as exc:
            if self._closed:
                # This loader closed (or close() ran on another thread and cancelled this step,
                # CancelledError, or raced it): the consumer learns that it is closed, nothing
                # else. A LoaderClosedError of another loader (a transform reading one) is an
                # error of the step like any other.
                if isinstance(exc, LoaderClosedError):
                    raise
                raise self._closed_error() from exc
            self._error = exc
            self.close()
            raise
        if self._closed:
            # close() on another thread returned while this step was running: a closed loader
            # delivers nothing, whichever of the two finished first.
            raise self._closed_error()
        with self._stats.lock:
            self._stats.wait_s += wait
            self._stats.batches += 1
        self._last_step = step
        self._next_step = step + 1
        return result

    def next(self) -> _Batch:
        """The next batch (same as ``next(loader)``)."""
        return self.__next__()

    def __len__(self) -> int:
        """The number of steps of the run, from step 0, when the sampler is finite (a
        ``Sampler`` with ``passes``); an endless loader has no ``len()``."""
        try:
            if not isinstance(self._sampler, Sized):
                raise TypeError  # a sampler without __len__ is endless, as an endless Sampler
            return len(self._sampler)
        except TypeError:
            raise TypeError("an endless DataLoader has no len(); build its Sampler with "
                            "passes=1 for one pass over the records") from None

    def __bool__(self) -> bool:
        # Without this, `if loader:` would call __len__, which an endless loader refuses.
        return True

    # -- resume ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The loader's position: small and JSON-serialisable.

        ``step`` is the step of the next batch to deliver; batches prefetched but not yet
        delivered are not part of the state and are recomputed on resume.
        """
        state: dict[str, Any] = {"version": STATE_VERSION, "step": self._next_step,
                                 "streams": {k: self._length for k in self._streams}}
        digests = stream_digests(self._streams)
        if any(d is not None for d in digests.values()):
            state["digests"] = digests
        if isinstance(self._sampler, _Resumable):
            sampler_state = dict(self._sampler.state_dict())
            sampler_state["step"] = self._next_step
            state["sampler"] = sampler_state
        return state

    @staticmethod
    def reshard(state: Mapping[str, Any], *, world_size: int, rank: int) -> dict[str, Any]:
        """A saved ``state_dict()`` rewritten for rank `rank` of `world_size` ranks with the
        same global batch (elastic resume): its ``["sampler"]["batch_size"]`` is the batch
        size to build this rank's Sampler (or Mix) with, and the run continues the saved
        run's global sequence of records, none repeated or skipped. Any rank's saved state
        will do: they differ only in their rank. Raises ValueError, naming the world sizes
        that work, when `world_size` does not divide the global batch."""
        sampler = state.get("sampler")
        if not isinstance(sampler, Mapping):
            raise ValueError("this DataLoader state has no sampler configuration (its sampler "
                             "had no state_dict()), so it cannot be resharded")
        kind = "Mix" if sampler.get("kind") == "Mix" else "sampler"
        return {**state, "sampler": reshard_state(kind, sampler, world_size, rank)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a saved state: the next batch is the one the saved run would have
        delivered next. Batches in flight are discarded. The sampler checks its part: a
        state saved with another world size is accepted when the global batch is the same
        (see ``reshard``)."""
        if not isinstance(state, Mapping):
            # A state saved as JSON and given as its text, say.
            raise TypeError(f"state must be the dict that state_dict() returned (parse a "
                            f"saved one: json.loads(text)); got {_given(state)}")
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported DataLoader state version {state.get('version')!r}; "
                             f"this loaderx writes version {STATE_VERSION}")
        saved = dict(state.get("streams", {}))
        current = {k: self._length for k in self._streams}
        _check_digests(dict(state.get("digests") or {}), self._streams)
        if saved != current:
            raise ValueError(f"state was saved for streams {saved}, but this loader has "
                             f"{current}")
        step = operator.index(state["step"])
        if "sampler" in state and isinstance(self._sampler, _Resumable):
            self._sampler.load_state_dict({**state["sampler"], "step": step})
        elif isinstance(self._sampler, _Seekable):
            self._sampler.seek(step)
        else:
            raise TypeError(f"cannot resume: the sampler ({type(self._sampler).__name__}) has no "
                            "seek(step)")
        with self._lock:
            for _, future in self._pending:
                future.cancel()
            for _, future in self._pending:
                if not future.cancelled():
                    concurrent.futures.wait([future])
            self._pending.clear()
            self._drawn.clear()
            self._exhausted = False
        self._next_step = step
        self._last_step = None

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after ``close()`` (or after an error closed the loader)."""
        return self._closed

    def close(self) -> None:
        """Cancel pending work, wait for running work and join every thread. Idempotent.

        Does not close the streams or the sampler: they belong to the caller. A sampler that
        can ``seek`` is moved back to the loader's ``step`` (the loader drew the steps in
        flight and read ahead from it), so that a loader made next on the same sampler
        delivers the step after the last one delivered, not the steps after those.
        """
        # The threads are joined outside the lock: a transform that closes its loader runs on
        # one of them, and one waiting for the lock would never be joined. A close() racing
        # the first waits for it to end and, off the workers, joins them: a first close made
        # by a transform could not join the thread it ran on, nor wait for the others.
        with self._lock:
            first = not self._closed
            self._closed = True
            if first:
                for _, future in self._pending:
                    future.cancel()
                drawn = bool(self._pending or self._drawn)
                self._pending.clear()
                self._drawn.clear()
        if not first:
            if not _on_worker(self._executor):
                self._shut.wait()
                self._executor.shutdown(wait=True)
            return
        try:
            # Also cancels the step the consumer may be waiting on, if it has not started.
            self._finalizer()
        finally:
            if drawn and isinstance(self._sampler, _Seekable) and os.getpid() == self._pid:
                try:
                    self._sampler.seek(self._next_step)
                except (ValueError, TypeError):
                    pass  # a sampler that cannot go there: left where the loader left it
            self._shut.set()

    def __reduce__(self) -> Any:
        raise TypeError("a DataLoader does not pickle or copy (its threads, queue and sampler "
                        "position are its own): save state_dict() and make a new DataLoader "
                        "with state=... from it")

    def __copy__(self) -> Any:
        return self.__reduce__()

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__reduce__()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def stats(self) -> dict[str, float]:
        """Where the time goes: batches/s since creation, and seconds spent gathering,
        transforming (summed over worker threads) and waiting in the consumer."""
        with self._stats.lock:
            elapsed = time.perf_counter() - self._stats.started
            return {
                "batches": self._stats.batches,
                "elapsed_s": elapsed,
                "batches_per_s": self._stats.batches / elapsed if elapsed > 0 else 0.0,
                "gather_s": self._stats.gather_s,
                "transform_s": self._stats.transform_s,
                "consumer_wait_s": self._stats.wait_s,
            }

    def bill(self, price: str | zrecord.Price = "s3-standard") -> dict[str, Any]:
        """What this loader fetched from object storage since it was made, and what that costs
        at `price` (a name of ``zrecord.PRICES`` or a ``zrecord.Price``): per stream opened by
        URL (``streams``: its ranged GETs of records and of index parts, the bytes they
        brought, the stored bytes of the records its batches asked for, and the dollars), and
        their totals (``requests``, ``bytes``, ``delivered_bytes``, ``amplification`` = bytes
        per delivered byte, ``usd``). Prefetches and read-ahead count, as they are billed.
        Streams read from a local disk are not in it; with none opened by URL every total is
        0. The counts are the stores': one store given as two streams is counted once (under
        the first stream's name), and a store that other readers (another loader, your own
        reads) use meanwhile counts their fetches too: give each loader its own opened store
        to bill it alone. The records' requests and bytes are what ``zrecord cost`` estimates
        before a run, under the conditions its guide gives (object-storage guide, "The bill of
        an epoch"); the totals add the index parts' (``index_requests``, ``index_bytes``),
        which the estimate leaves out: a reader by part fetches them as its gathers need
        them."""
        rate = zrecord.price_of(price)
        streams: dict[str, dict[str, Any]] = {}
        requests = nbytes = delivered = 0
        for name, counts in _remote_counts(self._streams).items():
            before = self._fetched_before.get(name, {})
            got = {k: counts[k] - before.get(k, 0) for k in _BILLED}
            gets, fetched = got["requests"] + got["index_requests"], got["bytes"] + got["index_bytes"]
            streams[name] = {**got, "usd": rate.usd(gets, fetched)}
            requests, nbytes, delivered = requests + gets, nbytes + fetched, delivered + got["delivered_bytes"]
        return {"price": rate.source, "requests": requests, "bytes": nbytes,
                "delivered_bytes": delivered,
                "amplification": nbytes / delivered if delivered else 0.0,
                "usd": rate.usd(requests, nbytes), "streams": streams}

    def __repr__(self) -> str:
        """``<DataLoader step 12 of 40, 3 in flight, 2 read ahead; 2 streams of 500 records: x=Dense
        float32 (2, 3), t=Ragged int32 ndim=1; Sampler(...); transform=collate; workers=4
        prefetch=4 readahead=2>``: where the run is, what it reads, and how."""
        if self._closed:
            where = "closed" + (f" after {type(self._error).__name__}" if self._error else "")
        else:
            try:
                total = f" of {len(self)}"
            except TypeError:
                total = ""
            where = f"step {self._next_step}{total}, {len(self._pending)} in flight"
            if self._drawn:
                where += f", {len(self._drawn)} read ahead"
            if self._exhausted and not self._pending and not self._drawn:
                where += ", ended"
        streams = ", ".join(f"{name}={_describe_stream(s)}" for name, s in self._streams.items())
        transform = "none" if self._transform is None else _callable_name(self._transform) + (
            "(batch, ctx)" if self._with_context else "")
        return (f"<DataLoader {where}; {len(self._streams)} stream"
                f"{'s' if len(self._streams) > 1 else ''} of {self._length:,} records: "
                f"{streams}; {self._sampler!r}; transform={transform}; "
                f"workers={self._workers} prefetch={self._prefetch} "
                f"readahead={self._readahead}>")


__all__ = ["BatchContext", "DataLoader", "LoaderClosedError", "stream_digests"]


# help(DataLoader) and inspect.signature show __init__'s parameters, not __new__'s catch-all
# (which only exists to answer PyTorch's keywords).
_init_signature = inspect.signature(DataLoader.__init__)
setattr(DataLoader, "__signature__", _init_signature.replace(  # noqa: B010
    parameters=list(_init_signature.parameters.values())[1:]))
