"""Recycled batch outputs (_pool.BlockPool): pooled batches must behave exactly like fresh
np.empty arrays: independent of each other and of later batches, writeable, C-contiguous, with
the store's dtype and shape, and the pool must stay bounded and die with close()."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from zrecord import Dense, Ragged, _pool

RECORD = (64, 1024)  # 256 KiB of float32 per record: a batch of 4 or more is pooled


@pytest.fixture
def dense(store_path: str, rng: np.random.Generator):
    src = rng.standard_normal((40, *RECORD)).astype(np.float32)
    with Dense.create(store_path, src.dtype, RECORD, codec="raw", sync=False) as w:
        w.append(src)
    store = Dense.open(store_path)
    yield store, src
    store.close()


def test_pooled_batch_looks_like_a_fresh_array(dense) -> None:
    store, src = dense
    batch = store[[3, 1, 4, 1, 5]]
    assert isinstance(batch.base, _pool.PooledBlock)
    assert batch.dtype == src.dtype and batch.shape == (5, *RECORD)
    assert batch.flags.c_contiguous and batch.flags.writeable and batch.flags.aligned
    np.testing.assert_array_equal(batch, src[[3, 1, 4, 1, 5]])


def test_pooled_batches_are_independent(dense) -> None:
    store, src = dense
    held = [store[[i, i + 1, i + 2, i + 3]] for i in range(0, 36, 4)]  # many alive at once
    addresses = {b.__array_interface__["data"][0] for b in held}
    assert len(addresses) == len(held)
    held[0][:] = -1.0  # mutating one batch never changes another, nor what the store returns
    for k, b in enumerate(held[1:], start=1):
        np.testing.assert_array_equal(b, src[4 * k:4 * k + 4])
    for _ in range(10):  # later batches reuse dropped blocks, never held ones
        np.testing.assert_array_equal(store[[0, 1, 2, 3]], src[:4])
    for k, b in enumerate(held[1:], start=1):
        np.testing.assert_array_equal(b, src[4 * k:4 * k + 4])


def test_a_view_keeps_the_block_alive(dense) -> None:
    store, src = dense
    view = store[[7, 8, 9, 10]][2:, 5]
    gc.collect()
    for _ in range(8):
        store[[0, 1, 2, 3]][:] = 0.0  # would overwrite the view's block if it were recycled
    np.testing.assert_array_equal(view, src[[9, 10], 5])


def test_the_pool_stays_bounded(dense) -> None:
    store, _ = dense
    held = [store[list(range(n, n + 4 + n % 3))] for n in range(12)]
    del held
    gc.collect()
    blocks, nbytes = store._pool.idle()
    assert blocks <= _pool.POOL_BLOCKS_MAX and nbytes <= _pool.POOL_BYTES_MAX
    assert blocks >= 1


def test_small_batches_are_not_pooled(dense) -> None:
    store, _ = dense
    assert store[[1, 2]].base is None or not isinstance(store[[1, 2]].base, _pool.PooledBlock)


def test_close_empties_the_pool_and_batches_outlive_it(dense) -> None:
    store, src = dense
    batch = store[[0, 1, 2, 3]]
    store[[4, 5, 6, 7]]
    store.close()
    assert store._pool.idle() == (0, 0)
    np.testing.assert_array_equal(batch, src[:4])
    del batch
    gc.collect()
    assert store._pool.idle() == (0, 0)


def test_pooled_batches_from_many_threads(dense) -> None:
    store, src = dense
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                idx = rng.integers(0, len(src), 5)
                a = store[idx]
                b = store[idx[::-1]]
                np.testing.assert_array_equal(a, src[idx])
                np.testing.assert_array_equal(b, src[idx[::-1]])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    blocks, nbytes = store._pool.idle()
    assert blocks <= _pool.POOL_BLOCKS_MAX and nbytes <= _pool.POOL_BYTES_MAX


def test_ragged_records_share_a_pooled_block_safely(store_path: str,
                                                   rng: np.random.Generator) -> None:
    recs = [rng.integers(0, 1 << 30, (int(n),), dtype=np.int64) for n in rng.integers(1, 40_000, 60)]
    with Ragged.create(store_path, np.int64, 1, codec="raw", sync=False) as w:
        w.append(recs)
    with Ragged.open(store_path) as store:
        first = store[list(range(30))]
        keep = first[5]
        del first
        for _ in range(5):
            for r in store[list(range(30, 60))]:
                r[:] = 0
        np.testing.assert_array_equal(keep, recs[5])
        got = store[list(range(60))]
        for a, b in zip(got, recs, strict=True):
            np.testing.assert_array_equal(a, b)
