"""The loader over a dataset of many stores (zrecord.open_dataset): exact resume across parts,
the same records as one store, and a state refused on another version of the dataset."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from loaderx import DataLoader, Mix, Sampler
from loaderx.sampler import block_records
from loaderx.zrecord import Dense, extend_dataset, open_dataset, open_store, publish_dataset

N = 240


@pytest.fixture
def data(tmp_path):
    """One store of N records, and a dataset of the same records in 5 parts."""
    values = np.arange(N * 2, dtype=np.int64).reshape(N, 2)
    with Dense.create(tmp_path / "one", np.int64, (2,), codec="zstd") as w:
        w.append(values)
    os.makedirs(tmp_path / "ds")
    cuts = [0, 50, 51, 130, 200, N]
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        with Dense.create(tmp_path / "ds" / f"part{k}", np.int64, (2,), codec="zstd") as w:
            w.append(values[a:b])
    publish_dataset(tmp_path / "ds", [f"part{k}" for k in range(5)])
    return tmp_path


@pytest.mark.parametrize("mode", ["iid", "cyclic", "blocks"])
def test_a_dataset_delivers_what_one_store_of_its_records_does(data, mode):
    one, ds = open_store(data / "one"), open_dataset(data / "ds")
    extra = {"block_records": block_records(ds, 256)} if mode == "blocks" else {}
    batches = []
    for stream in (one, ds):
        with DataLoader({"x": stream}, Sampler(N, 16, mode, seed=3, **extra)) as loader:
            batches.append([next(loader)["x"].tolist() for _ in range(20)])
    assert batches[0] == batches[1]


def test_resume_across_parts_is_exact(data):
    ds = open_dataset(data / "ds")
    with DataLoader({"x": ds}, Sampler(N, 24, "cyclic", seed=5)) as loader:
        reference = [next(loader)["x"].tolist() for _ in range(12)]
    with DataLoader({"x": ds}, Sampler(N, 24, "cyclic", seed=5)) as loader:
        for _ in range(7):
            next(loader)
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["digests"] == {"x": ds.digest}
    again = open_dataset(data / "ds")
    with DataLoader({"x": again}, Sampler(N, 24, "cyclic", seed=5), state=state) as loader:
        assert [next(loader)["x"].tolist() for _ in range(5)] == reference[7:]


def test_a_state_of_one_version_is_refused_on_another(data):
    v1 = open_dataset(data / "ds")
    with DataLoader({"x": v1}, Sampler(N, 8, "cyclic", seed=1)) as loader:
        next(loader)
        state = loader.state_dict()
    with Dense.create(data / "ds" / "more", np.int64, (2,), codec="zstd") as w:
        w.append(np.zeros((10, 2), np.int64))
    assert extend_dataset(data / "ds", ["more"]) == 2
    v2 = open_dataset(data / "ds")
    with pytest.raises(ValueError) as info:
        DataLoader({"x": v2}, Sampler(N + 10, 8, "cyclic", seed=1), state=state)
    assert "(version 2 of a dataset)" in str(info.value)
    assert v1.digest in str(info.value) and v2.digest in str(info.value)
    # The version the state was saved on still resumes.
    with DataLoader({"x": open_dataset(data / "ds", version=1)}, Sampler(N, 8, "cyclic", seed=1),
                    state=state) as loader:
        assert loader.step == 1


def test_datasets_mix_with_stores(data):
    ds, one = open_dataset(data / "ds"), open_store(data / "one")
    mix = Mix([{"x": ds}, {"x": one}], [1, 1], batch_size=8, seed=0)
    with DataLoader(mix.streams, mix) as loader:
        batch = next(loader)["x"]
    assert batch.shape == (8, 2)
    assert mix.streams["x"].digest is not None
