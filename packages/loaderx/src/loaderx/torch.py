"""PyTorch integration: a loaderx pipeline as a ``torch.utils.data.IterableDataset``.

``TorchIterable`` builds the Sampler and DataLoader when iteration starts, taking ``rank`` and
``world_size`` from ``torch.distributed`` when a process group is initialised (or from the
arguments), so every process of a distributed job reads its own disjoint share of each step
and all processes run the same number of steps. Batches are converted to tensors by
``to_tensors`` unless another transform is given. Hand it to
``torch.utils.data.DataLoader(dataset, batch_size=None)`` or iterate it directly; loaderx's
threads do the prefetching, so PyTorch worker processes are not needed.

Resume: ``state_dict()`` is the position of the iteration in progress (or last finished), and
``load_state_dict(state)`` makes the next iteration continue from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset

from loaderx.dataloader import DataLoader
from loaderx.sampler import Mode, Sampler


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


def distributed_rank_and_world_size() -> tuple[int, int]:
    """(rank, world_size) of the initialised default process group, else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class TorchIterable(IterableDataset):  # type: ignore[type-arg]
    """An endless (or `steps`-long) iterable of batches for PyTorch training loops."""

    def __init__(self, streams: Mapping[str, Any], batch_size: int, mode: Mode | str,
                 seed: int = 0, transform: Callable[[dict[str, Any]], Any] | None = to_tensors, *,
                 steps: int | None = None, workers: int = 4, prefetch: int = 4,
                 rank: int | None = None, world_size: int | None = None) -> None:
        super().__init__()
        self.streams = dict(streams)
        self.batch_size = batch_size
        self.mode = mode
        self.seed = seed
        self.transform = transform
        self.steps = steps
        self.workers = workers
        self.prefetch = prefetch
        self.rank = rank
        self.world_size = world_size
        self._state: dict[str, Any] | None = None
        self._loader: DataLoader | None = None

    def sampler(self) -> Sampler:
        """The Sampler for this process: rank and world size from the arguments, else from
        torch.distributed."""
        rank, world = distributed_rank_and_world_size()
        rank = rank if self.rank is None else self.rank
        world = world if self.world_size is None else self.world_size
        length = len(next(iter(self.streams.values())))
        return Sampler(length, self.batch_size, self.mode, self.seed, rank=rank,
                       world_size=world)

    def __iter__(self) -> Iterator[Any]:
        loader = DataLoader(self.streams, self.sampler(), self.transform, workers=self.workers,
                            prefetch=self.prefetch, state=self._state)
        self._loader = loader
        try:
            count = 0
            while self.steps is None or count < self.steps:
                batch = next(loader)
                self._state = loader.state_dict()
                count += 1
                yield batch
        finally:
            loader.close()

    def state_dict(self) -> dict[str, Any] | None:
        """Where the next iteration continues (None before the first batch)."""
        return None if self._state is None else dict(self._state)

    def load_state_dict(self, state: Mapping[str, Any] | None) -> None:
        """Resume from a ``state_dict()`` (None starts from the beginning) on the next iteration."""
        self._state = None if state is None else dict(state)


__all__ = ["TorchIterable", "distributed_rank_and_world_size", "to_tensors"]
