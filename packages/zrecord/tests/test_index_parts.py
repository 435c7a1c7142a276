"""Stores with index parts (format 1.2, spec §4.1), written with ``index_parts=True``: they read
back as written; a plain open judges no part of the index and a read judges the parts of its
records, so a damaged part fails the reads of its records (and verify) with an error naming
it, and a whole open (``validate="full"``) fails; the index cache keeps working with them, and publish and reading by URL refuse them (until they support them)
without uploading or mirroring anything."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from zrecord import Dense, Ragged, _native
from zrecord.errors import ChecksumError, CorruptStoreError, UnsupportedError

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
    passes. Without the keyword a store stays format 1.0, without index.zrs."""
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


@pytest.mark.remote
def test_publish_refuses_a_store_with_index_parts_and_uploads_nothing(tmp_path, s3_server, s3_bucket):
    from zrecord import publish

    _dense(tmp_path / "d")
    creds = s3_server.credentials
    opts = {"endpoint_url": s3_server.endpoint_url, "region": creds.region,
            "aws_access_key_id": creds.access_key_id, "aws_secret_access_key": creds.secret_access_key}
    with pytest.raises(UnsupportedError, match=r"index parts .* which publish does not support yet"):
        publish(tmp_path / "d", s3_bucket.url("p"), storage_options=opts)
    assert s3_bucket.keys("") == []


@pytest.mark.remote
def test_reading_a_store_with_index_parts_by_url_is_refused_before_anything_is_mirrored(
        tmp_path, http_folder):
    _dense(tmp_path / "d")
    for name in ("index.zri", "index.zrs", "data-000.zrd", "data-001.zrd", "header.zrh"):
        http_folder.write(f"d/{name}", (tmp_path / "d" / name).read_bytes())
    url = http_folder.url_for("d")
    with pytest.raises(UnsupportedError, match=r"header.zrh' is a store with index parts .* reading by URL"):
        Dense.open(url, storage_options={"cache_dir": str(tmp_path / "mirror")})
    # Only header.zrh was asked for (a HEAD, then its body): no shard, no index.
    assert {r.path.rsplit("/", 1)[-1] for r in http_folder.requests()} == {"header.zrh"}
    assert not any((tmp_path / "mirror").rglob("index.zri"))



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
