"""Round trips: every dtype, geometry and shard count returns exactly what was appended."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ALL_DTYPES, random_array

from zrecord import Dense, Ragged


def assert_same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype
    assert a.shape == b.shape
    # Compare bytes, so NaN payloads and -0.0 count too.
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dense_every_dtype(store_path, rng, dtype):  # [ZR-GEN-003] [ZR-SUM-001]
    data = random_array(rng, dtype, (37, 3, 5))
    with Dense.create(store_path, dtype, (3, 5), codec="raw") as ds:
        ds.append(data)
    with Dense.open(store_path) as ds:
        assert len(ds) == 37
        assert ds.dtype == np.dtype(dtype)
        assert ds.item_shape == (3, 5)
        assert ds.ndim == 2
        assert ds.codec == "raw"
        assert ds.data_shards == 4
        assert_same(ds[:], data)
        for i in (0, 17, 36):
            assert_same(ds[i], data[i])


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_ragged_every_dtype(store_path, rng, dtype):
    recs = [random_array(rng, dtype, (int(rng.integers(0, 4)), int(rng.integers(0, 6))))
            for _ in range(40)]
    with Ragged.create(store_path, dtype, 2, codec="raw") as rs:
        rs.append(recs)
    with Ragged.open(store_path) as rs:
        assert len(rs) == 40
        out = rs[:]
        assert isinstance(out, list)
        for a, b in zip(out, recs):
            assert_same(a, b)


@pytest.mark.parametrize("shards", [1, 2, 4, 7, 255])
def test_shard_counts(store_path, rng, shards):  # [ZR-HDR-007] [ZR-IDX-001]
    data = rng.integers(0, 1000, size=(101, 8), dtype=np.int32)
    with Dense.create(store_path, np.int32, (8,), codec="raw", data_shards=shards) as ds:
        ds.append(data)
    with Dense.open(store_path) as ds:
        assert ds.data_shards == shards
        assert_same(ds[:], data)
        order = rng.permutation(101)
        assert_same(ds[order], data[order])


def test_item_shape_scalar(store_path):
    data = np.arange(10, dtype=np.float64)
    with Dense.create(store_path, np.float64, (), codec="raw") as ds:
        ds.append(data)
    with Dense.open(store_path) as ds:
        assert ds.item_shape == ()
        assert ds[3] == 3.0
        assert_same(ds[:], data)
        assert [float(x) for x in ds] == list(map(float, data))


def test_ragged_zero_size_records_on_any_axis(store_path):
    recs = [np.zeros((0,), np.int32).reshape(0, 0, 0), np.zeros((2, 0, 3), np.int32),
            np.arange(6, dtype=np.int32).reshape(1, 2, 3), np.zeros((0, 5, 1), np.int32),
            np.zeros((4, 1, 0), np.int32)]
    with Ragged.create(store_path, np.int32, ndim=3, codec="raw") as rs:
        rs.append(recs)
    with Ragged.open(store_path) as rs:
        for i, rec in enumerate(recs):
            assert_same(rs[i], rec)
        assert [r.shape for r in rs] == [r.shape for r in recs]


def test_dense_zero_size_records(store_path):
    data = np.zeros((5, 0, 3), np.float32)
    with Dense.create(store_path, np.float32, (0, 3), codec="raw") as ds:
        ds.append(data)
    with Dense.open(store_path) as ds:
        assert len(ds) == 5
        assert ds[2].shape == (0, 3)
        assert ds[[4, 0]].shape == (2, 0, 3)


def test_successive_appends_extend_the_sequence(store_path, rng):
    parts = [rng.integers(0, 255, size=(n, 4), dtype=np.uint8) for n in (3, 0, 10, 1)]
    with Dense.create(store_path, np.uint8, (4,), codec="raw") as ds:
        for p in parts:
            ds.append(p)
        assert len(ds) == 14
    with Dense.open(store_path) as ds:
        assert_same(ds[:], np.concatenate(parts))


def test_ragged_successive_appends_and_generators(store_path):
    def gen(start, n):
        for i in range(start, start + n):
            yield np.full(i % 7, i, dtype=np.int64)

    with Ragged.create(store_path, np.int64, 1, codec="raw") as rs:
        rs.append(gen(0, 50))
        rs.append([])
        rs.append(gen(50, 25))
    with Ragged.open(store_path) as rs:
        assert len(rs) == 75
        for i, rec in enumerate(rs):
            assert_same(rec, np.full(i % 7, i, dtype=np.int64))


def test_empty_stores_open_with_len_zero(tmp_path):
    with Dense.create(tmp_path / "d", np.float32, (2,), codec="raw"):
        pass
    with Ragged.create(tmp_path / "r", np.float32, 1, codec="raw"):
        pass
    with Dense.open(tmp_path / "d") as ds:
        assert len(ds) == 0
        assert ds[:].shape == (0, 2)
        assert list(ds) == []
    with Ragged.open(tmp_path / "r") as rs:
        assert len(rs) == 0
        assert rs[:] == []


def test_non_contiguous_input_is_accepted(store_path, rng):
    base = rng.integers(0, 100, size=(20, 6), dtype=np.int16)
    data = base[::2, ::2]  # strided view
    with Dense.create(store_path, np.int16, (3,), codec="raw") as ds:
        ds.append(data)
    with Dense.open(store_path) as ds:
        assert_same(ds[:], np.ascontiguousarray(data))


def test_large_batch_uses_threads_and_is_exact(store_path, rng):
    # 64 records of 192 KiB = 12 MiB per batch: above the native threshold for worker threads.
    data = rng.integers(0, 255, size=(64, 3, 256, 256), dtype=np.uint8)
    with Dense.create(store_path, np.uint8, (3, 256, 256), codec="raw") as ds:
        ds.append(data)
    with Dense.open(store_path) as ds:
        order = rng.permutation(64)
        assert_same(ds[order], data[order])
        assert_same(ds[np.concatenate([order, order])], data[np.concatenate([order, order])])


def test_info_reports_schema_and_sizes(store_path):
    data = np.ones((10, 4), np.float32)
    with Dense.create(store_path, np.float32, (4,), codec="raw", data_shards=2) as ds:
        ds.append(data)
    with Dense.open(store_path) as ds:
        info = ds.info()
        assert info["records"] == 10
        assert info["logical_bytes"] == 160
        assert info["stored_bytes"] == 160
        assert info["data_shards"] == 2
        assert info["item_shape"] == [4]
        assert info["format_version"] == [1, 2]  # index parts, the writer's default
