"""Corrupt stores are errors that name the file and record, never a crash or silent bad data."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from zrecord import ChecksumError, Dense, Ragged
from zrecord.errors import (
    BadMagicError,
    CorruptStoreError,
    FormatError,
    UnsupportedVersionError,
)


def make(path, shards=2, index_parts=True):
    data = np.arange(40 * 16, dtype=np.int32).reshape(40, 16)
    with Dense.create(path, np.int32, (16,), codec="raw", data_shards=shards, index_parts=index_parts) as w:
        w.append(data)
    return data


def flip(path, offset, mask=0x01):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def test_flipped_data_bit_is_named(store_path):  # [ZR-SUM-001] [ZR-SUM-002]
    data = make(store_path)
    shard = os.path.join(store_path, "data-001.zrd")
    flip(shard, 5, 0x10)
    with Dense.open(store_path) as ds:
        # Records in shard 0 are intact and readable.
        np.testing.assert_array_equal(ds[0], data[0])
        with pytest.raises(ChecksumError) as info:
            ds[:]
        msg = str(info.value)
        assert "data-001.zrd" in msg and store_path in msg
        assert info.value.record == 20 and info.value.shard == 1
        assert f"record {info.value.record}" in msg
        with pytest.raises(ChecksumError):
            ds[20]
        with pytest.raises(ChecksumError):
            ds.verify()


def test_every_single_bit_flip_in_data_is_detected(store_path):
    make(store_path, shards=1)
    shard = os.path.join(store_path, "data-000.zrd")
    size = os.path.getsize(shard)
    for offset in range(0, size, 97):
        flip(shard, offset, 1 << (offset % 8))
        with Dense.open(store_path) as ds:
            with pytest.raises(ChecksumError):
                ds.verify()
        flip(shard, offset, 1 << (offset % 8))
    with Dense.open(store_path) as ds:
        ds.verify()


def test_flipped_header_bits_are_rejected(store_path):  # [ZR-HDR-004]
    make(store_path)
    header = os.path.join(store_path, "header.zrh")
    size = os.path.getsize(header)
    for offset in range(size):
        flip(header, offset)
        with pytest.raises(FormatError):
            Dense.open(store_path)
        flip(header, offset)
    Dense.open(store_path).close()


@pytest.mark.parametrize("index_parts", [False, True])
def test_flipped_index_bits_are_rejected(store_path, index_parts):  # [ZR-SUM-003] [ZR-HDR-011] [ZR-PRT-009]
    """Format 1.1 judges the whole index at every open; 1.2 (index parts) at an open with
    validate="full", and by part otherwise: the open succeeds and the first read of the
    damaged block's records fails (its 40 records are one index block)."""
    make(store_path, index_parts=index_parts)
    index = os.path.join(store_path, "index.zri")
    for offset in range(0, os.path.getsize(index), 13):
        flip(index, offset)
        with pytest.raises(ChecksumError):
            Dense.open(store_path, validate="full")
        if index_parts:
            with Dense.open(store_path) as ds, pytest.raises(ChecksumError, match="index block 0"):
                ds[offset // 24]
        else:
            with pytest.raises(ChecksumError):
                Dense.open(store_path)
        flip(index, offset)


def test_bad_magic(store_path):  # [ZR-HDR-001]
    make(store_path)
    flip(os.path.join(store_path, "header.zrh"), 1)
    with pytest.raises(BadMagicError):
        Dense.open(store_path)


def test_newer_major_version_is_refused_by_name(store_path):  # [ZR-HDR-002]
    make(store_path)
    header = os.path.join(store_path, "header.zrh")
    with open(header, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<H", 2))
    with pytest.raises(UnsupportedVersionError, match="2"):
        Dense.open(store_path)


def test_truncated_and_extended_shards(store_path):  # [ZR-HDR-010]
    make(store_path)
    shard = os.path.join(store_path, "data-000.zrd")
    size = os.path.getsize(shard)
    os.truncate(shard, size - 1)
    with pytest.raises(CorruptStoreError, match="data-000.zrd"):
        Dense.open(store_path)
    os.truncate(shard, size + 10)
    with pytest.raises(CorruptStoreError, match="data-000.zrd"):
        Dense.open(store_path)


def test_missing_shard_and_index(store_path):  # [ZR-GEN-001]
    make(store_path)
    os.rename(os.path.join(store_path, "data-001.zrd"), os.path.join(store_path, "x"))
    with pytest.raises(FormatError, match="data-001.zrd"):
        Dense.open(store_path)
    os.rename(os.path.join(store_path, "x"), os.path.join(store_path, "data-001.zrd"))
    os.remove(os.path.join(store_path, "index.zri"))
    with pytest.raises(FormatError, match="index.zri"):
        Dense.open(store_path)


def test_truncated_header_and_index(store_path):
    make(store_path)
    for name in ("header.zrh", "index.zri"):
        p = os.path.join(store_path, name)
        original = open(p, "rb").read()
        for cut in (0, 7, len(original) // 2, len(original) - 1):
            with open(p, "wb") as f:
                f.write(original[:cut])
            with pytest.raises(FormatError):
                Dense.open(store_path)
        with open(p, "wb") as f:
            f.write(original)
    Dense.open(store_path).close()


def test_ragged_corruption_is_named(store_path):
    recs = [np.arange(n, dtype=np.int64) for n in range(1, 30)]
    with Ragged.create(store_path, np.int64, 1, codec="raw", data_shards=1) as w:
        w.append(recs)
    flip(os.path.join(store_path, "data-000.zrd"), 8 * 10)  # inside record 4 (offsets 80..119)
    with Ragged.open(store_path) as rs:
        np.testing.assert_array_equal(rs[3], recs[3])
        with pytest.raises(ChecksumError) as info:
            rs[4]
        assert info.value.record == 4
