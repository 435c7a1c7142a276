"""The schema is explicit and never inferred; inputs are never coerced."""

from __future__ import annotations

import numpy as np
import pytest

from zrecord import Dense, Ragged
from zrecord.errors import CodecError, LimitError, SchemaError


@pytest.mark.parametrize("dtype", [
    None,
    np.dtype([("a", "i4"), ("b", "f4")]),   # structured
    np.dtype(("i4", (2,))),                  # subarray
    object,
    np.dtype("i4", metadata={"unit": "m"}),  # metadata-bearing
    np.dtype("V0"),                           # zero itemsize
    np.dtype("S0"), np.dtype("U0"),          # zero itemsize
    "datetime64", "timedelta64",              # NumPy's generic unit (only NaT)
    ">i4", ">U2", ">M8[ns]", "float128",
])
def test_unsupported_dtypes_are_rejected(store_path, dtype):
    with pytest.raises(SchemaError) as info:
        Dense.create(store_path, dtype, (2,), codec="raw")
    assert "dtype" in str(info.value)
    with pytest.raises(SchemaError):
        Ragged.create(store_path, dtype, 1, codec="raw")
    assert not __import__("os").path.exists(store_path)


def test_dtype_none_is_an_error_not_float64(store_path):
    with pytest.raises(TypeError, match="never inferred"):
        Dense.create(store_path, None, (2,), codec="raw")


@pytest.mark.parametrize("shape", [None, (2, -1), ("a",), (1.5,), tuple([1] * 33)])
def test_bad_item_shapes(store_path, shape):
    with pytest.raises((SchemaError, LimitError)):
        Dense.create(store_path, np.uint8, shape, codec="raw")


@pytest.mark.parametrize("ndim", [None, 0, -1, 33, 1.0])
def test_bad_ragged_ndim(store_path, ndim):
    with pytest.raises((SchemaError, LimitError)):
        Ragged.create(store_path, np.uint8, ndim, codec="raw")


def test_codec_is_required_and_checked(store_path):
    with pytest.raises(TypeError):
        Dense.create(store_path, np.uint8, (2,))  # codec is keyword-only and required
    for bad in (None, "gzip", "ZSTD", 0):
        with pytest.raises(CodecError):
            Dense.create(store_path, np.uint8, (2,), codec=bad)


def test_dict_bytes_only_with_zstd_dict(store_path):
    with pytest.raises(CodecError, match="only used by codec 'zstd_dict'"):
        Dense.create(store_path, np.uint8, (2,), codec="raw", dict_bytes=b"abc")
    with pytest.raises(CodecError, match="needs dict_bytes"):
        Dense.create(store_path, np.uint8, (2,), codec="zstd_dict")


@pytest.mark.parametrize("shards", [0, 256, -1, "4", 2.0])
def test_data_shards_range(store_path, shards):  # [ZR-HDR-007] [ZR-LIM-001]
    with pytest.raises((SchemaError, LimitError)):
        Dense.create(store_path, np.uint8, (2,), codec="raw", data_shards=shards)


@pytest.mark.parametrize("value", [[[1, 2], [3, 4]], b"\x00\x01", bytearray(4), 3, "ab"])
def test_dense_append_does_not_coerce(store_path, value):
    with Dense.create(store_path, np.uint8, (2,), codec="raw") as ds:
        with pytest.raises(SchemaError, match="does not coerce"):
            ds.append(value)


def test_dense_append_checks_dtype_and_shape(store_path):
    with Dense.create(store_path, np.float32, (2, 3), codec="raw") as ds:
        with pytest.raises(SchemaError, match="never casts"):
            ds.append(np.zeros((4, 2, 3), np.float64))
        with pytest.raises(SchemaError, match=r"shape \(4, 3, 2\)"):
            ds.append(np.zeros((4, 3, 2), np.float32))
        with pytest.raises(SchemaError):
            ds.append(np.zeros((2, 3), np.float32))  # one record without the batch axis
        ds.append(np.zeros((1, 2, 3), np.float32))
        assert len(ds) == 1


def test_ragged_append_checks_each_record(store_path):
    with Ragged.create(store_path, np.int32, 2, codec="raw") as rs:
        with pytest.raises(SchemaError, match="record 1 has dtype int64"):
            rs.append([np.zeros((1, 1), np.int32), np.zeros((1, 1), np.int64)])
        with pytest.raises(SchemaError, match="ndim 1"):
            rs.append([np.zeros(3, np.int32)])
        with pytest.raises(SchemaError, match="does not coerce"):
            rs.append([[1, 2]])
        with pytest.raises(SchemaError, match="iterable of numpy arrays"):
            rs.append(np.zeros((2, 2), np.int32))
        with pytest.raises(SchemaError):
            rs.append(b"bytes")


def test_ragged_append_takes_views_copies_and_subclasses_exactly(store_path, tmp_path):
    """Records the native collector takes as they are (memmap slices, bool) and those it must
    copy first (non-contiguous, unaligned) all round-trip; nothing is coerced."""
    np.save(tmp_path / "m.npy", np.arange(100, dtype=np.int32).reshape(10, 10))
    mm = np.load(tmp_path / "m.npy", mmap_mode="r")
    raw = np.zeros(4 * 6 + 1, np.uint8)
    unaligned = raw[1:].view(np.int32).reshape(2, 3)  # int32 at an odd address
    unaligned[...] = [[1, 2, 3], [4, 5, 6]]
    assert not unaligned.flags.aligned
    recs = [mm[2:4], np.arange(12, dtype=np.int32).reshape(3, 4).T, unaligned,
            np.zeros((0, 5), np.int32), np.full((1, 1), -7, np.int32)]
    with Ragged.create(store_path, np.int32, 2, codec="zstd") as rs:
        rs.append(iter(recs))
    with Ragged.open(store_path) as r:
        for got, want in zip(r[:], recs, strict=True):
            assert got.dtype == np.int32 and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    flags = str(tmp_path / "b")
    with Ragged.create(flags, bool, 1, codec="raw") as rb:
        with pytest.raises(SchemaError, match="record 1 has dtype uint8"):
            rb.append([np.ones(3, bool), np.ones(3, np.uint8)])
        rb.append([np.array([True, False]), np.ones(0, bool)])
    with Ragged.open(flags) as r:
        assert [x.tolist() for x in r[:]] == [[True, False], []]


def test_ragged_append_rejects_other_byte_orders_and_numbers_records_across_chunks(
        store_path, monkeypatch):
    import zrecord._writer as store

    monkeypatch.setattr(store, "_RAGGED_CHUNK_RECORDS", 3)
    with Ragged.create(store_path, np.int32, 1, codec="raw") as rs:
        rs.append([np.zeros(1, np.int32)] * 2)
        with pytest.raises(SchemaError, match="record 9 has dtype >i4"):
            rs.append([np.zeros(1, np.int32)] * 7 + [np.zeros(1, ">i4")])
        rs.abort()


def test_ragged_append_passes_the_sources_own_exception_through(store_path):
    class SourceBroke(RuntimeError):
        pass

    def records():  # type: ignore[no-untyped-def]
        yield np.zeros(2, np.int32)
        raise SourceBroke("disk went away")

    w = Ragged.create(store_path, np.int32, 1, codec="raw")
    with pytest.raises(SourceBroke, match="disk went away") as info:
        w.append(records())
    assert any(frame.name == "records" for frame in info.traceback)
    w.close()  # nothing of that call was written, so the writer is still usable
    with Ragged.open(store_path) as r:
        assert len(r) == 0
