"""loaderx.torch: the loader as a PyTorch IterableDataset, rank-aware and resumable."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from loaderx.sampler import Sampler
from loaderx.torch import TorchIterable, distributed_rank_and_world_size, to_tensors
from loaderx.zrecord import Dense, Ragged

N = 120


@pytest.fixture
def streams(tmp_path):
    with Dense.create(tmp_path / "x", np.float32, (3,), codec="raw") as w:
        w.append(np.arange(N * 3, dtype=np.float32).reshape(N, 3))
    with Ragged.create(tmp_path / "t", np.int64, 1, codec="zstd") as w:
        w.append(np.arange(i % 4, dtype=np.int64) for i in range(N))
    s = {"x": Dense.open(tmp_path / "x"), "t": Ragged.open(tmp_path / "t")}
    yield s
    for v in s.values():
        v.close()


def test_to_tensors_keeps_ragged_as_lists():
    out = to_tensors({"a": np.ones((2, 3)), "b": [np.arange(2), np.arange(0)], "c": 5})
    assert isinstance(out["a"], torch.Tensor) and out["a"].shape == (2, 3)
    assert [t.shape[0] for t in out["b"]] == [2, 0] and out["c"] == 5


def test_with_torch_dataloader(streams):
    ds = TorchIterable(streams, 8, Sampler.Mode.CYCLIC, seed=1, steps=5)
    batches = list(torch.utils.data.DataLoader(ds, batch_size=None))
    assert len(batches) == 5
    idx = Sampler(N, 8, Sampler.Mode.CYCLIC, seed=1).batch(4)
    assert torch.equal(batches[4]["x"][:, 0], torch.from_numpy(idx.astype(np.float32) * 3))
    assert [len(t) for t in batches[4]["t"]] == [int(i) % 4 for i in idx]


def test_resume_continues_where_the_last_iteration_stopped(streams):
    full = [b["x"] for b in TorchIterable(streams, 8, "iid", seed=2, steps=9)]
    ds = TorchIterable(streams, 8, "iid", seed=2, steps=4)
    first = [b["x"] for b in ds]
    state = ds.state_dict()
    again = TorchIterable(streams, 8, "iid", seed=2, steps=5)
    again.load_state_dict(state)
    rest = [b["x"] for b in again]
    assert all(torch.equal(a, b) for a, b in zip(first + rest, full, strict=True))


def test_explicit_ranks_are_disjoint(streams):
    parts = [next(iter(TorchIterable(streams, 10, "cyclic", seed=3, rank=r, world_size=3)))["x"]
             for r in range(3)]
    rows = torch.cat(parts)[:, 0].tolist()
    assert len(set(rows)) == 30


def test_rank_and_world_size_come_from_torch_distributed(streams, tmp_path):
    assert distributed_rank_and_world_size() == (0, 1)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        assert distributed_rank_and_world_size() == (0, 1)
        s = TorchIterable(streams, 4, "sequential").sampler()
        assert (s.rank, s.world_size) == (0, 1)
    finally:
        dist.destroy_process_group()
