"""Dataset identity ([M1] 2): store digests in the loader's state, refused on other data,
and the one-call check that every rank reads the same stores."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from loaderx import DataLoader, Mix, Sampler
from loaderx.dataloader import stream_digests
from loaderx.zrecord import Dense

N = 200


def write(path, values):
    with Dense.create(path, values.dtype, values.shape[1:], codec="zstd") as w:
        w.append(values)


@pytest.fixture
def data(tmp_path):
    write(tmp_path / "x", np.arange(N * 2, dtype=np.float32).reshape(N, 2))
    write(tmp_path / "y", np.arange(N, dtype=np.int64))
    changed = np.arange(N, dtype=np.int64)
    changed[17] = -1
    write(tmp_path / "y_rebuilt", changed)
    shutil.copytree(tmp_path / "y", tmp_path / "y_copy")
    return tmp_path


def test_the_state_names_the_stores_and_a_copy_resumes(data):
    streams = {"x": Dense.open(data / "x"), "y": Dense.open(data / "y")}
    with DataLoader(streams, Sampler(N, 8, "cyclic", seed=1)) as loader:
        reference = [next(loader)["y"].tolist() for _ in range(6)]
    with DataLoader(streams, Sampler(N, 8, "cyclic", seed=1)) as loader:
        next(loader), next(loader)
        state = json.loads(json.dumps(loader.state_dict()))
    assert state["digests"] == {"x": streams["x"].digest, "y": streams["y"].digest}
    assert state["digests"] == stream_digests(streams)
    copy = {"x": streams["x"], "y": Dense.open(data / "y_copy")}   # another host's copy
    with DataLoader(copy, Sampler(N, 8, "cyclic", seed=1), state=state) as loader:
        assert [next(loader)["y"].tolist() for _ in range(4)] == reference[2:]


def test_resuming_on_other_records_is_refused(data):
    streams = {"x": Dense.open(data / "x"), "y": Dense.open(data / "y")}
    with DataLoader(streams, Sampler(N, 8, "cyclic", seed=1)) as loader:
        next(loader)
        state = loader.state_dict()
    rebuilt = {"x": streams["x"], "y": Dense.open(data / "y_rebuilt")}
    with pytest.raises(ValueError) as info:
        DataLoader(rebuilt, Sampler(N, 8, "cyclic", seed=1), state=state)
    message = str(info.value)
    assert "stream 'y' at" in message and "y_rebuilt" in message
    assert "is not the store the state was saved with" in message
    assert rebuilt["y"].digest in message and streams["y"].digest in message
    arrays = {"x": np.zeros((N, 2), np.float32), "y": np.arange(N)}
    with pytest.raises(ValueError, match="stream 'x' has no digest now"):
        DataLoader(arrays, Sampler(N, 8, "cyclic", seed=1), state=state)
    # Without digests (a state of 3.0.0a0, or of NumPy streams) nothing is checked.
    old = {k: v for k, v in state.items() if k != "digests"}
    with DataLoader(arrays, Sampler(N, 8, "cyclic", seed=1), state=old) as loader:
        assert loader.step == 1
        assert "digests" not in loader.state_dict()


def test_mix_streams_carry_a_digest_of_their_sources(data):
    a = {"y": Dense.open(data / "y")}
    b = {"y": Dense.open(data / "y_rebuilt")}
    mix = Mix([a, b], [1, 1], batch_size=8)
    swapped = Mix([b, a], [1, 1], batch_size=8)
    digest = stream_digests(mix.streams)["y"]
    assert digest is not None and len(digest) == 16
    assert digest != stream_digests(swapped.streams)["y"]
    assert stream_digests(Mix([{"y": np.arange(5)}, a], [1, 1], batch_size=2).streams) == {
        "y": None}
    with DataLoader(mix.streams, mix) as loader:
        next(loader)
        state = loader.state_dict()
    assert state["digests"] == {"y": digest}
    with pytest.raises(ValueError, match="is not the store the state was saved with"):
        DataLoader(swapped.streams, Mix([b, a], [1, 1], batch_size=8), state=state)


def test_check_same_stores_without_a_process_group_returns_the_digests(data):
    pytest.importorskip("torch")
    from loaderx.torch import check_same_stores

    streams = {"y": Dense.open(data / "y")}
    assert check_same_stores(streams) == {"y": streams["y"].digest}
