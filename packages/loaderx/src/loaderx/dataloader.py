"""The endless, step-based, thread-pool prefetching DataLoader.

``DataLoader(streams, sampler, transform=None, *, workers=4, prefetch=4, state=None)`` turns a
dict of equal-length streams (zrecord stores, or any object with ``__len__`` and batch
indexing) and a sampler into an endless iterator of batches ``{name: values}``: every stream
is gathered at the same indices, so record ``i`` lines up across them. Dense streams give
stacked arrays, Ragged streams lists of arrays; nothing is padded.

Invariants:
- Step order. The sampler is drawn only by the consuming thread, in step order, and its
  borrowed index view is copied before the next draw. Gather and transform run on ``workers``
  threads and may finish in any order, but batches are delivered strictly in step order.
  ``loader.step`` is the step of the batch last delivered.
- Exact resume. The sampler is a pure function of (seed, step), so ``state_dict()`` (the next
  step to deliver, plus the sampler's configuration) is all a resumed run needs: stopping after
  any k batches and resuming yields exactly the batches the uninterrupted run would have.
- Bounded memory. ``prefetch`` is a budget of batches: at most ``prefetch`` batches exist at
  once, counting the one last delivered (the consumer still holds it while it asks for the
  next), so ``prefetch - 1`` steps are in flight (at least one). Peak batch memory is about
  ``max(prefetch, 2)`` times the bytes of one gathered batch (plus the transform's output).
- Threads. ``close()`` cancels what has not started, waits for what has, and joins every
  thread; it is idempotent, and the same shutdown runs when the loader is garbage-collected or
  the interpreter exits. An exception in gather or transform reaches the consumer with its
  original traceback, after the loader has closed itself.
- Closing from another thread. ``close()`` may run on any thread while the consumer is inside
  ``next()``; that ``next()`` (and every later one) raises ``LoaderClosedError``, never a
  batch, ``CancelledError`` or an executor error. One lock orders ``close()`` against the
  consumer's submissions, so no work is ever submitted after the executor is shut down.
"""

from __future__ import annotations

import collections
import concurrent.futures
import operator
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

STATE_VERSION = 1


class LoaderClosedError(RuntimeError):
    """The DataLoader was closed (explicitly, by an error, or at interpreter exit)."""


def _shutdown(executor: concurrent.futures.ThreadPoolExecutor) -> None:
    executor.shutdown(wait=True, cancel_futures=True)


class _Stats:
    """Counters updated by the worker threads and the consumer (under one lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches = 0
        self.gather_s = 0.0
        self.transform_s = 0.0
        self.wait_s = 0.0
        self.started = time.perf_counter()


def _run_step(streams: dict[str, Any], transform: Callable[[dict[str, Any]], Any] | None,
              stats: _Stats, indices: np.ndarray) -> Any:
    """Runs on a worker thread: gather every stream at `indices`, then transform.

    A plain function of its arguments, so queued work never holds the loader itself: dropping
    the last reference to a loader finalizes it at once, on the consumer's thread.
    """
    t0 = time.perf_counter()
    batch = {name: stream[indices] for name, stream in streams.items()}
    t1 = time.perf_counter()
    out = transform(batch) if transform is not None else batch
    t2 = time.perf_counter()
    with stats.lock:
        stats.gather_s += t1 - t0
        stats.transform_s += t2 - t1
    return out


class DataLoader:
    """Endless iterator of index-aligned batches from a dict of streams. See the module docs."""

    step: int | None
    """The step of the batch last delivered (None before the first); ``state_dict()["step"]``
    is the next one."""

    def __init__(self, streams: Mapping[str, Any], sampler: Any,
                 transform: Callable[[dict[str, Any]], Any] | None = None, *,
                 workers: int = 4, prefetch: int = 4, state: Mapping[str, Any] | None = None
                 ) -> None:
        if not isinstance(streams, Mapping) or not streams:
            raise TypeError("streams must be a non-empty dict {name: store}; got "
                            f"{type(streams).__name__}")
        lengths = {}
        for name, stream in streams.items():
            if not hasattr(stream, "__getitem__"):
                raise TypeError(f"stream {name!r} ({type(stream).__name__}) has no batch "
                                "indexing (__getitem__)")
            try:
                lengths[name] = len(stream)
            except TypeError as exc:
                raise TypeError(f"stream {name!r} ({type(stream).__name__}) has no "
                                "__len__") from exc
        if len(set(lengths.values())) > 1:
            raise ValueError("all streams must have the same length; got " +
                             ", ".join(f"{k}={v}" for k, v in lengths.items()))
        if not callable(getattr(sampler, "next", None)):
            raise TypeError(f"sampler must have a next() method returning an index array; got "
                            f"{type(sampler).__name__}")
        sampler_length = getattr(sampler, "length", None)
        length = next(iter(lengths.values()))
        if sampler_length is not None and sampler_length > length:
            raise ValueError(f"the sampler draws from {sampler_length} records but the streams "
                             f"have {length}")
        self._workers = operator.index(workers)
        self._prefetch = operator.index(prefetch)
        if self._workers < 1:
            raise ValueError(f"workers must be at least 1; got {workers}")
        if self._prefetch < 1:
            raise ValueError(f"prefetch must be at least 1; got {prefetch}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable; got {type(transform).__name__}")
        self._streams = dict(streams)
        self._sampler = sampler
        self._transform = transform
        self._length = length
        self._pending: collections.deque[tuple[int, concurrent.futures.Future[Any]]] = \
            collections.deque()
        self._stats = _Stats()
        # Guards _closed and _pending: close() may run on another thread while the consumer is
        # inside next().
        self._lock = threading.Lock()
        self._closed = False
        self._error: BaseException | None = None
        self._next_step = int(getattr(sampler, "step", 0))
        self.step: int | None = None  # step of the batch last delivered
        if state is not None:
            self.load_state_dict(state)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._workers, thread_name_prefix="loaderx")
        self._finalizer = weakref.finalize(self, _shutdown, self._executor)

    # -- the pipeline ---------------------------------------------------------------------

    def _submit(self) -> None:
        """Draw the next step's indices (in step order, on this thread) and queue its work."""
        indices = self._sampler.next()
        # The sampler's view is borrowed until its next draw; the worker needs its own copy.
        own = np.array(indices, dtype=np.uint64, copy=True)
        if own.ndim != 1:
            raise ValueError(f"the sampler returned indices of shape {own.shape}; a "
                             "one-dimensional array is required")
        future = self._executor.submit(_run_step, self._streams, self._transform, self._stats, own)
        self._pending.append((self._next_step + len(self._pending), future))

    def __iter__(self) -> DataLoader:
        return self

    def _claim(self) -> tuple[int, concurrent.futures.Future[Any]]:
        """Top up the steps in flight and take the oldest, under the lock that close() takes,
        so that nothing is submitted to an executor that close() has shut down."""
        with self._lock:
            if self._closed:
                raise self._closed_error()
            # The consumer still holds the batch last delivered: it counts against prefetch.
            while len(self._pending) < max(1, self._prefetch - 1):
                self._submit()
            return self._pending.popleft()

    def _closed_error(self) -> LoaderClosedError:
        return LoaderClosedError("the DataLoader is closed" +
                                 (f" after an error: {self._error!r}" if self._error else ""))

    def __next__(self) -> Any:
        try:
            step, future = self._claim()
            t = time.perf_counter()
            result = future.result()
            wait = time.perf_counter() - t
        except LoaderClosedError:
            raise
        except BaseException as exc:
            if self._closed:
                # close() ran on another thread and cancelled this step (CancelledError) or
                # raced it: the consumer learns that the loader is closed, nothing else.
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
        self.step = step
        self._next_step = step + 1
        return result

    def next(self) -> Any:
        """The next batch (same as ``next(loader)``)."""
        return self.__next__()

    # -- resume ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The loader's position: small and JSON-serialisable.

        ``step`` is the step of the next batch to deliver; batches prefetched but not yet
        delivered are not part of the state and are recomputed on resume.
        """
        state: dict[str, Any] = {"version": STATE_VERSION, "step": self._next_step,
                                 "streams": {k: self._length for k in self._streams}}
        if hasattr(self._sampler, "state_dict"):
            sampler_state = dict(self._sampler.state_dict())
            sampler_state["step"] = self._next_step
            state["sampler"] = sampler_state
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a saved state: the next batch is the one the saved run would have
        delivered next. Batches in flight are discarded."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported DataLoader state version {state.get('version')!r}; "
                             f"this loaderx writes version {STATE_VERSION}")
        saved = dict(state.get("streams", {}))
        current = {k: self._length for k in self._streams}
        if saved != current:
            raise ValueError(f"state was saved for streams {saved}, but this loader has "
                             f"{current}")
        step = operator.index(state["step"])
        if "sampler" in state and hasattr(self._sampler, "load_state_dict"):
            self._sampler.load_state_dict({**state["sampler"], "step": step})
        elif hasattr(self._sampler, "seek"):
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
        self._next_step = step
        self.step = step - 1 if step > 0 else None

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after ``close()`` (or after an error closed the loader)."""
        return self._closed

    def close(self) -> None:
        """Cancel pending work, wait for running work and join every thread. Idempotent.

        Does not close the streams or the sampler: they belong to the caller.
        """
        # Held until every thread is joined, so that a close() racing another one (or a next()
        # that would submit new work) waits for it instead of returning early.
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _, future in self._pending:
                future.cancel()
            self._pending.clear()
            # Also cancels the step the consumer may be waiting on, if it has not started.
            self._finalizer()

    def __enter__(self) -> DataLoader:
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

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"next step {self._next_step}"
        return (f"<DataLoader streams={list(self._streams)} workers={self._workers} "
                f"prefetch={self._prefetch} ({state})>")


__all__ = ["DataLoader", "LoaderClosedError"]
