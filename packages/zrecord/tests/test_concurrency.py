"""Concurrent readers: many threads on one store, one store in many processes, readers while
other processes publish stores beside it, a store closed while threads gather, threads on one
remote mirror and on the object client's counts. Every value read is checked exactly. The
`freethreaded` nox session runs this file with the GIL off, where the threads' Python code
runs at once too, not only the native core's.

A fresh store is opened for each thread test, so that the threads also race on each record's
first-read checksum verification ([ZR-SUM-002]), not only on copies of verified records.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import zrecord
from zrecord import Dense, Ragged, train_dict
from zrecord.errors import ClosedError
from zrecord_testkit.threads import run_threads

pytestmark = pytest.mark.slow  # many processes; run once, in the zrecord session

THREADS = 8


def token_records(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    vocab = rng.integers(0, 30_000, size=300, dtype=np.int32)
    return [vocab[rng.integers(0, 300, size=int(rng.integers(0, 120)))] for _ in range(n)]


@pytest.fixture(scope="module")
def dictionary() -> bytes:
    return train_dict(token_records(np.random.default_rng(3), 2000), dict_size=8192)


def codec_args(codec: str, dictionary: bytes) -> dict:
    return {"codec": codec, "dict_bytes": dictionary if codec == "zstd_dict" else None}


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_many_threads_read_one_dense_store_exactly(tmp_path, dictionary, codec):
    """Single records, gathers with repeats, slices, iteration and verify() on one handle from
    8 threads at once; small records (mapping path) and 40 KiB ones (pread path) both."""
    rng = np.random.default_rng(11)
    small = rng.integers(0, 50, size=(3000, 24), dtype=np.int64)
    large = rng.integers(0, 4, size=(64, 10240), dtype=np.int32)
    for name, data in (("small", small), ("large", large)):
        path = str(tmp_path / f"{name}-{codec}")
        with Dense.create(path, data.dtype, data.shape[1:], data_shards=3,
                          **codec_args(codec, dictionary)) as w:
            w.append(data)
        with Dense.open(path) as ds:
            def work(k: int, ds=ds, data=data) -> None:
                r = np.random.default_rng(k)
                n = len(data)
                for step in range(15):
                    idx = r.integers(0, n, 64)
                    np.testing.assert_array_equal(ds[idx], data[idx])
                    i = int(r.integers(0, n))
                    np.testing.assert_array_equal(ds[i], data[i])
                    a = int(r.integers(0, n))
                    np.testing.assert_array_equal(ds[a:a + 7], data[a:a + 7])
                    if step == k:
                        ds.verify()
                if k == 0:
                    for i, rec in enumerate(ds):
                        np.testing.assert_array_equal(rec, data[i])

            assert run_threads(work) == []


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_many_threads_read_one_ragged_store_exactly(tmp_path, dictionary, codec):
    recs = token_records(np.random.default_rng(12), 2500)
    path = str(tmp_path / codec)
    with Ragged.create(path, np.int32, 1, data_shards=2, **codec_args(codec, dictionary)) as w:
        w.append(recs)
    with Ragged.open(path) as rs:
        def work(k: int) -> None:
            r = np.random.default_rng(100 + k)
            for _ in range(30):
                idx = r.integers(0, len(recs), 50)
                for got, i in zip(rs[idx], idx):
                    np.testing.assert_array_equal(got, recs[i])
                i = int(r.integers(0, len(recs)))
                np.testing.assert_array_equal(rs[i], recs[i])
                assert rs.shapes(idx)[:, 0].tolist() == [len(recs[i]) for i in idx]

        assert run_threads(work) == []


READ_ALL = textwrap.dedent("""
    import hashlib, sys, zrecord
    h = hashlib.sha256()
    with zrecord.open_store(sys.argv[1]) as s:
        s.verify()
        for rec in s:
            h.update(rec.tobytes())
        for rec in s[::-1]:
            h.update(rec.tobytes())
    print(h.hexdigest())
""")


def digest(records) -> str:
    h = hashlib.sha256()
    for rec in records:
        h.update(np.ascontiguousarray(rec).tobytes())
    for rec in records[::-1]:
        h.update(np.ascontiguousarray(rec).tobytes())
    return h.hexdigest()


def test_one_store_opened_in_many_processes_at_once(tmp_path, dictionary):
    """8 processes open, verify and read the same store at the same time; all read it exactly."""
    recs = token_records(np.random.default_rng(13), 3000)
    path = str(tmp_path / "s")
    with Ragged.create(path, np.int32, 1, codec="zstd_dict", dict_bytes=dictionary) as w:
        w.append(recs)
    procs = [subprocess.Popen([sys.executable, "-c", READ_ALL, path], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    want = digest(recs)
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        assert out.strip() == want


PUBLISHER = textwrap.dedent("""
    import sys, numpy as np
    from zrecord import Dense
    parent, count = sys.argv[1], int(sys.argv[2])
    for k in range(count):
        data = np.full((500, 33), k, np.int16)
        with Dense.create(f"{parent}/p{k}", np.int16, (33,), codec="zstd" if k % 2 else "raw",
                          data_shards=2) as w:
            w.append(data)
        # Also a writer that never publishes: its temporary directory comes and goes.
        w = Dense.create(f"{parent}/q{k}", np.int16, (33,), codec="raw")
        w.append(data)
        w.abort()
    print("done", flush=True)
""")


def test_readers_while_other_processes_publish_beside_the_store(tmp_path):
    """[ZR-PUB-003] [ZR-PUB-005] Threads read store `a` exactly while two other processes
    publish (and abort) 30 stores each in the same parent directory; every published store is
    then complete, and nothing else is left in the directory."""
    rng = np.random.default_rng(14)
    data = rng.integers(-1000, 1000, size=(2000, 40), dtype=np.int32)
    a = str(tmp_path / "a")
    with Dense.create(a, np.int32, (40,), codec="zstd") as w:
        w.append(data)
    parents = [tmp_path, tmp_path / "sub"]
    (tmp_path / "sub").mkdir()
    publishers = [subprocess.Popen([sys.executable, "-c", PUBLISHER, str(p), "30"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for p in parents]
    stop = threading.Event()

    with Dense.open(a) as ds:
        def work(k: int) -> None:
            r = np.random.default_rng(200 + k)
            while not stop.is_set():
                idx = r.integers(0, len(data), 100)
                np.testing.assert_array_equal(ds[idx], data[idx])
                # Reopening while directory entries come and go beside it works too.
                with Dense.open(a) as again:
                    i = int(r.integers(0, len(data)))
                    np.testing.assert_array_equal(again[i], data[i])

        def wait_publishers() -> None:
            for p in publishers:
                out, err = p.communicate(timeout=120)
                assert p.returncode == 0, err[-2000:]
            stop.set()

        waiter = threading.Thread(target=wait_publishers)
        waiter.start()
        failures = run_threads(work, 4)
        stop.set()
        waiter.join(150)
    assert failures == []
    for parent in parents:
        names = sorted(os.listdir(parent))
        stores = [n for n in names if n.startswith("p")]
        assert len(stores) == 30
        assert [n for n in names if n not in stores and n not in ("a", "sub")] == []
        for name in stores:
            k = int(name[1:])
            with zrecord.open_store(os.path.join(parent, name)) as s:
                s.verify()
                np.testing.assert_array_equal(s[:], np.full((500, 33), k, np.int16))


# -- closed while gathering, one remote mirror, the client's counts -------------------------


@pytest.fixture(scope="module")
def thread_stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("threads")
    rng = np.random.default_rng(21)
    dense = rng.integers(0, 1 << 30, size=(3000, 24), dtype=np.int64)
    ragged = [rng.integers(0, 1 << 20, size=int(rng.integers(0, 80)), dtype=np.int32)
              for _ in range(3000)]
    with Dense.create(str(root / "dense"), np.int64, (24,), codec="raw", data_shards=3,
                      index_cache=None) as w:
        w.append(dense)
    with Ragged.create(str(root / "ragged"), np.int32, 1, codec="zstd", data_shards=3,
                       index_cache=None) as w:
        w.append(ragged)
    return root, dense, ragged


def _gather_until_closed(store, dense, ragged, k: int, gathered: list[int]) -> None:
    """Gather random batches from `store` until it is closed; every batch exact."""
    rng = np.random.default_rng(k)
    while True:
        idx = rng.integers(0, len(store), 48)
        try:
            got = store[idx]
        except ClosedError:
            return
        if dense is not None:
            np.testing.assert_array_equal(got, dense[idx])
        else:
            for rec, i in zip(got, idx):
                np.testing.assert_array_equal(rec, ragged[i])
        gathered[k] += 1


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_store_closed_while_many_threads_gather_returns_exact_batches_then_closed_errors(thread_stores, kind):
    """close() waits for the gathers in flight; each thread's batches are exact until it meets
    ClosedError, and never anything else."""
    root, dense, ragged = thread_stores
    for round_ in range(4):
        store = (Dense if kind == "dense" else Ragged).open(str(root / kind))
        gathered = [0] * THREADS
        ready = threading.Event()

        def work(k: int, store=store, gathered=gathered, ready=ready) -> None:
            if k == 0:
                # The closer: once every reader has gathered a few batches.
                while min(gathered[1:]) < 3:
                    threading.Event().wait(0.001)
                ready.set()
                store.close()
                return
            _gather_until_closed(store, dense if kind == "dense" else None, ragged, k, gathered)

        assert run_threads(work) == [], f"round {round_}"
        assert ready.is_set() and store.closed
        with pytest.raises(ClosedError):
            store[[0]]


@pytest.mark.remote
def test_many_threads_gather_from_one_remote_mirror_exactly_and_count_every_record(
        http_folder, thread_stores, tmp_path):
    """Eight threads on one store opened by URL (one mirror, its parts and records fetched as
    the threads ask): every batch exact, and `delivered_bytes` counts each gather's distinct
    records once, however the threads interleave."""
    root, dense, ragged = thread_stores
    urls = {}
    for kind in ("dense", "ragged"):
        # Every file of the store, its header last (as a publisher uploads them).
        for path in sorted((root / kind).iterdir(), key=lambda p: p.name == "header.zrh"):
            http_folder.write(f"{kind}/{path.name}", path.read_bytes())
        urls[kind] = http_folder.url_for(kind)
    opts = {"cache_dir": str(tmp_path / "mirrors")}
    record_bytes = dense.shape[1] * dense.itemsize
    asked = [0] * THREADS
    with Dense.open(urls["dense"], storage_options=opts) as ds, \
            Ragged.open(urls["ragged"], storage_options=opts) as rs:
        def work(k: int) -> None:
            rng = np.random.default_rng(100 + k)
            for _ in range(25):
                idx = rng.integers(0, len(dense), 40)
                np.testing.assert_array_equal(ds[idx], dense[idx])
                asked[k] += len(np.unique(idx))
                for rec, i in zip(rs[idx], idx):
                    np.testing.assert_array_equal(rec, ragged[i])

        assert run_threads(work) == []
        stats = ds.remote_stats()
        assert stats["delivered_bytes"] == sum(asked) * record_bytes
        assert 0 < stats["bytes"] <= dense.nbytes + (1 << 20)


@pytest.mark.remote  # the client is obstore's, which the remote extra installs
def test_the_object_clients_counts_lose_nothing_under_many_threads():
    from zrecord._objects import Client, storage_settings

    client = Client("http://127.0.0.1:9/store", storage_settings(None))
    per_thread = 20_000
    assert run_threads(lambda k: [client.count(requests=1, nbytes=3) for _ in range(per_thread)]) == []
    assert (client.requests, client.bytes) == (THREADS * per_thread, 3 * THREADS * per_thread)
