"""store.digest: a store's identity, its header checksum, for checking that hosts and resumed
runs read the same data."""

from __future__ import annotations

import shutil

import numpy as np

import zrecord
from zrecord import Dense, Ragged, open_store, train_dict


def write(path, data, codec="zstd", **kw):
    with Dense.create(path, data.dtype, data.shape[1:], codec=codec, **kw) as w:
        w.append(data)


def test_digest_is_the_header_checksum(tmp_path):  # [ZR-HDR-004]
    data = np.arange(60, dtype=np.float32).reshape(20, 3)
    dictionary = train_dict(np.random.default_rng(0).integers(0, 5, (2000, 64), dtype=np.int32))
    for codec, extra in (("raw", {}), ("zstd", {}), ("zstd_dict", {"dict_bytes": dictionary})):
        write(tmp_path / codec, data, codec, **extra)
        stored = (tmp_path / codec / "header.zrh").read_bytes()[-8:]
        with Dense.open(tmp_path / codec) as ds:
            assert ds.digest == f"{int.from_bytes(stored, 'little'):016x}"
            assert len(ds.digest) == 16
    with Ragged.create(tmp_path / "r", np.int32, 2, codec="zstd", data_shards=7) as w:
        w.append([np.zeros((i, 2), np.int32) for i in range(10)])
    with open_store(tmp_path / "r") as rs:
        digest = rs.digest
        assert digest == f"{int.from_bytes((tmp_path / 'r' / 'header.zrh').read_bytes()[-8:], 'little'):016x}"
    assert rs.digest == digest  # still there after close


def test_copies_share_a_digest_and_other_records_do_not(tmp_path):
    data = np.arange(400, dtype=np.int64).reshape(100, 4)
    write(tmp_path / "a", data)
    write(tmp_path / "b", data)                    # the same records, written again
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    changed = data.copy()
    changed[57, 2] += 1
    write(tmp_path / "changed", changed)
    write(tmp_path / "shorter", data[:99])
    write(tmp_path / "reordered", data[::-1].copy())
    digests = {name: Dense.open(tmp_path / name).digest
               for name in ("a", "b", "copy", "changed", "shorter", "reordered")}
    assert digests["a"] == digests["b"] == digests["copy"]
    assert len({digests[k] for k in ("a", "changed", "shorter", "reordered")}) == 4


def test_the_digest_comes_from_the_header_the_native_reader_verified(tmp_path):
    """One read of header.zrh, by the native core: the digest is the checksum it verified
    (zr_info.header_checksum), for format 1.0 and 1.1 stores, Dense and Ragged alike."""
    cases = {"dense": np.zeros((3, 2), np.float32),
             "datetime": np.array([[1, 2]], dtype="M8[ns]")}
    for name, data in cases.items():
        write(tmp_path / name, data)
    with zrecord.Ragged.create(tmp_path / "ragged", np.int16, 1, codec="zstd") as w:
        w.append([np.arange(3, dtype=np.int16)])
    for name in (*cases, "ragged"):
        header = (tmp_path / name / "header.zrh").read_bytes()
        with zrecord.open_store(tmp_path / name) as store:
            assert store.digest == header[-8:][::-1].hex()
