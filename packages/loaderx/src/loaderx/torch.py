"""PyTorch integration: a loaderx pipeline as a ``torch.utils.data.IterableDataset``.

``TorchIterable(streams, batch_size, mode, seed)`` builds the Sampler and DataLoader when
iteration starts, taking ``rank`` and ``world_size`` from ``torch.distributed`` when a process
group is initialised (or from the arguments), so every process of a distributed job reads its
own disjoint share of each step and all processes run the same number of steps.
``TorchIterable(streams, sampler)`` takes a sampler built beforehand (a ``Sampler`` with its
own rank and world size, a ``Mix``, any ``BatchSampler``), as ``DataLoader(streams, sampler)``
does. Batches are converted to tensors by
``to_tensors`` unless another transform is given. Hand it to
``torch.utils.data.DataLoader(dataset, batch_size=None)`` or iterate it directly.

Invariants:
- The same data everywhere. ``check_same_stores(streams)`` compares every rank's store
  digests through one collective and raises on every rank at once when they differ.
- One process iterates. loaderx prefetches on its own threads (``workers=``), so PyTorch
  worker processes are refused (``num_workers > 0``): each would iterate the whole pipeline,
  delivering every batch once per worker, and the state would advance only in the worker's copy
  of the dataset, so the main process could not resume. Splitting steps between workers would
  not help either: the main process never learns how many batches it consumed, and every
  worker would hold its own thread pool and batch budget. ``__iter__`` raises ValueError inside
  a worker and pickling (spawn, forkserver) raises TypeError, both saying ``num_workers=0``.
- Resume. ``state_dict()`` is the position after the batch last yielded (None before the
  first), and ``load_state_dict(state)`` makes the next iteration continue from it. A state
  saved with another world size is resharded for this rank when iteration starts (elastic
  resume), which is exact when ``batch_size * world_size`` is the saved global batch and
  refused, with the batch size that would work, otherwise.
- ``steps`` is the length of the run counted from step 0, not per iteration: a run of
  ``steps=10`` stopped after 4 batches and resumed yields the remaining 6. With ``passes``
  (evaluation: every record once per pass, see ``loaderx.sampler``) the run also ends when
  the sampler does, whichever comes first.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Iterator, Mapping
from typing import Any, overload

import numpy as np

try:
    import torch
    import torch.distributed as dist
    from torch.utils.data import IterableDataset
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "loaderx.torch needs PyTorch, which loaderx does not install for you (the right build "
        "depends on your platform and accelerator): pip install torch, or pick the command "
        "for your CUDA/ROCm/CPU build at https://pytorch.org/get-started/locally/"
    ) from exc

from loaderx.dataloader import (
    DataLoader,
    _callable_name,
    _describe_stream,
    _stream_lengths,
    check_sampler_length,
    stream_digests,
)
from loaderx.protocols import BatchSampler, Stream, _Seekable
from loaderx.sampler import Mode, ModeName, Sampler


def to_tensors(batch: Mapping[str, Any]) -> dict[str, Any]:
    """Dense values become tensors (sharing memory with the arrays); Ragged lists become lists
    of tensors. Nothing is padded."""
    out: dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, np.ndarray):
            out[name] = torch.from_numpy(value)
        elif isinstance(value, list):
            out[name] = [torch.from_numpy(v) for v in value]
        else:
            out[name] = value
    return out


def check_same_stores(streams: Mapping[str, Stream], group: Any = None) -> dict[str, str | None]:
    """Check that every rank of the process group reads the same stores; call it on every
    rank after opening the streams, before training. Returns this rank's ``{name: digest}``.

    Each rank contributes its streams' digests (``loaderx.dataloader.stream_digests``: a
    zrecord store's header checksum) and paths through one ``all_gather_object``; when any
    rank's differ from rank 0's, every rank raises the same ValueError, which names the
    ranks, streams, digests and paths, so no rank is left waiting in a collective. A stale
    copy of a store on one host is the usual cause. Without an initialised process group it
    only returns the digests.
    """
    digests = stream_digests(streams)
    if not (dist.is_available() and dist.is_initialized()):
        return digests
    mine = {name: (digests[name], str(getattr(stream, "path", type(stream).__name__)))
            for name, stream in streams.items()}
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, mine, group=group)
    reference = gathered[0]
    problems = []
    for rank, seen in enumerate(gathered):
        if set(seen) != set(reference):
            problems.append(f"rank {rank} has streams {sorted(seen)}, rank 0 {sorted(reference)}")
            continue
        for name, (digest, path) in seen.items():
            if digest != reference[name][0]:
                problems.append(f"rank {rank} reads {name!r} from {path} with digest {digest}, "
                                f"rank 0 from {reference[name][1]} with digest "
                                f"{reference[name][0]}")
    if problems:
        raise ValueError("the ranks do not read the same stores, so they would not train on "
                         "the same dataset: " + "; ".join(problems) + ". Copy the same "
                         "published store to every host (copies keep the digest).")
    return digests


def distributed_rank_and_world_size() -> tuple[int, int]:
    """(rank, world_size) of the initialised default process group, else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


_ONE_PROCESS = ("Pass num_workers=0 to torch.utils.data.DataLoader: loaderx prefetches on "
                "its own threads, so set TorchIterable(workers=...) for parallel reads instead.")


def _sampler_form(streams: Mapping[str, Stream], sampler: BatchSampler,
                  transform: Callable[[dict[str, Any]], Any] | None = to_tensors, *,
                  steps: int | None = None, workers: int = 4, prefetch: int = 4,
                  subset: bool = False) -> None:
    """The signature of ``TorchIterable(streams, sampler, ...)`` (only bound, never run)."""


def _size_form(streams: Mapping[str, Stream], batch_size: int, mode: Mode | ModeName, seed: int = 0,
               transform: Callable[[dict[str, Any]], Any] | None = to_tensors, *,
               steps: int | None = None, workers: int = 4, prefetch: int = 4,
               rank: int | None = None, world_size: int | None = None,
               passes: int | None = None) -> None:
    """The signature of ``TorchIterable(streams, batch_size, mode, ...)`` (only bound)."""


def _spell(form: Callable[..., None]) -> str:
    """``TorchIterable(streams, sampler, transform=to_tensors, *, steps=None, ...)``: a form's
    call as an error message shows it, without the annotations."""
    parts = []
    for parameter in inspect.signature(form).parameters.values():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in parts:
            parts.append("*")
        default = parameter.default
        if default is inspect.Parameter.empty:
            parts.append(parameter.name)
        else:
            shown = _callable_name(default) if callable(default) else repr(default)
            parts.append(f"{parameter.name}={shown}")
    return f"TorchIterable({', '.join(parts)})"


# The two calls TorchIterable accepts, as error messages spell them.
_FORMS = (f"{_spell(_sampler_form)}, as DataLoader(streams, sampler) takes a Sampler, a Mix or "
          f"any BatchSampler; or {_spell(_size_form)}, which builds the Sampler for each "
          "process")


def _bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """(True when the call gives a sampler, its arguments by name, defaults filled in) for a
    ``TorchIterable(...)`` call; a TypeError naming both accepted forms when it matches
    neither. A sampler is recognised by type, so ``TorchIterable(streams, Sampler(...))``
    never reads the sampler as a batch size."""
    given_sampler = "sampler" in kwargs or (len(args) > 1 and isinstance(args[1], BatchSampler))
    form = _sampler_form if given_sampler else _size_form
    try:
        bound = inspect.signature(form).bind(*args, **kwargs)
    except TypeError as exc:
        fit = "gives a sampler but does not fit the first form" if given_sampler else \
            "gives no sampler and does not fit the second form"
        raise TypeError(f"TorchIterable takes {_FORMS}; this call {fit}: {exc}") from None
    bound.apply_defaults()
    values = dict(bound.arguments)
    if given_sampler and not (isinstance(values["sampler"], BatchSampler) and
                              callable(values["sampler"].next)):
        raise TypeError(f"TorchIterable sampler must be a BatchSampler (a next() method "
                        f"returning the next step's indices); got "
                        f"{type(values['sampler']).__name__}. It takes {_FORMS}")
    if not given_sampler:
        try:
            operator.index(values["batch_size"])
        except TypeError:
            raise TypeError(f"TorchIterable batch_size must be an integer; got "
                            f"{type(values['batch_size']).__name__} "
                            f"{values['batch_size']!r}. It takes {_FORMS}") from None
    transform = values["transform"]
    if transform is not None and not callable(transform):
        raise TypeError(f"TorchIterable transform must be callable or None; got "
                        f"{type(transform).__name__} {transform!r}. It takes {_FORMS}")
    return given_sampler, values


class TorchIterable(IterableDataset):  # type: ignore[type-arg]
    """An endless (or `steps`-long) iterable of batches for PyTorch training loops.

    Two calls build one: ``TorchIterable(streams, sampler)``, the way ``DataLoader(streams,
    sampler)`` is built, with a ``Sampler``, a ``Mix`` or any ``BatchSampler`` (its rank and
    world size are the sampler's); or ``TorchIterable(streams, batch_size, mode, seed=0)``,
    which builds a ``Sampler`` for each process with ``rank`` and ``world_size`` from the
    arguments, else from ``torch.distributed``. Both take ``transform=to_tensors``, ``steps``,
    ``workers`` and ``prefetch``; ``rank``, ``world_size`` and ``passes`` are the second
    form's (give them to the Sampler in the first). A call that fits neither is a TypeError
    that spells both.

    Use it with ``torch.utils.data.DataLoader(dataset, batch_size=None)`` and the default
    ``num_workers=0``; ``workers`` sets loaderx's own reading threads. Iterated again after
    its sampler's ``passes`` ended, it makes them again from step 0, as a dataset does each
    epoch; after a ``break`` (or ``steps`` reached), it goes on where it stopped. See the module
    documentation for why worker processes are refused.
    """

    @overload
    def __init__(self, streams: Mapping[str, Stream], sampler: BatchSampler,
                 transform: Callable[[dict[str, Any]], Any] | None = to_tensors, *,
                 steps: int | None = None, workers: int = 4, prefetch: int = 4,
                 subset: bool = False) -> None: ...

    @overload
    def __init__(self, streams: Mapping[str, Stream], batch_size: int, mode: Mode | ModeName,
                 seed: int = 0, transform: Callable[[dict[str, Any]], Any] | None = to_tensors,
                 *, steps: int | None = None, workers: int = 4, prefetch: int = 4,
                 rank: int | None = None, world_size: int | None = None,
                 passes: int | None = None) -> None: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        given_sampler, values = _bind(args, kwargs)
        # The DataLoader's checks, before iteration starts.
        lengths = _stream_lengths(values["streams"])
        self.streams: dict[str, Stream] = dict(values["streams"])
        # The sampler given to the first form; None when each iteration builds its own.
        self._sampler: BatchSampler | None = values["sampler"] if given_sampler else None
        self._subset: bool = bool(values.get("subset", False))
        if self._sampler is not None:
            check_sampler_length(self._sampler, next(iter(lengths.values())), self._subset)
        self.batch_size: int | None = values.get("batch_size")
        self.mode: Mode | ModeName | None = values.get("mode")
        self.seed: int | None = values.get("seed")
        self.rank: int | None = values.get("rank")
        self.world_size: int | None = values.get("world_size")
        self.passes: int | None = values.get("passes")
        self.transform: Callable[[dict[str, Any]], Any] | None = values["transform"]
        steps = values["steps"]
        if steps is not None:
            steps = operator.index(steps)
            if steps < 0:
                raise ValueError(f"TorchIterable steps must be >= 0 or None; got {steps}")
        self.steps: int | None = steps
        self.workers: int = values["workers"]
        self.prefetch: int = values["prefetch"]
        self._state: dict[str, Any] | None = None
        # The next iteration starts from step 0, not where a given sampler stands: after its
        # passes ended, or load_state_dict(None).
        self._from_start = False

    def sampler(self) -> BatchSampler:
        """The sampler for this process: the one given to ``TorchIterable(streams,
        sampler)``, else a new ``Sampler`` with rank and world size from the arguments, else
        from torch.distributed."""
        if self._sampler is not None:
            return self._sampler
        assert self.batch_size is not None and self.mode is not None  # the second form's
        rank, world = distributed_rank_and_world_size()
        rank = rank if self.rank is None else self.rank
        world = world if self.world_size is None else self.world_size
        length = len(next(iter(self.streams.values())))
        return Sampler(length, self.batch_size, self.mode, self.seed or 0, rank=rank,
                       world_size=world, passes=self.passes)

    def __iter__(self) -> Iterator[Any]:
        worker = torch.utils.data.get_worker_info()
        if worker is not None:
            raise ValueError(
                f"TorchIterable is iterating in PyTorch DataLoader worker process {worker.id} of "
                f"{worker.num_workers}: every worker would deliver every batch, and the main "
                f"process could not resume. {_ONE_PROCESS}")
        sampler = self.sampler()
        state = self._state
        if state is None and self._from_start and isinstance(sampler, _Seekable):
            sampler.seek(0)
        self._from_start = False
        saved = None if state is None else state.get("sampler")
        world = getattr(sampler, "world_size", None)
        if state is not None and isinstance(saved, Mapping) and world is not None and \
                saved.get("world_size") != world:
            # Elastic resume: a state of another world size, rewritten for this rank. The
            # DataLoader then refuses it unless batch_size keeps the global batch.
            state = DataLoader.reshard(state, world_size=world,
                                       rank=getattr(sampler, "rank", 0))
        with DataLoader(self.streams, sampler, self.transform, workers=self.workers,
                        prefetch=self.prefetch, state=state, subset=self._subset) as loader:
            # Counted from the step the loader starts at (a given sampler's, or the state's).
            step = loader.step
            while self.steps is None or step < self.steps:
                try:
                    batch = next(loader)
                except StopIteration:
                    # `passes` given: every record was delivered. Iterated again, the pass
                    # starts again from step 0, as iterating a dataset again does (an
                    # evaluation set each epoch); a pass left early (a break) goes on where it
                    # stopped instead, and `steps` reached keeps its state for a resume.
                    self._state = None
                    self._from_start = True
                    return
                self._state = loader.state_dict()
                step = self._state["step"]
                yield batch

    def __repr__(self) -> str:
        """``<TorchIterable 2 streams of 120 records: x=Dense float32 (3,), ...; batch_size=8
        mode=cyclic seed=1 steps=10; rank and world_size from torch.distributed; workers=4
        prefetch=4; transform=to_tensors; next step 4>``."""
        n = len(next(iter(self.streams.values())))
        streams = ", ".join(f"{k}={_describe_stream(v)}" for k, v in self.streams.items())
        run = f" steps={self.steps}" if self.steps is not None else ""
        run += f" passes={self.passes}" if self.passes is not None else ""
        transform = "none" if self.transform is None else _callable_name(self.transform)
        step = 0 if self._state is None else self._state["step"]
        head = (f"<TorchIterable {len(self.streams)} stream"
                f"{'s' if len(self.streams) > 1 else ''} of {n:,} records: {streams}; ")
        tail = (f"workers={self.workers} prefetch={self.prefetch}; transform={transform}; "
                f"next step {step}>")
        if self._sampler is not None:
            return f"{head}sampler {self._sampler!r}{';' + run if run else ''}; {tail}"
        mode = self.mode.name.lower() if isinstance(self.mode, Mode) else str(self.mode).lower()
        if self.rank is None and self.world_size is None:
            ranks = "rank and world_size from torch.distributed"
        else:
            ranks = (f"rank={'from torch.distributed' if self.rank is None else self.rank} "
                     f"world_size="
                     f"{'from torch.distributed' if self.world_size is None else self.world_size}")
        return (f"{head}batch_size={self.batch_size} mode={mode} seed={self.seed}{run}; "
                f"{ranks}; {tail}")

    def __getstate__(self) -> dict[str, Any]:
        # Only PyTorch worker processes started by spawn or forkserver pickle the dataset.
        raise TypeError(f"TorchIterable is not sent to other processes. {_ONE_PROCESS}")

    def state_dict(self) -> dict[str, Any] | None:
        """Where the next iteration continues (None before the first batch)."""
        return None if self._state is None else dict(self._state)

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Resume from a ``state_dict()`` (None starts from the beginning: step 0) on the next
        iteration."""
        if state is not None and not isinstance(state, Mapping):
            raise TypeError(f"TorchIterable state must be the dict that state_dict() returned "
                            f"(parse a saved one: json.loads(text)), or None; got "
                            f"{type(state).__name__}")
        self._state = None if state is None else dict(state)
        self._from_start = state is None


__all__ = ["TorchIterable", "check_same_stores", "distributed_rank_and_world_size",
           "to_tensors"]
