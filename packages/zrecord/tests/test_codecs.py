"""zstd and zstd_dict: exact round trips, standard frames, stored dictionaries, corruption."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zstandard
from conftest import ALL_DTYPES, random_array

from zrecord import ChecksumError, Dense, Ragged, train_dict
from zrecord.errors import CodecError


def token_like(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Small, similar records: what dictionaries are for."""
    vocab = rng.integers(0, 50_000, size=400, dtype=np.int32)
    return [vocab[rng.integers(0, 400, size=int(rng.integers(16, 200)))] for _ in range(n)]


@pytest.fixture(scope="module")
def dictionary() -> bytes:
    return train_dict(token_like(np.random.default_rng(5), 3000), dict_size=16_384)


def codec_args(codec: str, dictionary: bytes) -> dict:
    return {"codec": codec, "dict_bytes": dictionary if codec == "zstd_dict" else None}


@pytest.mark.parametrize("codec", ["zstd", "zstd_dict"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_dense_round_trip_every_dtype(store_path, rng, dictionary, codec, dtype):
    data = random_array(rng, dtype, (23, 4, 3))
    data[::3] = data[0]  # some compressible records too
    with Dense.create(store_path, dtype, (4, 3), **codec_args(codec, dictionary)) as w:
        w.append(data)
    with Dense.open(store_path) as ds:
        assert ds.codec == codec
        assert ds[:].tobytes() == data.tobytes()
        order = rng.permutation(23)
        assert ds[order].tobytes() == data[order].tobytes()


@pytest.mark.parametrize("codec", ["zstd", "zstd_dict"])
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "float32", "complex128"])
def test_ragged_round_trip_with_zero_size_records(store_path, rng, dictionary, codec, dtype):
    recs = [random_array(rng, dtype, (int(rng.integers(0, 5)), int(rng.integers(0, 40))))
            for _ in range(60)]
    recs[7] = random_array(rng, dtype, (0, 0))
    with Ragged.create(store_path, dtype, 2, data_shards=3, **codec_args(codec, dictionary)) as w:
        w.append(iter(recs))
    with Ragged.open(store_path) as rs:
        for a, b in zip(rs[:], recs, strict=True):
            assert a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("codec", ["zstd", "zstd_dict"])
def test_large_threaded_batches(store_path, rng, dictionary, codec):
    data = rng.integers(0, 8, size=(96, 64, 1024), dtype=np.uint8)  # 64 KiB records, 6 MiB
    with Dense.create(store_path, np.uint8, (64, 1024), **codec_args(codec, dictionary)) as w:
        w.append(data)
    with Dense.open(store_path) as ds:
        order = rng.permutation(96)
        np.testing.assert_array_equal(ds[order], data[order])
        assert ds.stored_bytes < data.nbytes // 2


def read_index(path: str) -> list[tuple[int, int, int, int]]:
    """(offset, stored_size, shard, checksum) per record, from spec §4 (Dense entries)."""
    raw = open(os.path.join(path, "index.zri"), "rb").read()
    return [struct.unpack_from("<QIB3xQ", raw, i) for i in range(0, len(raw), 24)]


@pytest.mark.parametrize("codec", ["zstd", "zstd_dict"])
def test_records_are_standard_independent_frames(store_path, rng, dictionary, codec):
    """Any zstd decoder (here python-zstandard) decodes each stored record on its own."""
    data = np.stack([np.resize(r, 64) for r in token_like(rng, 50)])
    with Dense.create(store_path, np.int32, (64,), **codec_args(codec, dictionary)) as w:
        w.append(data)
    if codec == "zstd_dict":
        decoder = zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dictionary))
    else:
        decoder = zstandard.ZstdDecompressor()
    shards = {}
    for i, (offset, size, shard, _) in enumerate(read_index(store_path)):
        if shard not in shards:
            shards[shard] = open(os.path.join(store_path, f"data-{shard:03d}.zrd"), "rb").read()
        frame = shards[shard][offset:offset + size]
        params = zstandard.get_frame_parameters(frame)
        assert params.content_size == 256
        assert decoder.decompress(frame) == data[i].tobytes()


def test_dictionary_is_stored_in_the_store(store_path, dictionary):  # [ZR-COD-002]
    with Ragged.create(store_path, np.int32, 1, codec="zstd_dict", dict_bytes=dictionary) as w:
        w.append(token_like(np.random.default_rng(1), 100))
    with Ragged.open(store_path) as rs:
        assert rs.dict_bytes == dictionary
    with open(os.path.join(store_path, "header.zrh"), "rb") as f:
        assert dictionary in f.read()


def test_zstd_level_3_matches_the_reference_encoder(store_path):
    """The seed's promise: plain zstd, level 3, per record."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 4, size=(20, 4096), dtype=np.uint8)
    with Dense.create(store_path, np.uint8, (4096,), codec="zstd", data_shards=1) as w:
        w.append(data)
    sizes = [e[1] for e in read_index(store_path)]
    ref = [len(zstandard.ZstdCompressor(level=3, write_content_size=True).compress(r.tobytes()))
           for r in data]
    assert sizes == ref


@pytest.mark.parametrize("codec", ["zstd", "zstd_dict"])
def test_corruption_is_detected_for_each_codec(store_path, dictionary, codec):
    data = np.stack([np.resize(r, 100) for r in token_like(np.random.default_rng(2), 40)])
    with Dense.create(store_path, np.int32, (100,), data_shards=1,
                      **codec_args(codec, dictionary)) as w:
        w.append(data)
    shard = os.path.join(store_path, "data-000.zrd")
    offset, size, _, _ = read_index(store_path)[17]
    with open(shard, "r+b") as f:
        f.seek(offset + size // 2)
        b = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([b[0] ^ 0x40]))
    with Dense.open(store_path) as ds:
        np.testing.assert_array_equal(ds[16], data[16])
        with pytest.raises(ChecksumError) as info:
            ds[17]
        assert info.value.record == 17 and "data-000.zrd" in str(info.value)


def test_codec_misuse_is_a_clear_error(store_path, dictionary):
    with pytest.raises(CodecError, match="needs dict_bytes"):
        Dense.create(store_path, np.uint8, (2,), codec="zstd_dict")
    with pytest.raises(CodecError, match="only used by codec 'zstd_dict'"):
        Dense.create(store_path, np.uint8, (2,), codec="zstd", dict_bytes=dictionary)
    with pytest.raises(CodecError, match="must be bytes"):
        Dense.create(store_path, np.uint8, (2,), codec="zstd_dict", dict_bytes="text")
    with pytest.raises(CodecError, match="empty"):
        Dense.create(store_path, np.uint8, (2,), codec="zstd_dict", dict_bytes=b"")
    assert not os.path.exists(store_path)


def test_train_dict_sources(tmp_path, dictionary):
    rng = np.random.default_rng(9)
    recs = token_like(rng, 2000)
    dense = np.stack([np.resize(r, 64) for r in recs])
    with Dense.create(tmp_path / "d", np.int32, (64,), codec="raw") as w:
        w.append(dense)
    with Ragged.create(tmp_path / "r", np.int32, 1, codec="raw") as w:
        w.append(recs)
    with Dense.open(tmp_path / "d") as d, Ragged.open(tmp_path / "r") as r:
        for source in (dense, iter(recs), recs, d, r):
            trained = train_dict(source, dict_size=8192)
            assert 256 <= len(trained) <= 8192
    # deterministic for a sized source
    assert train_dict(dense, dict_size=8192) == train_dict(dense, dict_size=8192)


def test_train_dict_misuse(tmp_path):
    with pytest.raises(ValueError, match="no sample bytes"):
        train_dict([])
    with pytest.raises(ValueError):
        train_dict(np.zeros((3, 4), np.uint8))  # far too little to train from
    with pytest.raises(ValueError, match="dict_size"):
        train_dict(np.zeros((3, 4), np.uint8), dict_size=10)
    with pytest.raises(TypeError, match="not a numpy.ndarray"):
        train_dict([[1, 2, 3]])
    with pytest.raises(TypeError):
        train_dict(b"bytes")


def test_dictionary_beats_plain_zstd_on_small_similar_records(tmp_path, dictionary):
    recs = token_like(np.random.default_rng(5), 3000)
    sizes = {}
    for codec in ("zstd", "zstd_dict"):
        with Ragged.create(tmp_path / codec, np.int32, 1, **codec_args(codec, dictionary)) as w:
            w.append(recs)
        sizes[codec] = Ragged.open(tmp_path / codec).stored_bytes
    assert sizes["zstd_dict"] < 0.8 * sizes["zstd"]


def test_process_forked_after_a_gather_can_gather_again(store_path):
    """PyTorch's fork workers fork after the parent used the store: the child must not hang."""
    script = textwrap.dedent("""
        import os, sys, numpy as np
        from zrecord import Dense
        data = np.random.default_rng(0).integers(0, 4, size=(64, 128, 1024), dtype=np.uint8)
        with Dense.create(sys.argv[1], np.uint8, (128, 1024), codec="zstd") as w:
            w.append(data)
        ds = Dense.open(sys.argv[1])
        assert np.array_equal(ds[np.arange(64)], data)       # threaded gather in the parent
        pid = os.fork()
        if pid == 0:
            ok = np.array_equal(ds[np.arange(63, -1, -1)], data[::-1])
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    out = subprocess.run([sys.executable, "-c", script, store_path], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "child 0"
