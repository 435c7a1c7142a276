"""Cold reads ([S1]): every read mode of the native reader returns the same records, and
``prefetch`` is a hint that takes every valid key and refuses what ``store[key]`` refuses.

The read modes (zrecord.h ZR_READS_*) are pinned through the binding's ``set_reads``: 0 is the
adaptive default, 1 never hints (the reads of zrecord 0.1), 2 always hints and reads every
record with pread. Stores are evicted from the page cache before they are opened where the
file system allows it (``evict``), so that the adaptive mode meets cold batches; no assertion
depends on timing or on the eviction having taken.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from zrecord import Dense, Ragged, open_store, train_dict
from zrecord.errors import ClosedError, CorruptStoreError, StoreIndexError

MODES = (0, 1, 2)
PREAD_BYTES = 32 << 10  # gather.zig pread_record_bytes_min


def evict(path: str) -> None:
    """Flush a store's files and ask the kernel to drop them from the page cache."""
    for name in os.listdir(path):
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def open_cold(cls, path: str, mode: int):
    evict(path)
    store = cls.open(path)
    store._handle.set_reads(mode)
    return store


def token_records(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    lengths = rng.integers(0, 120, size=n)
    lengths[::17] = 0
    return [rng.integers(0, 50_000, size=int(k), dtype=np.int32) for k in lengths]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("item_shape", [(512,), (PREAD_BYTES // 4 + 8,)])
def test_dense_every_mode_reads_the_same_records(tmp_path, rng, mode, codec, item_shape):
    path = os.fspath(tmp_path / "d")
    n = 300 if item_shape[0] == 512 else 40
    data = rng.integers(0, 1000, size=(n, *item_shape), dtype=np.int32)
    with Dense.create(path, np.int32, item_shape, codec=codec) as w:
        w.append(data)
    with open_cold(Dense, path, mode) as store:
        for seed in range(3):
            idx = np.random.default_rng(seed).integers(0, n, 256)
            np.testing.assert_array_equal(store[idx], data[idx])
        np.testing.assert_array_equal(store[::-1], data[::-1])
        assert store.verify() is None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_ragged_every_mode_reads_the_same_records(tmp_path, rng, mode, codec):
    path = os.fspath(tmp_path / "r")
    recs = token_records(rng, 3000)
    # A few large records, read with pread whatever the mode.
    recs[5] = rng.integers(0, 9, size=PREAD_BYTES, dtype=np.int32)
    recs[2000] = rng.integers(0, 9, size=3 * PREAD_BYTES, dtype=np.int32)
    extra = {}
    if codec == "zstd_dict":
        extra["dict_bytes"] = train_dict(recs[:2000], dict_size=4096)
    with Ragged.create(path, np.int32, 1, codec=codec, **extra) as w:
        w.append(iter(recs))
    with open_cold(Ragged, path, mode) as store:
        for seed in range(3):
            idx = np.random.default_rng(seed).integers(0, len(recs), 256)
            idx[:2] = (5, 2000)
            for got, i in zip(store[idx], idx):
                np.testing.assert_array_equal(got, recs[i])


@pytest.mark.parametrize("mode", MODES)
def test_concurrent_gathers_share_the_estimate_safely(tmp_path, rng, mode):
    path = os.fspath(tmp_path / "d")
    data = rng.integers(0, 1000, size=(5000, 64), dtype=np.int32)
    with Dense.create(path, np.int32, (64,), codec="raw") as w:
        w.append(data)
    errors: list[BaseException] = []
    with open_cold(Dense, path, mode) as store:
        def work(seed: int) -> None:
            try:
                g = np.random.default_rng(seed)
                for _ in range(20):
                    idx = g.integers(0, 5000, 256)
                    if g.integers(2):
                        store.prefetch(idx)
                    np.testing.assert_array_equal(store[idx], data[idx])
                    if g.integers(4) == 0:
                        evict(path)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors


@pytest.mark.parametrize("mode", MODES)
def test_prefetch_takes_every_key_a_gather_takes(tmp_path, rng, mode):
    path = os.fspath(tmp_path / "d")
    data = rng.integers(0, 1000, size=(100, 16), dtype=np.int32)
    with Dense.create(path, np.int32, (16,), codec="raw") as w:
        w.append(data)
    with open_cold(Dense, path, mode) as store:
        for key in (7, np.int64(99), [3, 3, 0], (1, 2), slice(None), slice(90, 10, -7),
                    np.array([5, 6], dtype=np.uint32), [], np.empty(0, dtype=np.int64),
                    np.arange(100)[::3]):
            assert store.prefetch(key) is None
            # A tuple selects records, as a list does (NumPy would read it as two axes).
            np.testing.assert_array_equal(store[key], data[list(key) if isinstance(key, tuple) else key])


def test_prefetch_refuses_what_a_gather_refuses(tmp_path, rng):
    path = os.fspath(tmp_path / "r")
    recs = token_records(rng, 50)
    with Ragged.create(path, np.int32, 1, codec="zstd") as w:
        w.append(iter(recs))
    store = Ragged.open(path)
    for key in (50, -1, [0, 50], np.array([3, -2])):
        with pytest.raises(StoreIndexError) as gather_err:
            store[key]
        with pytest.raises(StoreIndexError) as prefetch_err:
            store.prefetch(key)
        assert str(prefetch_err.value) == str(gather_err.value)
    for key in (1.5, "x", [True], np.zeros((2, 2), dtype=np.int64)):
        with pytest.raises(TypeError):
            store.prefetch(key)
    store.close()
    with pytest.raises(ClosedError):
        store.prefetch([0])


def test_prefetch_of_more_than_one_call_hints_still_reads_back(tmp_path, rng):
    path = os.fspath(tmp_path / "d")
    n = 40_000  # more than the 16,384 records one prefetch hints
    data = rng.integers(0, 1 << 30, size=(n, 2), dtype=np.int32)
    with Dense.create(path, np.int32, (2,), codec="raw") as w:
        w.append(data)
    with open_cold(Dense, path, 0) as store:
        idx = np.random.default_rng(9).permutation(n)
        store.prefetch(idx)
        np.testing.assert_array_equal(store[idx], data[idx])


def test_set_reads_refuses_an_unknown_mode(tmp_path, rng):
    path = os.fspath(tmp_path / "d")
    with Dense.create(path, np.int32, (2,), codec="raw") as w:
        w.append(np.zeros((3, 2), dtype=np.int32))
    with Dense.open(path) as store:
        with pytest.raises(ValueError, match="unknown read mode 3"):
            store._handle.set_reads(3)


def run_child(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args],
                          capture_output=True, text=True, timeout=120)


def mapped_shard_kib(path: str) -> int:
    """KiB of this process's mappings of a store's shard files that are mapped in (Rss in
    /proc/self/smaps): pages a gather copied through the reader's mappings."""
    shards = {os.path.realpath(os.path.join(path, name)) for name in os.listdir(path)
              if name.startswith("data-")}
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" not in fields[0]:
                ours = len(fields) >= 6 and fields[5] in shards
            elif ours and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_batches_prefetched_from_disk_are_read_without_mapping_their_pages(tmp_path, rng, codec):
    """A loader prefetches every batch ahead of its gather, so a gather finds a cold store's
    records in the page cache: they are read with pread, never mapped into the process
    (where they would count as its memory); once prefetches find a warm store's records
    cached 4 times in a row (readahead.warm_prefetches), gathers copy them through the
    mappings as before; one such prefetch alone is chance over a partly cached store."""
    path = os.fspath(tmp_path / "d")
    n = 4000
    data = rng.integers(0, 1 << 30, size=(n, 512), dtype=np.int32)  # 2 KiB records
    with Dense.create(path, np.int32, (512,), codec=codec) as w:
        w.append(data)
    batches = [np.random.default_rng(seed).integers(0, n, 256) for seed in range(3)]
    evict(path)
    evicted = resident_pages(path) == 0  # a tmpfs keeps its pages
    with Dense.open(path) as store:
        for idx in batches:
            evict(path)  # (pages mapped by an earlier gather would stay)
            store.prefetch(idx)
            # Every page in the cache before the gather, whatever the hints have done so far.
            for name in os.listdir(path):
                with open(os.path.join(path, name), "rb") as f:
                    f.read()
            np.testing.assert_array_equal(store[idx], data[idx])
        if evicted:
            assert mapped_shard_kib(path) == 0
        # The store is in the page cache now: prefetches find that, and after 4 in a row the
        # mappings serve.
        for i in range(4):
            if evicted:
                assert mapped_shard_kib(path) == 0, i
            store.prefetch(batches[i % 3])
            np.testing.assert_array_equal(store[batches[i % 3]], data[batches[i % 3]])
        assert mapped_shard_kib(path) > 0


@pytest.mark.parametrize("mode", MODES)
def test_truncated_shard_is_corrupt_store_error_in_every_mode(tmp_path, rng, mode):
    # In a child: a regression would end the process with SIGBUS.
    path = os.fspath(tmp_path / "d")
    data = rng.integers(0, 1000, size=(64, 512), dtype=np.int32)
    with Dense.create(path, np.int32, (512,), codec="raw", data_shards=1) as w:
        w.append(data)
    out = run_child("""
        import os, sys
        import numpy as np
        from zrecord import Dense
        from zrecord.errors import CorruptStoreError
        path, mode = sys.argv[1], int(sys.argv[2])
        store = Dense.open(path)
        store._handle.set_reads(mode)
        os.truncate(os.path.join(path, "data-000.zrd"), 2 * 2048)
        store.prefetch(np.arange(64))
        try:
            store[np.arange(64)]
        except CorruptStoreError as exc:
            assert "truncated" in str(exc), exc
            print("corrupt")
        print(store[[0, 1]].shape)
    """, path, str(mode))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["corrupt", "(2,", "512)"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("mode", MODES)
def test_a_forked_child_reads_cold_batches(tmp_path, rng, mode):
    path = os.fspath(tmp_path / "d")
    data = rng.integers(0, 1000, size=(2000, 512), dtype=np.int32)
    with Dense.create(path, np.int32, (512,), codec="raw") as w:
        w.append(data)
    store = open_cold(Dense, path, mode)
    idx = np.random.default_rng(1).integers(0, 2000, 256)
    np.testing.assert_array_equal(store[idx], data[idx])
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            evict(path)
            other = np.random.default_rng(2).integers(0, 2000, 256)
            store.prefetch(other)
            code = 0 if np.array_equal(store[other], data[other]) else 2
            store.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    np.testing.assert_array_equal(store[idx[::-1]], data[idx[::-1]])
    store.close()


# ---- cache="bypass": O_DIRECT reads of large records ----------------------------------------


def resident_pages(path: str) -> int:
    """Pages of a store's shard files in the page cache, by mincore(2) over fresh mappings
    (which fault nothing in)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    total = 0
    for name in sorted(os.listdir(path)):
        if not name.startswith("data-"):
            continue
        size = os.path.getsize(os.path.join(path, name))
        if size == 0:
            continue
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            vec = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
            assert libc.mincore(addr, size, vec) == 0
            total += sum(v & 1 for v in vec)
            libc.munmap(addr, size)
        finally:
            os.close(fd)
    return total


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_bypass_reads_the_same_dense_records_and_leaves_them_out_of_the_cache(tmp_path, rng, codec):
    path = os.fspath(tmp_path / "d")
    n = 64
    # 49,044 B records (random, so that zstd keeps them above the pread threshold), at
    # offsets that are not multiples of the O_DIRECT alignment.
    data = rng.integers(0, 255, size=(n, 3, 244, 67), dtype=np.uint8)
    with Dense.create(path, np.uint8, data.shape[1:], codec=codec) as w:
        w.append(data)
    evict(path)
    evicted = resident_pages(path) == 0
    with Dense.open(path, cache="bypass") as store:
        assert store.cache == "bypass"
        idx = np.random.default_rng(3).integers(0, n, 300)  # several workers
        store.prefetch(idx)
        np.testing.assert_array_equal(store[idx], data[idx])
        np.testing.assert_array_equal(store[idx[:3]], data[idx[:3]])
        store.verify()
        if evicted:
            assert resident_pages(path) == 0
    # The same store opened as usual reads through the page cache.
    with Dense.open(path) as store:
        assert store.cache == "auto"
        np.testing.assert_array_equal(store[idx], data[idx])
        if evicted:
            assert resident_pages(path) > 0


@pytest.mark.parametrize("codec", ["raw", "zstd_dict"])
def test_bypass_reads_small_and_large_ragged_records(tmp_path, rng, codec):
    path = os.fspath(tmp_path / "r")
    recs = token_records(rng, 500)
    for k in (3, 250, 499):
        recs[k] = rng.integers(0, 9, size=PREAD_BYTES // 4 + 1000 * k, dtype=np.int32)
    extra = {"dict_bytes": train_dict(recs, dict_size=4096)} if codec == "zstd_dict" else {}
    with Ragged.create(path, np.int32, 1, codec=codec, **extra) as w:
        w.append(iter(recs))
    evict(path)
    with open_store(path, cache="bypass") as store:
        assert isinstance(store, Ragged) and store.cache == "bypass"
        idx = np.random.default_rng(4).integers(0, 500, 256)
        idx[:3] = (3, 250, 499)
        for got, i in zip(store[idx], idx):
            np.testing.assert_array_equal(got, recs[i])


@pytest.mark.parametrize("cache", ["nope", "", None, 1, "AUTO"])
def test_cache_is_auto_or_bypass(tmp_path, cache):
    path = os.fspath(tmp_path / "d")
    with Dense.create(path, np.int32, (2,), codec="raw") as w:
        w.append(np.zeros((3, 2), dtype=np.int32))
    for open_ in (Dense.open, open_store):
        with pytest.raises(ValueError, match="cache must be one of 'auto', 'bypass'"):
            open_(path, cache=cache)


def test_bypass_truncated_shard_is_corrupt_store_error(tmp_path, rng):
    path = os.fspath(tmp_path / "d")
    data = rng.integers(0, 255, size=(8, PREAD_BYTES + 100), dtype=np.uint8)
    with Dense.create(path, np.uint8, data.shape[1:], codec="raw", data_shards=1) as w:
        w.append(data)
    with Dense.open(path, cache="bypass") as store:
        os.truncate(os.path.join(path, "data-000.zrd"), 2 * data.shape[1] + 5)
        with pytest.raises(CorruptStoreError, match="truncated"):
            store[[0, 2]]
        np.testing.assert_array_equal(store[[1, 0]], data[[1, 0]])
