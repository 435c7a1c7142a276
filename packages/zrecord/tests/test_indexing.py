"""Index semantics: scalar -> record, collection -> batch in requested order, strict bounds."""

from __future__ import annotations

import os

import numpy as np
import pytest

from zrecord import Dense, Ragged, StoreIndexError


@pytest.fixture
def dense(tmp_path):
    store_path = str(tmp_path / "dense")
    data = np.arange(8 * 2 * 4, dtype=np.float32).reshape(8, 2, 4)
    with Dense.create(store_path, data.dtype, data.shape[1:], codec="raw") as ds:
        ds.append(data)
    with Dense.open(store_path) as ds:
        yield ds, data


@pytest.fixture
def ragged(tmp_path):
    store_path = str(tmp_path / "ragged")
    seqs = [np.arange(n, dtype=np.int32) for n in (3, 1, 4, 1, 5)]
    with Ragged.create(store_path, np.int32, ndim=1, codec="raw") as rs:
        rs.append(seqs)
    with Ragged.open(store_path) as rs:
        yield rs, seqs


def test_scalar_returns_the_record_without_batch_axis(dense):
    ds, data = dense
    rec = ds[0]
    assert isinstance(rec, np.ndarray) and rec.shape == (2, 4)
    np.testing.assert_array_equal(rec, data[0])
    np.testing.assert_array_equal(ds[np.int64(5)], data[5])


@pytest.mark.parametrize("key", [(0, 5, 2), [0, 5, 2], np.array([0, 5, 2]),
                                 np.array([0, 5, 2], dtype=np.uint16)])
def test_collections_return_batches_in_requested_order(dense, key):
    ds, data = dense
    batch = ds[key]
    assert batch.shape == (3, 2, 4)
    np.testing.assert_array_equal(batch, data[[0, 5, 2]])


def test_tuple_selects_positions_not_axes(dense):
    ds, data = dense
    # ds[0, 5, 2] are sequence positions 0, 5 and 2 -- never ds[0][5][2].
    np.testing.assert_array_equal(ds[0, 5, 2], np.stack([data[0], data[5], data[2]]))


def test_single_element_collections_keep_the_batch_axis(dense, ragged):
    ds, data = dense
    assert ds[(3,)].shape == (1, 2, 4)
    assert ds[[3]].shape == (1, 2, 4)
    rs, seqs = ragged
    out = rs[[2]]
    assert isinstance(out, list) and len(out) == 1
    np.testing.assert_array_equal(out[0], seqs[2])


def test_empty_collections(dense, ragged):
    ds, _ = dense
    assert ds[[]].shape == (0, 2, 4)
    assert ds[()].shape == (0, 2, 4)
    assert ds[np.array([], dtype=np.int64)].shape == (0, 2, 4)
    rs, _ = ragged
    assert rs[[]] == []


@pytest.mark.parametrize("sl", [slice(None), slice(2, 6), slice(-3, None), slice(None, -2),
                                slice(None, None, -1), slice(6, 1, -2), slice(-1, -9, -3),
                                slice(100, 200), slice(1, 7, 3)])
def test_slices_follow_python_rules(dense, ragged, sl):
    ds, data = dense
    np.testing.assert_array_equal(ds[sl], data[sl])
    rs, seqs = ragged
    got = rs[sl]
    want = seqs[sl]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("key", [8, -1, 100, (0, 8), [1, -1], np.array([2, 9])])
def test_out_of_range_raises_index_error(dense, key):
    ds, _ = dense
    with pytest.raises(IndexError) as info:
        ds[key]
    assert isinstance(info.value, StoreIndexError)
    assert "out of range" in str(info.value)


@pytest.mark.parametrize("key", [True, 1.0, "0", (0, slice(None)), [0.5], np.array([1.0]),
                                 np.zeros((2, 2), dtype=np.int64), None, np.array([True, False])])
def test_bad_index_types_raise_type_error(dense, key):
    ds, _ = dense
    with pytest.raises(TypeError):
        ds[key]


def test_ragged_scalar_and_batch(ragged):
    rs, seqs = ragged
    rec = rs[2]
    assert isinstance(rec, np.ndarray) and rec.shape == (4,)
    recs = rs[0, 2, 4]
    assert isinstance(recs, list)
    assert [r.shape for r in recs] == [(3,), (4,), (5,)]
    for a, b in zip(recs, [seqs[0], seqs[2], seqs[4]]):
        np.testing.assert_array_equal(a, b)


def test_iteration_yields_records_and_matches_full_read(dense, ragged):
    ds, data = dense
    items = list(ds)
    assert len(items) == 8 and all(r.shape == (2, 4) for r in items)
    np.testing.assert_array_equal(np.stack(items), ds[:])
    rs, seqs = ragged
    for a, b in zip(rs, seqs):
        np.testing.assert_array_equal(a, b)


def test_iteration_crosses_read_ahead_blocks(store_path, monkeypatch):
    import zrecord._reader as store

    monkeypatch.setattr(store, "_ITER_BLOCK_RECORDS", 3)
    data = np.arange(20, dtype=np.int64).reshape(10, 2)
    with Dense.create(store_path, np.int64, (2,), codec="raw") as ds:
        ds.append(data)
    with Dense.open(store_path) as ds:
        np.testing.assert_array_equal(np.stack(list(ds)), data)


def test_ragged_shapes_without_reading_data(ragged):
    rs, seqs = ragged
    np.testing.assert_array_equal(rs.shapes(), [[3], [1], [4], [1], [5]])
    np.testing.assert_array_equal(rs.shapes([4, 0]), [[5], [3]])


def test_seed_padding_recipe(ragged):
    rs, _ = ragged
    records = rs[0, 2, 4]
    lengths = np.array([len(r) for r in records])
    padded = np.zeros((len(records), lengths.max()), dtype=records[0].dtype)
    for i, r in enumerate(records):
        padded[i, :len(r)] = r
    assert padded.shape == (3, 5)
    np.testing.assert_array_equal(padded[1], [0, 1, 2, 3, 0])


@pytest.mark.parametrize("key", [[2**63], [0, 2**64], [-(2**63) - 1],
                                 np.array([1, 2**63], dtype=np.uint64)])
def test_indices_beyond_int64_are_store_index_errors(tmp_path, key):
    """[R1] item 15: `s[[2**63]]` raises StoreIndexError naming the value, like `s[2**64]`."""
    with Dense.create(tmp_path / "s", np.uint8, (1,), codec="raw") as w:
        w.append(np.ones((3, 1), np.uint8))
    with Dense.open(tmp_path / "s") as ds:
        with pytest.raises(StoreIndexError) as info:
            ds[key]
        bad = [int(k) for k in key if not 0 <= int(k) < 3][0]
        assert f"index {bad} " in str(info.value)
        with pytest.raises(StoreIndexError):
            ds[2**64]


GUIDE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "guides", "zrecord.md")


@pytest.mark.skipif(not os.path.isfile(GUIDE), reason="run from a checkout (needs docs/)")
def test_the_guide_says_what_negative_indices_do(tmp_path):
    """[R1] item 19: the guide said negative indices count from the end; the store refuses
    them (the user's contract: 0..len-1). The guide now says so, and the store still does."""
    guide = " ".join(open(GUIDE, encoding="utf-8").read().split())
    assert "a negative index is a `StoreIndexError`, not a position counted from the end" in guide
    assert "count from the end" not in guide and "counts from the end" not in guide
    with Dense.create(tmp_path / "s", np.int16, (), codec="raw") as w:
        w.append(np.arange(5, dtype=np.int16))
    with Dense.open(tmp_path / "s") as ds:
        for key in (-1, [0, -1], np.array([-5])):
            with pytest.raises(StoreIndexError):
                ds[key]
        assert ds[-2:].tolist() == [3, 4]  # slices keep Python's rules, as the guide says


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_distinct_is_numpys_unique(dtype, n):
    # The mirror's planning takes a sort and a comparison of neighbours for np.unique (NumPy
    # 2.4's hashed unique was 30x slower): the same values, sorted, in the same dtype.
    from zrecord._index import distinct, distinct_sorted

    values = np.random.default_rng(n).integers(0, max(1, n // 3), n).astype(dtype)
    got, want = distinct(values), np.unique(values)
    assert got.dtype == want.dtype
    assert got.tolist() == want.tolist()
    assert distinct(values[::-1].copy()).tolist() == want.tolist()
    assert distinct_sorted(np.sort(values)).tolist() == want.tolist()
