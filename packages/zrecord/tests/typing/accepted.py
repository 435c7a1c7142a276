"""Uses of zrecord's public types that a type checker must accept, as the guide and the
user's description write them; check_types.py runs mypy --strict on this file and requires
no error at all. Every ``assert_type`` is exact: were a store or a record typed ``Any`` (or
zrecord not found at all), mypy would report it here.

The file also runs (tests/test_types.py calls `main`), so each use is real and each static
type is the one the value has at run time.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import TYPE_CHECKING, Any

import numpy as np

from zrecord import (
    Dense,
    DenseReader,
    DenseWriter,
    Ragged,
    RaggedReader,
    RaggedWriter,
    StorageOptions,
    check_store_options,
    enclosing_store,
    open_store,
    train_dict,
)

if TYPE_CHECKING:
    from typing_extensions import assert_type
else:
    def assert_type(value: Any, expected: Any) -> Any:
        return value  # checked by mypy only; at run time the asserts below check values


def dense(folder: str) -> None:
    data = np.arange(64, dtype=np.float32).reshape(8, 2, 4)
    path = os.path.join(folder, "data")
    with Dense.create(path, data.dtype, data.shape[1:], codec="zstd") as ds:
        assert_type(ds, DenseWriter)
        ds.append(data)
        ds.append(data[:2], progress=False)
        assert_type(len(ds), int)
        assert_type(ds.item_shape, tuple[int, ...])
    kind: Dense = ds  # a writer is a Dense
    assert isinstance(kind, Dense) and not isinstance(kind, DenseReader)
    with Dense.open(path) as ds2:
        assert_type(ds2, DenseReader)
        record = assert_type(ds2[0], np.ndarray)
        assert record.shape == (2, 4)
        assert assert_type(ds2[np.int64(3)], np.ndarray).shape == (2, 4)
        assert assert_type(ds2[0, 5, 2], np.ndarray).shape == (3, 2, 4)
        assert assert_type(ds2[[0, 5]], np.ndarray).shape == (2, 2, 4)
        assert assert_type(ds2[0:2], np.ndarray).shape == (2, 2, 4)
        assert assert_type(ds2[:], np.ndarray).shape == (10, 2, 4)
        assert assert_type(ds2[np.array([1, 3])], np.ndarray).shape == (2, 2, 4)
        for each in ds2:
            assert assert_type(each, np.ndarray).shape == (2, 4)
        ds2.prefetch(slice(0, 4))
        ds2.verify()
        assert_type(ds2.digest, str)
        kind = ds2  # a reader is a Dense too
        assert isinstance(kind, Dense)
        # A store's codec changes by writing a new one (the guide's recipe).
        with Dense.create(path + "-d", dtype=ds2.dtype, item_shape=ds2.item_shape,
                          codec="zstd_dict", dict_bytes=train_dict(ds2)) as copy:
            copy.append(ds2[:])


def ragged(folder: str) -> None:
    seqs = [np.arange(n, dtype=np.int32) for n in (3, 1, 4, 1, 5)]
    path = os.path.join(folder, "tokens")
    with Ragged.create(path, np.int32, ndim=1, codec="zstd") as rs:
        assert_type(rs, RaggedWriter)
        rs.append(seqs)
        rs.append(s for s in seqs[:1])
    with Ragged.open(path) as rs2:
        assert_type(rs2, RaggedReader)
        assert assert_type(rs2[2], np.ndarray).shape == (4,)
        records = assert_type(rs2[0, 2, 4], list[np.ndarray])
        assert [r.shape for r in records] == [(3,), (4,), (5,)]
        assert len(assert_type(rs2[1:3], list[np.ndarray])) == 2
        assert len(assert_type(rs2[np.arange(2)], list[np.ndarray])) == 2
        assert assert_type(rs2.shapes(), np.ndarray).shape == (6, 1)
        for each in rs2:
            assert_type(each, np.ndarray)
        kind: Ragged = rs2
        assert isinstance(kind, Ragged) and not isinstance(kind, Dense)
        with Ragged.create(path + "-copy", rs2.dtype, rs2.ndim, codec="raw") as copy:
            copy.append(rs2[:])


def arguments(folder: str) -> None:
    """The entry points' parameters as users pass them: pathlib paths, dtype-likes, shapes as
    lists, literal words, a storage_options dict literal."""
    import pathlib

    path = pathlib.Path(folder) / "typed"
    with Dense.create(path, "<u2", [3], codec="raw", data_shards=np.int64(2), index_cache=None) as w:
        w.append(np.zeros((2, 3), np.uint16))
    with Dense.open(path, cache="bypass", validate="full", index_cache="auto") as r:
        assert r.item_shape == (3,)
    with Ragged.create(os.fsencode(path) + b"-r", np.float32, 2, codec="zstd", sync=False) as rw:
        rw.append([np.zeros((1, 2), np.float32)])
    options: StorageOptions = {"endpoint_url": "http://127.0.0.1:9000", "max_in_flight": 8,
                               "gap_bytes": "auto", "cache_bytes": None, "link": "s3-express"}
    assert options["gap_bytes"] == "auto"
    check_store_options(codec="zstd_dict", dict_bytes=b"\x37\xa4\x30\xec" + bytes(8))
    assert enclosing_store(path / "inside") == str(path)


def either_kind(folder: str) -> None:
    store = open_store(os.path.join(folder, "data"))
    assert_type(store, DenseReader | RaggedReader)
    if isinstance(store, Dense):
        assert_type(store, DenseReader)
        assert store.item_shape == (2, 4)
    else:
        assert_type(store, RaggedReader)
    assert_type(store[0], np.ndarray)
    store.close()


def main(folder: str) -> None:
    dense(folder)
    ragged(folder)
    either_kind(folder)
    arguments(folder)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(sys.argv[1] if len(sys.argv) > 1 else tmp)
