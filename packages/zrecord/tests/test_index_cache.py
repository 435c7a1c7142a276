"""The compact index and its cache folder, seen from Python: which folder, what a second open
finds, what the folder may hold, and that no folder problem fails an open.

The stores here are written without index parts (format 1.1, ``index_parts=False``), whose
every open judges the whole index, so that a plain first open builds and writes the cache file.
A plain open of a store with index parts (the default) reads by part and writes none
([ZR-PRT-009]): ``test_the_second_open_maps_the_index_the_first_built`` also runs with parts,
through an open with ``validate="full"``, and test_index_parts.py has the rest of that path."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

from zrecord import Dense, Ragged, _native, open_store
from zrecord._index_cache import folder_for
from zrecord._index_cache import prune as _prune
from zrecord.errors import ChecksumError, CorruptStoreError


def _tokens(path, n=2000, seed=0, index_parts=False):
    rng = np.random.default_rng(seed)
    recs = [rng.integers(0, 50_000, rng.integers(0, 100), dtype=np.int32) for _ in range(n)]
    with Ragged.create(path, np.int32, 1, codec="zstd", index_parts=index_parts) as w:
        w.append(recs)
    return recs


@pytest.fixture
def every_index(monkeypatch):
    """Every index uses the cache folder, however small: the default keeps indexes of fewer
    than 65,536 records in memory, and the tests' stores are small."""
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_RECORDS_MIN", "1")


def _cache_files(folder) -> list[str]:
    """The compact index files of `folder` (not its pruning stamp), once any pruning that an
    open started in the background has ended."""
    _pruning_done(folder)
    return sorted(n for n in os.listdir(folder) if n.endswith(".zrx"))


def _pruning_done(folder) -> None:
    """Waits for a pruning under way in `folder`: its thread holds the lock of this user's
    stamp file until it ends."""
    import fcntl

    stamp = os.path.join(folder, f".prune-stamp-{os.geteuid()}")
    try:
        fd = os.open(stamp, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def prune(folder, budget):
    """The core's pruning, after any pruning under way (as two processes' would be)."""
    _pruning_done(folder)
    return _prune(folder, budget)


@pytest.mark.parametrize("index_parts", [False, True])
def test_the_second_open_maps_the_index_the_first_built(tmp_path, every_index, index_parts):
    """[ZR-ERR-006] a later open of the same index file maps the validation the first made. With
    index parts a plain open reads by part and writes no cache file ([ZR-PRT-009]): the first
    open that judges the whole index is one with validate="full"."""
    recs = _tokens(tmp_path / "t", index_parts=index_parts)
    cache = tmp_path / "cache"
    if index_parts:
        with Ragged.open(tmp_path / "t", index_cache=cache) as plain:
            assert plain.index_info()["source"] == "by_part"
        assert not cache.exists() or _cache_files(cache) == []
    with Ragged.open(tmp_path / "t", index_cache=cache, validate="full" if index_parts else "cached") as first:
        info = first.index_info()
        assert info["source"] == "built_cached" and info["folder"] == str(cache)
        files = _cache_files(cache)
        assert len(files) == 1 and files[0].endswith(f"-{os.geteuid()}.zrx")
        assert os.stat(cache / files[0]).st_mode & 0o777 == 0o400
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
        assert none.index_info() == {"source": "by_part" if index_parts else "built", "resident_bytes": none.index_info()["resident_bytes"],
                                     "folder": None}
    assert len(_cache_files(cache)) == 1


def test_small_indexes_stay_in_memory_and_their_writers_write_nothing(tmp_path, monkeypatch):
    """An index of fewer than ZRECORD_INDEX_CACHE_RECORDS_MIN records (default 65,536) is
    validated at every open, in a few milliseconds, and never written to the folder: stores of
    tests and small experiments do not fill the user's cache, and their writers pay nothing."""
    cache = tmp_path / "cache"
    with Dense.create(tmp_path / "d", np.int32, (4,), codec="raw", index_cache=cache, index_parts=False) as w:
        w.append(np.zeros((1000, 4), np.int32))
    with Dense.open(tmp_path / "d", index_cache=cache) as ds:
        assert ds.index_info()["source"] == "built"
    assert not cache.exists()
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_RECORDS_MIN", "1000")
    with Dense.open(tmp_path / "d", index_cache=cache) as ds:
        assert ds.index_info()["source"] == "built_cached"
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_RECORDS_MIN", "-1")
    with pytest.raises(ValueError, match="ZRECORD_INDEX_CACHE_RECORDS_MIN must be at least 0; got -1"):
        Dense.open(tmp_path / "d", index_cache=cache)


def test_a_dense_raw_store_costs_five_bytes_per_record(tmp_path):
    with Dense.create(tmp_path / "d", np.uint8, (16,), codec="raw", data_shards=4, index_parts=False) as w:
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


def _dense(path, n=300):
    with Dense.create(path, np.uint8, (1,), codec="raw", index_cache=None, index_parts=False) as w:
        w.append((np.arange(n) % 256).astype(np.uint8).reshape(n, 1))


def _rewrite(path, data):
    """Writes `data` over a cache file in place, which its read-only mode refuses to any user
    but root (the mode is put back)."""
    os.chmod(path, 0o600)
    path.write_bytes(data)
    os.chmod(path, 0o400)


def _age(path, seconds):
    when = time.time() - seconds
    os.utime(path, (when, when))


def _cache_file_of(cache, store) -> str:
    """The name of the cache file of `store`'s index (named by its inode and the user)."""
    ino = os.stat(os.path.join(store, "index.zri")).st_ino
    (name,) = [f for f in _cache_files(cache) if f.endswith(f"-{ino:x}-{os.geteuid()}.zrx")]
    return name


def test_pruning_removes_files_of_stores_gone_or_changed_then_the_least_recently_used(tmp_path, every_index):
    """The folder is bounded: files of stores that no longer exist (or whose index changed)
    and stale temporaries go first, then the least recently used beyond the bound; the newest
    file and names that are not the cache's stay."""
    cache = tmp_path / "cache"
    for name in "abcde":
        _dense(tmp_path / name)
        with Dense.open(tmp_path / name, index_cache=cache):
            pass
    file_of = {name: _cache_file_of(cache, tmp_path / name) for name in "abcde"}
    size = (cache / file_of["c"]).stat().st_size
    shutil.rmtree(tmp_path / "a")  # gone
    index_b = tmp_path / "b" / "index.zri"
    index_b.write_bytes(index_b.read_bytes())  # the same bytes, another identity
    (cache / "notes.txt").write_text("not a cache file")
    stale, fresh = cache / "x.zrx.tmp-1-2", cache / "y.zrx.tmp-3-4"
    for f, age in ((stale, 2 * 24 * 3600), (fresh, 10)):
        f.write_bytes(b"t")
        _age(f, age)
    out = prune(str(cache), 1 << 30)
    assert (out["removed"], out["kept"], out["kept_bytes"]) == (3, 3, 3 * size), out
    assert _cache_files(cache) == sorted(file_of[n] for n in "cde")
    assert not stale.exists() and fresh.exists() and (cache / "notes.txt").exists()
    # By last use (a load refreshes a file's time): d long ago, then c, then e.
    for name, age in (("c", 200), ("d", 300), ("e", 100)):
        _age(cache / file_of[name], age)
    out = prune(str(cache), size)
    assert (out["kept"], out["removed"]) == (1, 2)
    assert _cache_files(cache) == [file_of["e"]]
    # However small the bound, the newest file stays.
    assert prune(str(cache), 0)["kept"] == 1


def test_a_load_marks_its_file_used(tmp_path, every_index):
    cache = tmp_path / "cache"
    _dense(tmp_path / "a")
    with Dense.open(tmp_path / "a", index_cache=cache):
        pass
    path = cache / _cache_file_of(cache, tmp_path / "a")
    _age(path, 7200)
    with Dense.open(tmp_path / "a", index_cache=cache) as a:
        assert a.index_info()["source"] == "cached"
    assert time.time() - path.stat().st_mtime < 60


def test_pruning_leaves_other_users_files_and_older_versions_go(tmp_path, every_index):
    cache = tmp_path / "cache"
    for name in "ab":
        _dense(tmp_path / name)
        with Dense.open(tmp_path / name, index_cache=cache):
            pass
    theirs, older = _cache_files(cache)
    data = bytearray((cache / older).read_bytes())
    data[8:12] = (2).to_bytes(4, "little")  # a version-2 file: never loaded again
    _rewrite(cache / older, bytes(data))
    if os.geteuid() == 0:
        os.chown(cache / theirs, 54321, 54321)
    else:
        os.chmod(cache / theirs, 0o666)  # writable by others: not this user's to trust
    out = prune(str(cache), 0)
    assert _cache_files(cache) == [theirs]
    assert out == {"kept": 0, "kept_bytes": 0, "removed": 1, "removed_bytes": len(data)}


def test_an_open_prunes_when_due_and_not_at_every_open(tmp_path, every_index, monkeypatch):
    """Pruning costs O(files): an open that writes a file prunes when the last pruning is ten
    minutes old (the stamp's time) or the new file is large against the bound, not every time."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_BYTES", str(1 << 30))
    for name in "abc":
        _dense(tmp_path / name)
    with Dense.open(tmp_path / "a", index_cache=cache):
        pass  # the first pruning of the folder (it had no stamp), on a thread of its own
    stamp = cache / f".prune-stamp-{os.geteuid()}"
    assert stamp.exists()
    _pruning_done(cache)
    shutil.rmtree(tmp_path / "a")
    with Dense.open(tmp_path / "b", index_cache=cache):
        pass  # pruned 0 s ago: not due
    assert len(_cache_files(cache)) == 2
    _age(stamp, 601)
    with Dense.open(tmp_path / "c", index_cache=cache):
        pass  # due: a's file goes
    assert len(_cache_files(cache)) == 2
    assert all(Dense.open(tmp_path / n, index_cache=cache).index_info()["source"] == "cached" for n in "bc")
    # A file large against the bound prunes at once: with a bound of one byte, only it stays.
    shutil.rmtree(tmp_path / "b")
    _dense(tmp_path / "d")
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_BYTES", "1")
    with Dense.open(tmp_path / "d", index_cache=cache):
        pass
    assert len(_cache_files(cache)) == 1


def test_a_large_store_is_primed_by_its_writer(tmp_path, monkeypatch):
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_RECORDS_MIN", "100")
    cache = tmp_path / "cache"
    with Dense.create(tmp_path / "d", np.int32, (4,), codec="raw", index_cache=cache, index_parts=False) as w:
        w.append(np.arange(400, dtype=np.int32).reshape(100, 4))
    assert len(_cache_files(cache)) == 1
    with Dense.open(tmp_path / "d", index_cache=cache) as ds:
        assert ds.index_info()["source"] == "cached"
        np.testing.assert_array_equal(ds[99], [396, 397, 398, 399])
    with Dense.create(tmp_path / "e", np.int32, (4,), codec="raw", index_cache=None, index_parts=False) as w:
        w.append(np.zeros((300, 4), np.int32))
    with Dense.create(tmp_path / "f", np.int32, (4,), codec="raw", index_cache=cache, index_parts=False) as w:
        w.append(np.zeros((99, 4), np.int32))
    assert len(_cache_files(cache)) == 1


def _reseal_cache_file(data: bytearray) -> None:
    """A compact index file's header checksum (its last 8 bytes, over the 256-byte header with
    that field zero) made to match its header again: anyone can compute it."""
    header = bytearray(data[:256])
    header[248:256] = bytes(8)
    data[248:256] = _native.xxh64(np.frombuffer(bytes(header), np.uint8)).to_bytes(8, "little")


def test_a_cache_file_planted_by_another_user_is_never_used(tmp_path, every_index):
    """[ZR-ERR-008] Store B holds A's shard bytes with its index reversed; B's compact index
    file, re-keyed to A (A's header checksum and index identity, which anyone who can read A
    can compute) and resealed, planted under A's name: a reader must not use it. Before the
    fix it was used, and A[0:4] read [255, 254, 253, 252]."""
    cache = tmp_path / "cache"
    _dense(tmp_path / "A", 256)
    shutil.copytree(tmp_path / "A", tmp_path / "B")
    index = bytearray((tmp_path / "B" / "index.zri").read_bytes())
    entry = len(index) // 256
    entries = [index[i * entry:(i + 1) * entry] for i in range(256)]
    (tmp_path / "B" / "index.zri").write_bytes(b"".join(reversed(entries)))
    _reseal_index(tmp_path / "B")
    with Dense.open(tmp_path / "B", index_cache=cache) as b:
        assert b[0:4].ravel().tolist() == [255, 254, 253, 252]
    (b_file,) = _cache_files(cache)
    with Dense.open(tmp_path / "A", index_cache=cache):
        pass
    (a_file,) = set(_cache_files(cache)) - {b_file}
    # The key: the store's header checksum, the identities of index.zri and index.zrs, the
    # record count.
    a_key = (cache / a_file).read_bytes()[16:144]
    planted = bytearray((cache / b_file).read_bytes())
    planted[16:144] = a_key
    _reseal_cache_file(planted)
    os.unlink(cache / a_file)
    (cache / a_file).write_bytes(bytes(planted))
    os.chmod(cache / a_file, 0o400)
    # Owned by the reading user and read-only, the planted file is taken as its own work (the
    # trust model: a user's cache holds what that user made); owned by another, or writable by
    # others, never.
    for plant in ("other user", "writable by others"):
        if plant == "other user":
            if os.geteuid() != 0:
                continue  # only root can give a file away
            os.chown(cache / a_file, 54321, 54321)
        else:
            os.chown(cache / a_file, os.geteuid(), os.getegid())
            os.chmod(cache / a_file, 0o666)
        with Dense.open(tmp_path / "A", index_cache=cache) as a:
            assert a.index_info()["source"] == "built_cached"
            assert a[0:4].ravel().tolist() == [0, 1, 2, 3]
        # The reader replaced the planted file with its own.
        assert (cache / a_file).stat().st_uid == os.geteuid()
        _rewrite(cache / a_file, bytes(planted))


def test_a_cache_file_anyone_can_write_is_not_mapped_and_is_replaced(tmp_path, every_index):
    """A reader maps its cache file and checks each entry at its first read only, so a change
    made to the file in place later would reach its reads: files are published read-only
    (0400), and one that its owner can write (as releases before this one left them) is not
    used. Before the change such a file was mapped ("cached")."""
    cache = tmp_path / "cache"
    _dense(tmp_path / "a")
    with Dense.open(tmp_path / "a", index_cache=cache):
        pass
    path = cache / _cache_file_of(cache, tmp_path / "a")
    assert path.stat().st_mode & 0o777 == 0o400
    with Dense.open(tmp_path / "a", index_cache=cache) as a:
        assert a.index_info()["source"] == "cached"
    for mode in (0o600, 0o200):
        os.chmod(path, mode)
        with Dense.open(tmp_path / "a", index_cache=cache) as a:
            assert a.index_info()["source"] == "built_cached"
            assert a[297:300].ravel().tolist() == [41, 42, 43]
        # Replaced by a read-only file of the same name, which the next reader maps.
        assert path.stat().st_mode & 0o777 == 0o400
        with Dense.open(tmp_path / "a", index_cache=cache) as a:
            assert a.index_info()["source"] == "cached"


def test_a_cache_file_reached_through_a_symbolic_link_is_not_used(tmp_path, every_index):
    cache = tmp_path / "cache"
    _dense(tmp_path / "A")
    with Dense.open(tmp_path / "A", index_cache=cache):
        pass
    (name,) = _cache_files(cache)
    os.rename(cache / name, tmp_path / "elsewhere.zrx")
    os.symlink(tmp_path / "elsewhere.zrx", cache / name)
    with Dense.open(tmp_path / "A", index_cache=cache) as a:
        assert a.index_info()["source"] != "cached"


def _xxh64_of(data: bytes) -> int:
    return int(_native.xxh64(np.frombuffer(data, np.uint8)))


def _reseal_index(store) -> None:
    """After index.zri was edited: in a store with index parts (the writer's default), its
    block sums in index.zrs and their group sums in the header (spec §4.1); then its checksum
    in the header, then the header's own."""
    index = np.fromfile(store / "index.zri", np.uint8)
    header = bytearray((store / "header.zrh").read_bytes())
    if header[80] & 1:
        block = (1 << header[93]) * int.from_bytes(header[48:52], "little")
        raw = index.tobytes()
        sums = b"".join(_xxh64_of(raw[b:b + block]).to_bytes(8, "little")
                        for b in range(0, len(raw), block))
        (store / "index.zrs").write_bytes(sums)
        group = 8 << header[94]
        at = 128 + (8 * header[18] if header[16] == 1 else 0) + 8 * header[20]
        for t, start in enumerate(range(0, len(sums), group)):
            header[at + 8 * t:at + 8 * t + 8] = _xxh64_of(sums[start:start + group]).to_bytes(8, "little")
    header[64:72] = _native.xxh64(index).to_bytes(8, "little")
    header[-8:] = _native.xxh64(np.frombuffer(bytes(header[:-8]), np.uint8)).to_bytes(8, "little")
    (store / "header.zrh").write_bytes(bytes(header))


@pytest.mark.parametrize("index_cache", ["folder", None])
def test_first_reads_check_the_low_half_of_a_checksum_and_verify_all_of_it(tmp_path, index_cache, every_index):
    """[ZR-SUM-004] a record whose checksum differs from its bytes' XXH64 only in the high 32
    bits reads (the compact index keeps the low half), and verification reports it."""
    recs = [np.arange(i, dtype=np.int32) for i in range(1, 11)]
    with Ragged.create(tmp_path / "t", np.int32, 1, codec="raw", data_shards=1, index_cache=None, index_parts=False) as w:
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


def test_a_bad_setting_of_the_folder_fails_create_and_nothing_that_does_not_use_the_folder(
        tmp_path, monkeypatch):
    """ZRECORD_INDEX_CACHE_* were read by every open, with index_cache=None too, and by a
    writer's close() after it had published the store, which then raised."""
    _dense(tmp_path / "a")
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_BYTES", "lots")
    with Dense.open(tmp_path / "a", index_cache=None) as a:
        assert len(a) == 300
    with Dense.create(tmp_path / "b", np.uint8, (1,), codec="raw", index_cache=None) as w:
        w.append(np.zeros((3, 1), np.uint8))
    with pytest.raises(ValueError, match="ZRECORD_INDEX_CACHE_BYTES must be a whole number"):
        Dense.create(tmp_path / "c", np.uint8, (1,), codec="raw", index_cache=tmp_path / "cache")
    assert not (tmp_path / "c").exists()


def test_a_child_forked_during_a_pruning_does_not_keep_its_lock(tmp_path, every_index):
    """The pruning thread's lock lived on the stamp's open file description; a child forked
    while it ran inherited the descriptor and held the lock for its whole life, so no later
    open of the user pruned the folder until the child exited."""
    import fcntl

    cache = tmp_path / "cache"
    cache.mkdir()
    # Stale temporaries for the pruning to remove, so that it still runs when the child forks.
    old = time.time() - 3 * 24 * 3600
    for k in range(4000):
        path = cache / f"gone.zrx.tmp-1-{k:x}"
        path.write_bytes(b"")
        os.utime(path, (old, old))
    _dense(tmp_path / "a")
    with Dense.open(tmp_path / "a", index_cache=cache):  # no stamp yet: a pruning starts
        pid = os.fork()
        if pid == 0:
            time.sleep(5)
            os._exit(0)
    try:
        stamp = os.open(cache / f".prune-stamp-{os.geteuid()}", os.O_RDONLY)
        deadline = time.monotonic() + 3
        while True:
            try:
                fcntl.flock(stamp, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "the child keeps the pruning's lock"
                time.sleep(0.02)
        os.close(stamp)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_pruning_keeps_files_of_a_newer_release(tmp_path, every_index):
    """Two releases may share a folder: a file of a newer file version is the newer release's
    to judge. Before, any file this release could not read was removed as stale."""
    cache = tmp_path / "cache"
    _dense(tmp_path / "a")
    with Dense.open(tmp_path / "a", index_cache=cache):
        pass
    (name,) = _cache_files(cache)
    data = bytearray((cache / name).read_bytes())
    data[8:12] = (int.from_bytes(data[8:12], "little") + 1).to_bytes(4, "little")
    _rewrite(cache / name, bytes(data))
    assert prune(str(cache), 1 << 30)["removed"] == 0
    assert _cache_files(cache) == [name]


# A child process opens a store through the index cache, reads every record once (each entry
# passes its first check), changes the mapped cache file in place (as root can, whatever its
# mode), and reads every record again. It prints one line per case: "error <type>" or "ok" with
# whether the records read back were the ones written. A change under the reader used to
# abort the process (a bounds panic), kill it with SIGBUS, or return wrong records.
_CHANGED_UNDER_READER = r"""
import glob, json, os, sys
import numpy as np
from zrecord import Dense, Ragged
kind, store, cache, change = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
cls = Dense if kind == "dense" else Ragged
# validate="full": the reader builds the index and maps the file it publishes in the folder.
s = cls.open(store, index_cache=cache, validate=change.get("validate", "cached"))
assert s.index_info()["source"] == change.get("source", "cached"), s.index_info()
want = s[:]
(path,) = glob.glob(os.path.join(cache, "*.zrx"))
os.chmod(path, 0o600)

def apply():
    with open(path, "r+b") as f:
        if change["op"] == "truncate":
            f.truncate(change["at"])
        elif change["op"] == "add":  # to little-endian u32 fields
            for at in change["at"]:
                f.seek(at)
                value = int.from_bytes(f.read(4), "little") + change["by"]
                f.seek(at)
                f.write(value.to_bytes(4, "little"))
        else:
            f.seek(change["at"])
            f.write(bytes(change["bytes"]))

class Between:
    # The reader's native handle, changing the file after the batch's shapes are read and
    # before its records are.
    def __init__(self, handle):
        self.handle = handle
    def __getattr__(self, name):
        return getattr(self.handle, name)
    def shapes(self, *args):
        self.handle.shapes(*args)
        apply()

if change.get("between"):
    s._handle = Between(s._handle)
else:
    apply()
try:
    got = s[:]
except Exception as e:
    print("error", type(e).__name__, str(e)[:400])
else:
    same = all(np.array_equal(a, b) and a.shape == b.shape for a, b in zip(got, want))
    print("ok", "same" if same else "different")
"""

# The compact file's layout (zig/src/compact.zig): a 256-byte header, then the block headers
# (BlockFixed: shard_base at byte 38, stored_base at byte 32 of each; of a Ragged store of one
# dimension, that dimension's base at byte 52).
_HEADERS_AT = 256


def _change_under_reader(tmp_path, kind, store, change):
    import json
    import subprocess
    import sys

    at = "-".join(map(str, change["at"])) if isinstance(change["at"], list) else change["at"]
    cache = tmp_path / f"cache-{kind}-{change['op']}-{at}-{change.get('validate')}"
    cls = Dense if kind == "dense" else Ragged
    with cls.open(store, index_cache=cache):  # builds and writes the cache file
        pass
    env = {**os.environ, "ZRECORD_INDEX_CACHE_RECORDS_MIN": "1"}
    cp = subprocess.run([sys.executable, "-c", _CHANGED_UNDER_READER, kind, str(store), str(cache), json.dumps(change)],
                        capture_output=True, text=True, timeout=120, env=env)
    assert cp.returncode == 0, f"the reader's process died ({cp.returncode}): {cp.stderr[-600:]}"
    return cp.stdout.strip()


def test_a_cache_file_changed_in_place_under_a_reader_fails_its_calls_not_the_process(tmp_path, every_index):
    """Was (as root, or after a chmod): a place outside a shard in a block header aborted the
    process ("index out of bounds"); a file truncated past a page killed it with SIGBUS; one
    cut inside its last page of bit fields read zeros there and returned wrong records; a
    Ragged raw record's size changed returned a slot partly filled; a reader that built the
    index and published the file it maps was killed by SIGBUS when that file was truncated;
    the sizes and shapes of a block's records changed alike after a batch's shapes were read
    and before its records were filled each slot but its last byte. Each now fails the call
    with CorruptStoreError, and the process lives on."""
    store = tmp_path / "tokens"
    with Ragged.create(store, np.uint8, 1, codec="raw", index_parts=False) as w:
        rng = np.random.default_rng(5)
        w.append([rng.integers(0, 255, rng.integers(1, 3000), dtype=np.uint8) for _ in range(3000)])
    dense = tmp_path / "dense"
    with Dense.create(dense, np.int32, (4,), codec="raw", index_parts=False) as w:
        w.append(np.arange(4 * 3000, dtype=np.int32).reshape(3000, 4))
    cases = [
        ("ragged", store, {"op": "write", "at": _HEADERS_AT + 38, "bytes": [200]}),  # shard 200 of 1
        ("dense", dense, {"op": "write", "at": _HEADERS_AT + 38, "bytes": [200]}),
        ("ragged", store, {"op": "write", "at": _HEADERS_AT + 32, "bytes": [0xFF, 0xFF, 0, 0]}),  # sizes
        ("dense", dense, {"op": "write", "at": _HEADERS_AT + 32, "bytes": [17]}),  # not 16 bytes
        # Block 0's stored sizes and shapes, one byte less alike, between shapes and gather.
        ("ragged", store, {"op": "add", "at": [_HEADERS_AT + 32, _HEADERS_AT + 52], "by": -1, "between": True}),
    ]
    with Ragged.open(store, index_cache=tmp_path / "probe"):
        pass
    (probe,) = _cache_files(tmp_path / "probe")
    data = (tmp_path / "probe" / probe).read_bytes()
    # The store's path follows the bit fields and their 16 bytes of padding.
    path_at = data.index(os.fsencode(os.path.realpath(store)))
    # A cut some pages before the end (the pages after it fault), and one inside the bit
    # fields' last 4 bytes, whose page only reads zeros past the cut, with no fault of its own.
    cases += [("ragged", store, {"op": "truncate", "at": len(data) // 3}),
              ("ragged", store, {"op": "truncate", "at": path_at - 20}),
              ("ragged", store, {"op": "truncate", "at": len(data) // 3, "validate": "full",
                                 "source": "built_cached"})]
    for kind, path, change in cases:
        out = _change_under_reader(tmp_path, kind, path, change)
        assert out.startswith("error CorruptStoreError"), (kind, change, out)
        assert "index cache" in out, out


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("cached", [False, True])
def test_a_gather_into_slots_of_another_size_fails(tmp_path, monkeypatch, codec, cached):
    """The core fills the slots its caller sized from shapes() exactly, or fails the call: a
    slot one byte short of its record, which still lies inside the output, is refused
    (ValueError from an index in the reader's memory, which skips its first pass's shape
    decoding and checks each record at its copy; CorruptStoreError through a cache file, whose
    index may have changed under the reader since shapes())."""
    if cached:
        monkeypatch.setenv("ZRECORD_INDEX_CACHE_RECORDS_MIN", "1")
    rng = np.random.default_rng(3)
    records = [rng.integers(0, 1000, rng.integers(1, 50), dtype=np.int32) for _ in range(200)]
    with Ragged.create(tmp_path / "s", np.int32, 1, codec=codec, index_parts=False) as w:
        w.append(records)
    with Ragged.open(tmp_path / "s", index_cache=tmp_path / "c") as s:
        # Built and published by this first open, then mapped from the folder: a cache file.
        assert s.index_info()["source"] == ("built_cached" if cached else "built")
        idx = np.array([5, 17, 3], dtype=np.uint64)
        sizes = np.array([records[i].nbytes for i in idx.tolist()], dtype=np.uint64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64)
        out = np.zeros(int(sizes.sum()), np.uint8)
        s._handle.gather_ragged(idx, 3, out, offsets, sizes)
        assert out.view(np.int32).tolist() == np.concatenate([records[i] for i in idx.tolist()]).tolist()
        short = sizes.copy()
        short[1] -= 4
        with pytest.raises(CorruptStoreError if cached else ValueError, match="slot"):
            s._handle.gather_ragged(idx, 3, out, offsets, short)
