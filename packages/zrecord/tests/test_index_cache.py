"""The compact index and its cache folder, seen from Python: which folder, what a second open
finds, what the folder may hold, and that no folder problem fails an open."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from zrecord import Dense, Ragged, _native, open_store
from zrecord._index_cache import folder_for, prune
from zrecord.errors import ChecksumError


def _tokens(path, n=2000, seed=0):
    rng = np.random.default_rng(seed)
    recs = [rng.integers(0, 50_000, rng.integers(0, 100), dtype=np.int32) for _ in range(n)]
    with Ragged.create(path, np.int32, 1, codec="zstd") as w:
        w.append(recs)
    return recs


def test_the_second_open_maps_the_index_the_first_built(tmp_path):
    """[ZR-ERR-006] a later open of the same index file maps the validation the first made."""
    recs = _tokens(tmp_path / "t")
    cache = tmp_path / "cache"
    with Ragged.open(tmp_path / "t", index_cache=cache) as first:
        info = first.index_info()
        assert info["source"] == "built_cached" and info["folder"] == str(cache)
        files = os.listdir(cache)
        assert len(files) == 1 and files[0].endswith(".zrx")
    with open_store(tmp_path / "t", index_cache=cache) as second:
        info = second.index_info()
        assert info["source"] == "cached"
        # 2,000 token records of up to 100 items: a few bytes each (4 of them the low half of
        # the checksum), not the 32 of index.zri.
        assert info["resident_bytes"] < 10 * len(recs)
        idx = np.random.default_rng(1).permutation(len(recs))[:500]
        for got, i in zip(second[idx], idx):
            np.testing.assert_array_equal(got, recs[i])
        second.verify()
    with Ragged.open(tmp_path / "t", index_cache=cache, validate="full") as full:
        assert full.index_info()["source"] == "built_cached"
    with Ragged.open(tmp_path / "t", index_cache=None) as none:
        assert none.index_info() == {"source": "built", "resident_bytes": none.index_info()["resident_bytes"],
                                     "folder": None}
    assert len(os.listdir(cache)) == 1


def test_a_dense_raw_store_costs_five_bytes_per_record(tmp_path):
    with Dense.create(tmp_path / "d", np.uint8, (16,), codec="raw", data_shards=4) as w:
        w.append(np.zeros((64_000, 16), np.uint8))
    with Dense.open(tmp_path / "d", index_cache=None) as ds:
        # 1,000 block headers of 64 bytes, 4 bytes of checksum per record, and no bit field.
        assert ds.index_info()["resident_bytes"] <= 64_000 + 4 * 64_000 + 64


def test_a_folder_that_cannot_be_written_is_no_error(tmp_path):
    _tokens(tmp_path / "t", n=100)
    blocker = tmp_path / "file"
    blocker.write_bytes(b"not a folder")
    with Ragged.open(tmp_path / "t", index_cache=blocker / "cache") as r:
        assert r.index_info()["source"] == "built"
        assert len(r[[0, 99]]) == 2


def test_the_folder_comes_from_the_argument_the_environment_or_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ZRECORD_INDEX_CACHE", str(tmp_path / "env"))
    assert folder_for("auto") == str(tmp_path / "env")
    assert folder_for(tmp_path / "arg") == str(tmp_path / "arg")
    assert folder_for(None) is None
    for off in ("off", "", "none"):
        monkeypatch.setenv("ZRECORD_INDEX_CACHE", off)
        assert folder_for("auto") is None
    monkeypatch.delenv("ZRECORD_INDEX_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert folder_for("auto") == str(tmp_path / "xdg" / "zrecord" / "index")
    with pytest.raises(TypeError, match="index_cache must be a folder path"):
        folder_for(3)
    with pytest.raises(ValueError, match="validate must be one of 'cached', 'full'; got 'lazy'"):
        Dense.open(tmp_path / "missing", validate="lazy")


def test_the_folder_keeps_the_newest_files_within_its_bound(tmp_path, monkeypatch):
    now = time.time()
    for age, name in ((300, "a.zrx"), (200, "b.zrx"), (100, "c.zrx")):
        (tmp_path / name).write_bytes(b"x" * 1000)
        os.utime(tmp_path / name, (now - age, now - age))
    stale, fresh = tmp_path / "d.zrx.tmp-1-2", tmp_path / "e.zrx.tmp-3-4"
    for f, age in ((stale, 2 * 24 * 3600), (fresh, 10)):
        f.write_bytes(b"y")
        os.utime(f, (now - age, now - age))
    assert sorted(prune(str(tmp_path), 2000)) == ["a.zrx", "d.zrx.tmp-1-2"]
    assert sorted(os.listdir(tmp_path)) == ["b.zrx", "c.zrx", "e.zrx.tmp-3-4"]
    # The newest file stays, however small the bound.
    assert prune(str(tmp_path), 0) == ["b.zrx"]
    assert sorted(os.listdir(tmp_path)) == ["c.zrx", "e.zrx.tmp-3-4"]


def test_an_open_that_writes_the_folder_prunes_it(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    old = cache / "0000000000000000-0-0-0.zrx"
    old.write_bytes(b"x" * 4096)
    os.utime(old, (1, 1))
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_BYTES", "100")
    _tokens(tmp_path / "t", n=50)
    with Ragged.open(tmp_path / "t", index_cache=cache):
        pass
    assert not old.exists() and len(os.listdir(cache)) == 1


def test_publishing_writes_the_compact_index_for_the_first_reader(tmp_path):
    cache = tmp_path / "cache"
    with Dense.create(tmp_path / "d", np.int32, (4,), codec="raw", index_cache=cache) as w:
        w.append(np.arange(400, dtype=np.int32).reshape(100, 4))
    assert len(os.listdir(cache)) == 1
    with Dense.open(tmp_path / "d", index_cache=cache) as ds:
        assert ds.index_info()["source"] == "cached"
        np.testing.assert_array_equal(ds[99], [396, 397, 398, 399])
    with Dense.create(tmp_path / "e", np.int32, (4,), codec="raw", index_cache=None) as w:
        w.append(np.zeros((3, 4), np.int32))
    assert len(os.listdir(cache)) == 1


def _reseal_index(store) -> None:
    """After index.zri was edited: its checksum in the header, then the header's own."""
    index = np.fromfile(store / "index.zri", np.uint8)
    header = bytearray((store / "header.zrh").read_bytes())
    header[64:72] = _native.xxh64(index).to_bytes(8, "little")
    header[-8:] = _native.xxh64(np.frombuffer(bytes(header[:-8]), np.uint8)).to_bytes(8, "little")
    (store / "header.zrh").write_bytes(bytes(header))


@pytest.mark.parametrize("index_cache", ["folder", None])
def test_first_reads_check_the_low_half_of_a_checksum_and_verify_all_of_it(tmp_path, index_cache):
    """[ZR-SUM-004] a record whose checksum differs from its bytes' XXH64 only in the high 32
    bits reads (the compact index keeps the low half), and verification reports it."""
    recs = [np.arange(i, dtype=np.int32) for i in range(1, 11)]
    with Ragged.create(tmp_path / "t", np.int32, 1, codec="raw", data_shards=1, index_cache=None) as w:
        w.append(recs)
    index = bytearray((tmp_path / "t" / "index.zri").read_bytes())
    entry = len(index) // len(recs)
    index[3 * entry + 16 + 5] ^= 0x10  # bit 44 of record 3's checksum
    (tmp_path / "t" / "index.zri").write_bytes(bytes(index))
    _reseal_index(tmp_path / "t")
    cache = tmp_path / "cache" if index_cache else None
    for _ in range(2):  # built, then (with a folder) mapped from the cache
        with Ragged.open(tmp_path / "t", index_cache=cache) as store:
            for got, want in zip(store[list(range(10))], recs):
                np.testing.assert_array_equal(got, want)
            with pytest.raises(ChecksumError, match="record 3 is corrupt") as info:
                store.verify()
            assert info.value.record == 3
