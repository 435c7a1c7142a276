"""[U3] item 2: stores pickle as what reopens them, so that a map-style dataset holding stores
works with the 'spawn' and 'forkserver' start methods (PyTorch's DataLoader workers, the
default start method on Linux from Python 3.14); writers refuse to pickle, saying why."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil

import numpy as np
import pytest

from zrecord import Dense, Ragged, open_store
from zrecord.errors import ClosedError, StoreChangedError


class Pairs:
    """A map-style dataset as users write one for PyTorch: stores opened in __init__, read in
    __getitem__ (the class must live in an importable module for 'spawn' to find it)."""

    def __init__(self, root: str) -> None:
        self.images = Dense.open(os.path.join(root, "images"))
        self.tokens = Ragged.open(os.path.join(root, "tokens"))

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.images[i], self.tokens[i]


def _read_all(dataset: Pairs) -> list[tuple[list[int], list[int]]]:
    """What a worker process returns: every pair, as lists."""
    return [(a.ravel().tolist(), b.tolist()) for a, b in (dataset[i] for i in range(len(dataset)))]


def _write(root) -> None:
    with Dense.create(root / "images", np.uint8, (2, 2), codec="raw", index_cache=None) as w:
        w.append(np.arange(40, dtype=np.uint8).reshape(10, 2, 2))
    with Ragged.create(root / "tokens", np.int32, 1, codec="zstd", index_cache=None) as w:
        w.append([np.arange(i, dtype=np.int32) for i in range(10)])


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_dataset_of_stores_works_in_spawned_and_forkserver_workers(tmp_path, method):
    """Before, pickling the dataset failed in the parent with Cython's 'TypeError: no default
    __reduce__ due to non-trivial __cinit__'."""
    _write(tmp_path)
    dataset = Pairs(str(tmp_path))
    want = _read_all(dataset)
    with multiprocessing.get_context(method).Pool(1) as pool:
        assert pool.apply(_read_all, (dataset,)) == want


def test_a_store_unpickles_as_the_same_store_reopened(tmp_path, monkeypatch):
    _write(tmp_path)
    monkeypatch.chdir(tmp_path)
    with open_store("tokens", cache="bypass", validate="full") as store:
        monkeypatch.chdir("/")  # a relative path is kept absolute, against a later chdir
        copy = pickle.loads(pickle.dumps(store))
        assert type(copy) is type(store) and copy is not store
        assert copy.digest == store.digest and copy.cache == "bypass"
        assert [r.tolist() for r in copy[[9, 0, 4]]] == [list(range(9)), [], list(range(4))]
        copy.close()
        store.close()
        with pytest.raises(ClosedError, match="is closed"):
            pickle.dumps(store)


def test_a_store_replaced_before_it_is_unpickled_is_refused(tmp_path):
    _write(tmp_path)
    data = pickle.dumps(Dense.open(tmp_path / "images"))
    shutil.rmtree(tmp_path / "images")
    with Dense.create(tmp_path / "images", np.uint8, (2, 2), codec="raw") as w:
        w.append(np.zeros((10, 2, 2), np.uint8))
    with pytest.raises(StoreChangedError, match="holds another store than the one that was pickled"):
        pickle.loads(data)


def test_a_writer_refuses_to_pickle_saying_what_to_do(tmp_path):
    with Ragged.create(tmp_path / "w", np.int32, 1, codec="raw") as w:
        with pytest.raises(TypeError, match="RaggedWriter cannot be pickled.*close\\(\\) publishes"):
            pickle.dumps(w)
        w.append([np.zeros(1, np.int32)])


@pytest.mark.remote
def test_a_store_opened_by_url_pickles_with_its_url_and_options(tmp_path, s3_server, s3_bucket):
    from zrecord import publish

    _write(tmp_path)
    creds = s3_server.credentials
    opts = {"endpoint_url": s3_server.endpoint_url, "region": creds.region,
            "aws_access_key_id": creds.access_key_id,
            "aws_secret_access_key": creds.secret_access_key}
    url = s3_bucket.url("tokens")
    publish(tmp_path / "tokens", url, storage_options=opts)
    with Ragged.open(url, storage_options=opts) as store:
        copy = pickle.loads(pickle.dumps(store))
        assert copy.path == store.path == url and copy.digest == store.digest
        assert [r.tolist() for r in copy[[3, 7]]] == [[0, 1, 2], list(range(7))]
        copy.close()
    # open_store kept no storage_options for the pickle: its copy opened with no endpoint and
    # no credentials.
    with open_store(url, storage_options=opts) as store:
        copy = pickle.loads(pickle.dumps(store))
        assert [r.tolist() for r in copy[[3]]] == [[0, 1, 2]]
        copy.close()
