"""What a ``DataLoader`` reads from and draws its steps from: the ``Stream`` and
``BatchSampler`` protocols.

Both are structural: an object qualifies by having the methods, not by subclassing anything.
zrecord's ``Dense`` and ``Ragged`` stores, NumPy arrays and the streams of ``Mix.streams`` are
streams; ``Sampler`` and ``Mix`` are batch samplers. Annotate a stream or sampler of your own
with them, and mypy checks it against what the loader calls.

Beyond the protocols, the loader uses these when an object has them (a sampler without them
still runs, and only the feature that needs them is refused):

- a stream's ``prefetch(indices)``: read-ahead hints (zrecord stores);
  its ``foresee(batch_of, progress)``, with a sampler's ``batch(step)``: the sampler's future
  for the stream's cache (zrecord stores opened by URL with a ``cache_bytes`` budget);
  its ``digest`` (a str): the resume check and ``stream_digests``;
- a sampler's ``state_dict()`` and ``load_state_dict(state)``, or else ``seek(step)``:
  resume; ``__len__``: a finite run's ``len(loader)``; ``length``: checked against the
  streams' length; ``seed``, ``rank``, ``world_size`` and ``step``: a transform's
  ``BatchContext`` and where the loader starts.

Both protocols are ``runtime_checkable``: ``isinstance(x, Stream)`` tells whether ``x`` has the
methods, not whether they work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from numpy.typing import ArrayLike


@runtime_checkable
class Stream(Protocol):
    """A sequence of records that can be gathered a batch at a time: ``len(stream)`` records,
    and ``stream[indices]`` the records at a one-dimensional uint64 array of indices (a
    stacked array for fixed-shape records, a list of arrays for variable-shape ones)."""

    def __len__(self) -> int: ...

    def __getitem__(self, indices: Any, /) -> Any: ...


@runtime_checkable
class BatchSampler(Protocol):
    """The source of a loader's steps: each ``next()`` returns the record indices of the next
    step, in step order, and raises StopIteration after the last step of a finite run."""

    def next(self) -> ArrayLike:
        """The indices of the next step: a one-dimensional array of record numbers. The loader
        copies it before the next call, so it may be a view of a reused buffer."""
        ...


@runtime_checkable
class _Resumable(Protocol):
    """A sampler whose position and configuration can be saved and restored."""

    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any], /) -> None: ...


@runtime_checkable
class _Seekable(Protocol):
    """A sampler that can jump to any step (resume without a saved configuration)."""

    def seek(self, step: int, /) -> None: ...


@runtime_checkable
class _Prefetching(Protocol):
    """A stream that takes read-ahead hints for the indices of steps to come."""

    def prefetch(self, indices: Any, /) -> Any: ...


@runtime_checkable
class _Foreseeing(Protocol):
    """A stream that is told the sampler's future (zrecord stores opened by URL: their cache
    evicts what is needed farthest ahead): `batch_of(step)` the indices of any step,
    `progress()` the first step not yet consumed, None once the loader is gone. Returns a
    handle with ``close()``, or None."""

    def foresee(self, batch_of: Callable[[int], Any], progress: Callable[[], int | None], /) -> Any: ...


__all__ = ["BatchSampler", "Stream"]
