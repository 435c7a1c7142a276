"""Stores with index parts (format 1.2, spec §4.1), written with ``index_parts=True``: they read
back as written; a plain local open judges no part of the index and a read judges the parts of
its records, so a damaged part fails the reads of its records (and verify) with an error naming
it, and a whole open (``validate="full"``) fails; the index cache keeps working with them.
Publish uploads ``index.zrs`` before the header (checked on its way up and after), and reading
by URL mirrors it and judges the store as a local open does: the same records, the same errors,
naming the URL ([O2]; publish and the mirror refused such stores before)."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import zrecord._publish as pub
from zrecord import Dense, Ragged, _native, publish
from zrecord.errors import (
    ChecksumError,
    CorruptStoreError,
    NotPublishedError,
    StoreExistsError,
)

# 1000 records: index blocks of 256 entries (the writer default, s = 8), the last of 232; one
# sum group.
RECORDS = 1000


def _xxh64(data: bytes) -> int:
    return int(_native.xxh64(np.frombuffer(data, np.uint8)))


def _dense(path, *, index_parts: bool = True, index_cache=None) -> np.ndarray:
    data = np.arange(RECORDS * 4, dtype=np.int32).reshape(RECORDS, 4)
    with Dense.create(path, np.int32, (4,), codec="raw", data_shards=2, index_parts=index_parts,
                      index_cache=index_cache) as w:
        w.append(data[:300])
        w.append(data[300:])
    return data


def _reseal_index(store) -> None:
    """After index.zri was edited: its checksum in the header, then the header's own (so that
    only the index parts disagree with it)."""
    header = bytearray((store / "header.zrh").read_bytes())
    header[64:72] = _xxh64((store / "index.zri").read_bytes()).to_bytes(8, "little")
    header[-8:] = _xxh64(bytes(header[:-8])).to_bytes(8, "little")
    (store / "header.zrh").write_bytes(bytes(header))


def _flip(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_create_with_index_parts_round_trips_and_writes_the_parts_of_the_spec(tmp_path):
    """[ZR-PRT-001] [ZR-PRT-008] index.zrs holds the sum of each block of 256 entries, the
    header bit 0, the shifts 8 and 10 and one group sum; the records read back, and verify
    passes. With index_parts=False a store is format 1.0, without index.zrs."""
    data = _dense(tmp_path / "d")
    store = tmp_path / "d"
    header, index = (store / "header.zrh").read_bytes(), (store / "index.zri").read_bytes()
    sums = (store / "index.zrs").read_bytes()
    block = 256 * 24
    assert sums == b"".join(_xxh64(index[b:b + block]).to_bytes(8, "little") for b in range(0, len(index), block))
    assert int.from_bytes(header[80:88], "little") == 1 and header[93:95] == bytes([8, 10])
    assert int.from_bytes(header[128 + 8 + 16:128 + 8 + 24], "little") == _xxh64(sums)
    with Dense.open(store, index_cache=None) as ds:
        assert ds.format_version == (1, 2)
        np.testing.assert_array_equal(ds[np.array([999, 0, 256, 511, 767, 768])],
                                      data[[999, 0, 256, 511, 767, 768]])
        ds.verify()
    recs = [np.arange(i % 7, dtype=np.uint16) for i in range(300)]
    with Ragged.create(tmp_path / "r", np.uint16, 1, codec="zstd", index_parts=True, index_cache=None) as w:
        w.append(recs)
    with Ragged.open(tmp_path / "r", index_cache=None) as rs:
        assert rs.format_version == (1, 2)
        for i in (0, 255, 256, 299):
            np.testing.assert_array_equal(rs[i], recs[i])
    _dense(tmp_path / "plain", index_parts=False)
    assert not (tmp_path / "plain" / "index.zrs").exists()
    with Dense.open(tmp_path / "plain", index_cache=None) as ds:
        assert ds.format_version == (1, 0)


def test_a_damaged_part_fails_a_whole_open_naming_the_part(tmp_path):
    """[ZR-PRT-004] [ZR-PRT-005] [ZR-PRT-011] a block that does not match its sum, a sum group
    that does not match its group sum (both judged at open with ``validate="full"``), and an
    index.zrs missing or of the wrong size (judged at every open, [ZR-PRT-009])."""
    store = tmp_path / "d"
    _dense(store)
    # A reserved byte of record 300's entry, the index checksum resealed: block 1 fails (step
    # 4.4), before the entry's own rule is looked at.
    _flip(store / "index.zri", 300 * 24 + 13)
    _reseal_index(store)
    with pytest.raises(ChecksumError, match=r"index block 1 \(records 256 to 511\) does not match its block sum"):
        Dense.open(store, index_cache=None, validate="full")
    # A byte of block sum 3: the sum group fails (step 4.3) before any block.
    _flip(store / "index.zrs", 3 * 8)
    with pytest.raises(ChecksumError, match=r"sum group 0 \(index blocks 0 to 3, records 0 to 999\)"):
        Dense.open(store, index_cache=None, validate="full")
    os.unlink(store / "index.zrs")
    with pytest.raises(CorruptStoreError, match="no index.zrs"):
        Dense.open(store, index_cache=None)
    (store / "index.zrs").write_bytes(bytes(40))
    with pytest.raises(CorruptStoreError, match=r"index.zrs' has 40 bytes.*exactly 32"):
        Dense.open(store, index_cache=None)


def test_the_index_cache_keeps_working_and_a_change_of_index_zrs_builds_again(tmp_path, monkeypatch):
    """Spec §9.5: a remembered validation of a store with index parts records the identity of
    index.zrs too; a change of it through the file system makes the next open judge again."""
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_RECORDS_MIN", "1")
    cache = tmp_path / "cache"
    store = tmp_path / "d"
    data = _dense(store, index_cache=cache)
    with Dense.open(store, index_cache=cache) as ds:
        assert ds.index_info()["source"] == "cached"
        np.testing.assert_array_equal(ds[[5, 900]], data[[5, 900]])
        ds.verify()
    sums = (store / "index.zrs").read_bytes()
    (store / "index.zrs").write_bytes(sums)  # the same bytes: only its identity changes
    # Without a cache file that fits, a plain open reads by part and writes none (it judged no
    # part of the index); a whole open writes one.
    with Dense.open(store, index_cache=cache) as ds:
        assert ds.index_info()["source"] == "by_part"
        np.testing.assert_array_equal(ds[[5, 900]], data[[5, 900]])
    with Dense.open(store, index_cache=cache, validate="full") as ds:
        assert ds.index_info()["source"] == "built_cached"
    # Damaged after that: the cached validation is not relied on; a read names the group, and
    # so does a whole open.
    _flip(store / "index.zrs", 0)
    with Dense.open(store, index_cache=cache) as ds:
        assert ds.index_info()["source"] == "by_part"
        with pytest.raises(ChecksumError, match="sum group 0"):
            ds[5]
    with pytest.raises(ChecksumError, match="sum group 0"):
        Dense.open(store, index_cache=cache, validate="full")


def test_by_part_a_damaged_block_fails_the_reads_of_its_records_only(tmp_path):
    """[ZR-PRT-009] [ZR-PRT-011] a byte of record 600's entry (index block 2, records 512 to
    767) changed: open succeeds, every read of a record of block 2 fails naming the block,
    every other record reads, and verify fails."""
    store = tmp_path / "d"
    data = _dense(store)
    _flip(store / "index.zri", 600 * 24 + 16)
    with Dense.open(store, index_cache=None) as ds:
        assert ds.index_info()["source"] == "by_part"
        for i in (512, 600, 767, 512):
            with pytest.raises(ChecksumError, match=r"index block 2 \(records 512 to 767\)"):
                ds[i]
        with pytest.raises(ChecksumError, match="index block 2"):
            ds[np.array([0, 700])]
        np.testing.assert_array_equal(ds[np.array([511, 768, 0, 999])], data[[511, 768, 0, 999]])
        with pytest.raises(ChecksumError, match="index block 2"):
            ds.verify()
    # An entry that breaks its own rule under a block sum and a group sum that match it: the
    # reads of its block fail with the entry's code, naming the block.
    store = tmp_path / "e"
    data = _dense(store)
    _flip(store / "index.zri", 300 * 24 + 13)
    _reseal_parts(store)
    with Dense.open(store, index_cache=None) as ds:
        with pytest.raises(CorruptStoreError, match=r"record 300.*index block 1 \(records 256 to 511\)"):
            ds[256]
        np.testing.assert_array_equal(ds[np.array([255, 512])], data[[255, 512]])


def _reseal_parts(store) -> None:
    """After index.zri was edited: index.zrs, the one group sum, the index checksum and the
    header's own, so that only the entries' own rules can fail."""
    index = (store / "index.zri").read_bytes()
    block = 256 * 24
    sums = b"".join(_xxh64(index[b:b + block]).to_bytes(8, "little") for b in range(0, len(index), block))
    (store / "index.zrs").write_bytes(sums)
    header = bytearray((store / "header.zrh").read_bytes())
    header[128 + 8 + 16:128 + 8 + 24] = _xxh64(sums).to_bytes(8, "little")
    (store / "header.zrh").write_bytes(bytes(header))
    _reseal_index(store)


def test_by_part_a_damaged_sum_group_fails_every_read_of_its_blocks(tmp_path):
    """[ZR-PRT-004] a byte of block sum 3: open succeeds; a read of any block of group 0
    fails naming the group, and so does verify."""
    store = tmp_path / "d"
    _dense(store)
    _flip(store / "index.zrs", 3 * 8)
    with Dense.open(store, index_cache=None) as ds:
        for i in (0, 999):
            with pytest.raises(ChecksumError, match=r"sum group 0 \(index blocks 0 to 3, records 0 to 999\)"):
                ds[i]
        with pytest.raises(ChecksumError, match="sum group 0"):
            ds.verify()


def test_by_part_open_of_a_large_store_judges_no_part_of_its_index(tmp_path):
    """[ZR-PRT-009] open runs steps 4.1 and 4.2 only: a store of 2^20 records whose last
    index block is damaged opens, its compact index holds nothing yet, and only the reads of
    that block fail."""
    n = 1 << 20
    store = tmp_path / "big"
    data = (np.arange(n, dtype=np.uint32) % 251).astype(np.uint8).reshape(n, 1)
    with Dense.create(store, np.uint8, (1,), codec="raw", index_parts=True, index_cache=None) as w:
        w.append(data)
    _flip(store / "index.zri", (n - 1) * 24 + 16)
    with Dense.open(store, index_cache=None) as ds:
        info = ds.index_info()
        assert info["source"] == "by_part" and info["resident_bytes"] == 0
        np.testing.assert_array_equal(ds[np.array([0, n // 2])], data[[0, n // 2]])
        # Two blocks of 256 records judged: what they filled, nothing per record of the store.
        assert 0 < ds.index_info()["resident_bytes"] <= 2 * 256 * 20
        with pytest.raises(ChecksumError, match=rf"index block {n // 256 - 1} \(records {n - 256} to {n - 1}\)"):
            ds[n - 1]


FILES = ("header.zrh", "index.zri", "index.zrs", "data-000.zrd", "data-001.zrd")


def _options(s3_server, **extra) -> dict:
    creds = s3_server.credentials
    return {"endpoint_url": s3_server.endpoint_url, "region": creds.region,
            "aws_access_key_id": creds.access_key_id,
            "aws_secret_access_key": creds.secret_access_key, **extra}


def _serve(http_folder, store, name: str, **replace: bytes) -> str:
    """The store's files on the test's HTTP folder, those named in `replace` (dots as
    underscores) with other bytes, header.zrh last; its URL."""
    for part in sorted(FILES, key=lambda f: f == "header.zrh"):
        data = replace.get(part.replace(".", "_"))
        http_folder.write(f"{name}/{part}", (store / part).read_bytes() if data is None else data)
    return http_folder.url_for(name)


def _gets(http_folder, name: str, file: str) -> int:
    return sum(1 for r in http_folder.requests() if r.method == "GET" and r.path.endswith(f"/{name}/{file}"))


@pytest.mark.remote
def test_a_store_with_index_parts_is_published_and_reads_back_by_url(tmp_path, s3_server, s3_bucket):
    """Was: publish refused such a store (UnsupportedError), and so did Dense.create by URL
    (ValueError). Now every object is the local file byte for byte, index.zrs included, and
    the store reads back by URL as format 1.2 and verifies."""
    store = tmp_path / "d"
    data = _dense(store)
    opts = _options(s3_server)
    url = s3_bucket.url("p/d")
    digest = publish(store, url, storage_options=opts)
    assert sorted(s3_bucket.keys("p/d/")) == sorted(f"p/d/{f}" for f in (*FILES, pub.CLAIM))
    for name in FILES:
        assert s3_bucket.get(f"p/d/{name}") == (store / name).read_bytes(), name
    with Dense.open(url, storage_options=opts) as ds:
        assert ds.digest == digest and ds.format_version == (1, 2)
        idx = np.array([999, 0, 256, 511, 767, 768])
        np.testing.assert_array_equal(ds[idx], data[idx])
        # By part: open fetched header.zrh alone; verify fetched the rest of the index.
        stats = ds.remote_stats()
        assert stats["open_bytes"] == (store / "header.zrh").stat().st_size
        assert stats["open_requests"] == 1
        ds.verify()
        assert ds.remote_stats()["index_bytes"] >= sum((store / f).stat().st_size
                                                       for f in ("index.zri", "index.zrs"))
    # Created by URL: staged, published with its parts, the same bytes as a local write.
    recs = [np.arange(i % 9, dtype=np.int16) for i in range(700)]
    for where in (s3_bucket.url("p/r"), tmp_path / "r"):
        with Ragged.create(where, np.int16, 1, codec="zstd", data_shards=2, index_parts=True,
                           index_cache=None, **({"storage_options": opts} if isinstance(where, str) else {})) as w:
            w.append(recs)
    for name in FILES:
        assert s3_bucket.get(f"p/r/{name}") == (tmp_path / "r" / name).read_bytes(), name
    with Ragged.open(s3_bucket.url("p/r"), storage_options=opts) as rs:
        assert rs.format_version == (1, 2)
        for i in (0, 255, 256, 699):
            np.testing.assert_array_equal(rs[i], recs[i])


def test_by_part_gathers_from_many_threads_read_right_and_fail_only_the_damaged_block(tmp_path):
    """The loader gathers on several threads at once: first reads of the same blocks race, and
    every record still comes back right, the damaged block failing every read of its records
    on every thread."""
    n = 1 << 14
    store = tmp_path / "t"
    data = (np.arange(n * 2, dtype=np.uint32) % 253).astype(np.uint8).reshape(n, 2)
    with Dense.create(store, np.uint8, (2,), codec="raw", data_shards=3, index_parts=True,
                      index_cache=None) as w:
        w.append(data)
    _flip(store / "index.zri", 5000 * 24 + 16)  # index block 19: records 4864 to 5119
    with Dense.open(store, index_cache=None) as ds:
        def work(seed: int) -> int:
            rng = np.random.default_rng(seed)
            failed = 0
            for _ in range(40):
                idx = rng.integers(0, n, 64)
                if ((idx >= 4864) & (idx <= 5119)).any():
                    with pytest.raises(ChecksumError, match="index block 19"):
                        ds[idx]
                    failed += 1
                else:
                    np.testing.assert_array_equal(ds[idx], data[idx])
            return failed

        with ThreadPoolExecutor(8) as pool:
            failures = sum(pool.map(work, range(8)))
        assert failures > 0
        np.testing.assert_array_equal(ds[np.arange(4864)], data[:4864])


@pytest.mark.remote
def test_a_publish_of_index_parts_stopped_before_the_header_leaves_no_readable_store(
        tmp_path, s3_server, s3_bucket, monkeypatch):
    """[ZR-PUB-007] index.zrs goes up before header.zrh and is checked after its upload like
    the other objects: a publish stopped before the header, or one whose index.zrs another
    writer replaced after it was uploaded, publishes nothing, and the prefix is not a store."""
    store = tmp_path / "d"
    _dense(store)
    opts = _options(s3_server)
    url = s3_bucket.url("stopped")
    puts: list[str] = []
    real_put = pub.Client.put

    def put(client, name, data, **kw):
        puts.append(name)
        if name == "header.zrh":
            raise KeyboardInterrupt  # the publisher stopped right before its header
        return real_put(client, name, data, **kw)

    with monkeypatch.context() as m:
        m.setattr(pub.Client, "put", put)
        with pytest.raises(KeyboardInterrupt):
            publish(store, url, storage_options=opts)
    assert puts.index("index.zrs") < puts.index("header.zrh")
    assert "stopped/index.zrs" in s3_bucket.keys("stopped/") and "stopped/header.zrh" not in s3_bucket.keys("stopped/")
    with pytest.raises(NotPublishedError, match="is not a published store"):
        Dense.open(url, storage_options=opts)
    real_check = pub._check_uploaded

    def replaced_then_checked(client, local, etags):
        # Another writer's version, of the same size (S3's ETag is the MD5 of the bytes).
        s3_bucket.put("stopped/index.zrs", bytes((store / "index.zrs").stat().st_size))
        return real_check(client, local, etags)

    with monkeypatch.context() as m:
        m.setattr(pub, "_check_uploaded", replaced_then_checked)
        with pytest.raises(StoreExistsError, match=r"stopped/index.zrs changed after this publisher uploaded it"):
            publish(store, url, storage_options=opts)
    assert "stopped/header.zrh" not in s3_bucket.keys("stopped/")
    # The claim was released each time: publishing again completes the store.
    publish(store, url, storage_options=opts)
    with Dense.open(url, storage_options=opts) as ds:
        ds.verify()


@pytest.mark.remote
def test_a_store_with_index_parts_reads_by_url_over_http_and_its_mirror_keeps_index_zrs(
        tmp_path, http_folder, monkeypatch):
    """Was refused (UnsupportedError) from the header, before anything was mirrored. By part
    (decision 0008), the mirror fetches the index parts its gathers need by range and keeps
    them: a shared mirror opened again fetches no part twice, and a part damaged in the mirror
    is fetched again rather than trusted or blamed on the store. With validate="full" the
    mirror fetches the whole index, the open judges it whole, and a shared mirror's compact
    index goes to the index cache folder for the next open to map."""
    monkeypatch.setenv("ZRECORD_INDEX_CACHE_RECORDS_MIN", "1")
    store = tmp_path / "d"
    data = _dense(store)
    url = _serve(http_folder, store, "d")
    opts = {"cache_dir": str(tmp_path / "mirror")}
    idx = np.array([5, 900])  # index blocks 0 and 3 of 4, one sum group
    with Dense.open(url, storage_options=opts) as ds:
        assert ds.format_version == (1, 2) and ds.index_info()["source"] == "by_part"
        np.testing.assert_array_equal(ds[idx], data[idx])
    (mirror,) = [p for p in (tmp_path / "mirror").iterdir() if not p.name.startswith(".")]
    held = (mirror / "store" / "index.zri").read_bytes()
    whole = (store / "index.zri").read_bytes()
    for b in range(4):
        part = slice(b * 256 * 24, min(RECORDS, (b + 1) * 256) * 24)
        assert (held[part] == whole[part]) == (b in (0, 3)), b  # blocks 1 and 2: holes
    assert (mirror / "store" / "index.zrs").read_bytes() == (store / "index.zrs").read_bytes()
    gets = {f: _gets(http_folder, "d", f) for f in ("index.zri", "index.zrs")}
    assert gets == {"index.zri": 2, "index.zrs": 1}
    with Dense.open(url, storage_options=opts) as ds:
        np.testing.assert_array_equal(ds[idx], data[idx])
        assert ds.remote_stats()["index_requests"] == 0  # the mirror's, not fetched again
    # A held part damaged in the mirror fails its check there, is fetched once more, and reads.
    _flip(mirror / "store" / "index.zri", 900 * 24 + 3)
    with Dense.open(url, storage_options=opts) as ds:
        np.testing.assert_array_equal(ds[idx], data[idx])
        assert ds.remote_stats()["index_requests"] == 1
    assert _gets(http_folder, "d", "index.zri") == 3
    # The whole path (validate="full", or a budget): a mirror of its own, the whole index
    # fetched once and judged at open; validate="full" writes the cache file anew. A reader
    # with a budget has a mirror apart from the readers without one (their bytes would be
    # past its budget for good): it fetches the index into its own and builds its cache file,
    # which the next open of that mirror maps.
    budget = {"storage_options": {**opts, "cache_bytes": 1 << 30}}
    for more, source in (({"validate": "full"}, "built_cached"), (budget, "built_cached"),
                         (budget, "cached")):
        with Dense.open(url, **{"storage_options": opts, **more}, index_cache=tmp_path / "ic") as ds:
            assert ds.index_info()["source"] == source
            np.testing.assert_array_equal(ds[idx], data[idx])
            ds.verify()
    assert _gets(http_folder, "d", "index.zrs") == 3


@pytest.mark.remote
def test_a_damaged_remote_index_part_fails_its_reads_naming_the_part_and_the_url(tmp_path, http_folder):
    """[ZR-PRT-001] [ZR-PRT-004] [ZR-PRT-005] by URL: the errors of a local open, naming the
    URL and never the mirror. By part, open succeeds and a read fails on the first part it
    needs that fails (fetched twice: the mirror's copy is not blamed on the store), while the
    records of sound parts read right; on the whole path (validate="full") open fails, and an
    index.zrs missing or of the wrong size is refused from its HEAD, before any index body is
    fetched."""
    store = tmp_path / "d"
    data = _dense(store)
    good = {f.replace(".", "_"): (store / f).read_bytes() for f in FILES}
    _flip(store / "index.zri", 300 * 24 + 13)
    _reseal_index(store)
    url = _serve(http_folder, store, "block")
    block = r"index block 1 \(records 256 to 511\) does not match its block sum"
    with pytest.raises(ChecksumError, match=block) as info:
        Dense.open(url, validate="full")
    before = _gets(http_folder, "block", "index.zri")  # the whole path's one GET
    with Dense.open(url) as ds:
        np.testing.assert_array_equal(ds[[0, 999]], data[[0, 999]])
        with pytest.raises(ChecksumError, match=block) as info:
            ds[[0, 300]]
        assert f"{url}/index.zri" in str(info.value) and str(tmp_path) not in str(info.value)
        # Blocks 0 and 3 (one GET each: 2 blocks apart), then block 1 twice.
        assert _gets(http_folder, "block", "index.zri") == before + 2 + 2
        np.testing.assert_array_equal(ds[[700]], data[[700]])
    sums = bytearray(good["index_zrs"])
    sums[3 * 8] ^= 0xFF
    url = _serve(http_folder, store, "group", **{**good, "index_zrs": bytes(sums)})
    group = r"sum group 0 \(index blocks 0 to 3, records 0 to 999\)"
    with pytest.raises(ChecksumError, match=group) as info:
        Dense.open(url, validate="full")
    with Dense.open(url) as ds, pytest.raises(ChecksumError, match=group) as info:
        ds[[5]]
    assert f"{url}/index.zrs" in str(info.value)
    url = _serve(http_folder, store, "wrong", **{**good, "index_zrs": bytes(40)})
    for validate in ("full", "cached"):
        with pytest.raises(CorruptStoreError, match=r"index.zrs' has 40 bytes .*exactly 32 .*ZR-PRT-001") as info:
            with Dense.open(url, validate=validate) as ds:
                ds[[5]]
        assert f"{url}/index.zrs" in str(info.value)
    url = _serve(http_folder, store, "missing", **good)
    os.unlink(http_folder.path / "missing" / "index.zrs")
    for validate in ("full", "cached"):
        with pytest.raises(CorruptStoreError, match=r"has index parts .* but no index.zrs") as info:
            with Dense.open(url, validate=validate) as ds:
                ds[[5]]
        assert url in str(info.value)




@pytest.mark.remote
def test_by_part_reads_from_many_threads_and_prefetches_fetch_each_part_once(tmp_path, http_folder):
    """By part, index parts are fetched on the reader's event loop as records are: threads
    reading at once each get their records right, a prefetch fetches the parts of the records
    it starts, and no part is fetched twice by one reader (its parts.bits and the core's
    judged blocks say what is held)."""
    import concurrent.futures

    store = tmp_path / "d"
    data = _dense(store)
    url = _serve(http_folder, store, "threads")
    rng = np.random.default_rng(5)
    with Dense.open(url) as ds:
        ds.prefetch(np.arange(0, 256))
        np.testing.assert_array_equal(ds[np.arange(0, 256)], data[:256])
        after_prefetch = ds.remote_stats()
        assert after_prefetch["index_requests"] == 2  # sum group 0, index block 0

        def read(seed: int) -> None:
            idx = np.random.default_rng(seed).integers(0, RECORDS, 64)
            np.testing.assert_array_equal(ds[idx], data[idx])

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(read, rng.integers(0, 1 << 30, 32).tolist()))
        stats = ds.remote_stats()
        # Blocks 1 to 3, joined into fewer GETs when one batch needs neighbours, and each at
        # most once per thread however the threads raced (two may ask before either lands).
        assert 3 <= stats["index_requests"] <= 2 + 3 * 4
        assert stats["index_bytes"] >= (store / "index.zri").stat().st_size
        assert stats["open_requests"] == 1
    assert _gets(http_folder, "threads", "index.zrs") == 1


@pytest.mark.remote
def test_every_valid_store_with_index_parts_reads_by_url_as_it_reads_locally(tmp_path, http_folder):
    """The valid stores of conformance/v1.2 by URL: blocks of one entry (index blocks smaller
    than a compact block: a read needs every block of its compact block), shifts at 48 (one
    block too large to read by part: the mirror then fetches the whole index, as the core reads
    it whole), an empty store, group sums before a dictionary. Each reads record for record as
    the local store does, and verifies. Was (before the core said which stores it reads by
    part): a store of shifts 48 fetched by part failed open on the mirror's holes."""
    from zrecord import open_store

    valid = Path(__file__).resolve().parents[3] / "conformance" / "v1.2" / "valid"
    if not valid.is_dir():
        pytest.fail(f"the conformance vectors are not at {valid}")
    cases = sorted(p.name for p in valid.iterdir() if (p / "store" / "index.zrs").is_file())
    assert {"parts_blocks_of_one_entry", "parts_shifts_at_max", "parts_empty_store"} <= set(cases)
    for name in cases:
        store = valid / name / "store"
        for f in store.iterdir():
            http_folder.write(f"{name}/{f.name}", f.read_bytes())
        with open_store(store, index_cache=None) as local, \
                open_store(http_folder.url_for(name)) as remote:
            assert len(remote) == len(local), name
            order = np.random.default_rng(1).permutation(len(local))
            for i in order.tolist():
                np.testing.assert_array_equal(remote[i], local[i], err_msg=f"{name} record {i}")
            remote.verify()


def _index_table(store: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What the core's index_table says of a store's files as bytes (the publisher's reading)."""
    header = np.frombuffer((store / "header.zrh").read_bytes(), np.uint8)
    layout = _native.header_layout(header, len(header), str(store))
    records = layout["record_count"]
    # A store without parts may hold a stray index.zrs, which no reader reads (spec 4.1).
    sums = (store / "index.zrs").read_bytes() if layout["index_parts"] else b""
    out = (np.empty(records, np.uint64), np.empty(records, np.uint64), np.empty(records, np.uint8),
           np.empty(records, np.uint64))
    _native.index_table(header, np.frombuffer((store / "index.zri").read_bytes(), np.uint8),
                        np.frombuffer(sums, np.uint8), str(store), *out)
    return out


def test_the_core_judges_index_bytes_as_a_whole_open_judges_the_files():
    """zr_index_table (what the publisher reads a store's index with, instead of its own
    parsing of the format): on every v1.2 vector whose files are regular, it passes the valid
    ones, decoding where each record lies as the reader locates it, and where it fails an
    invalid one, a whole open fails it with the same error (the order of [ZR-PRT-010])."""
    import zrecord
    from zrecord.errors import ZrecordError

    root = Path(__file__).resolve().parents[3] / "conformance" / "v1.2"
    cases = json.loads((root / "cases.json").read_text())["cases"]
    failed = 0
    for case in cases:
        store = root / case["store"]
        files = [store / n for n in ("header.zrh", "index.zri", "index.zrs")]
        if any(f.is_symlink() or (f.exists() and not f.is_file()) for f in files) or \
                not files[0].is_file() or not files[1].is_file():
            continue
        try:
            offsets, sizes, shards, _ = _index_table(store)
        except FileNotFoundError:
            continue  # no index.zrs to read: a case of the open's file checks, not of the bytes
        except ZrecordError as exc:
            assert case["expect"] != "valid", (case["name"], exc)
            failed += 1
            with pytest.raises(ZrecordError) as whole:
                zrecord.open_store(store, index_cache=None, validate="full").close()
            assert type(whole.value) is type(exc), (case["name"], whole.value, exc)
            continue
        if case["expect"] != "valid":
            continue
        n = len(offsets)
        with zrecord.open_store(store, index_cache=None, validate="full") as ds:
            if n == 0:
                continue
            handle = ds._handle
            got = (np.empty(n, np.uint64), np.empty(n, np.uint64), np.empty(n, np.uint64))
            handle.locate(np.arange(n, dtype=np.uint64), n, *got)
        np.testing.assert_array_equal(got[0], shards, err_msg=case["name"])
        np.testing.assert_array_equal(got[1], offsets, err_msg=case["name"])
        np.testing.assert_array_equal(got[2], sizes, err_msg=case["name"])
    assert failed >= 15


def test_a_publisher_refuses_index_files_changed_after_the_store_was_opened(tmp_path):
    """The bytes the publisher uploads are judged by the core against the header it opened
    (_LocalStore): index.zrs or index.zri changed after open is refused, naming the part,
    and the entries it decodes are the store's (each record's bytes match its checksum)."""
    path = tmp_path / "s"
    with Dense.create(path, np.int32, (3,), codec="zstd", data_shards=2, index_parts=True) as w:
        w.append(np.arange(3000, dtype=np.int32).reshape(1000, 3))
    with Dense.open(path) as ds:
        digest = ds.digest
    local = pub._LocalStore(path, digest)
    assert set(local.shards.tolist()) == {0, 1} and len(local.sizes) == 1000
    for rec in (0, 517, 999):
        data = (path / f"data-{int(local.shards[rec]):03d}.zrd").read_bytes()
        start = int(local.offsets[rec])
        piece = np.frombuffer(data[start:start + int(local.sizes[rec])], np.uint8)
        assert _native.xxh64(piece) == int(local.checksums[rec])
    sums = (path / "index.zrs").read_bytes()
    (path / "index.zrs").write_bytes(bytes([sums[0] ^ 1]) + sums[1:])
    with pytest.raises(ChecksumError, match=r"index.zrs': sum group 0 .*ZR-PRT-004.*nothing was published"):
        pub._LocalStore(path, digest)
    (path / "index.zrs").write_bytes(sums)
    index = bytearray((path / "index.zri").read_bytes())
    index[600 * 24 + 16] ^= 1  # record 600's checksum: index block 2
    (path / "index.zri").write_bytes(bytes(index))
    with pytest.raises(ChecksumError, match=r"index block 2 \(records 512 to 767\).*nothing was published"):
        pub._LocalStore(path, digest)
