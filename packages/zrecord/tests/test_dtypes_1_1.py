"""Format 1.1's dtypes (spec §3.3): datetime64 and timedelta64 with their unit and count,
S<n>, U<n> and V<n>, written and read back byte for byte, Dense and Ragged, raw and zstd.

The user's contract leaves out only structured, subarray, object, metadata-bearing and
zero-itemsize dtypes; every other plain dtype must round-trip ([ZR-HDR-019], [ZR-GEN-008]).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from zrecord import Dense, Ragged, cli
from zrecord.errors import LimitError, SchemaError

NEW_DTYPES = ["M8[ns]", "m8[s]", "S3", "U2", "V4", "M8[5s]", "m8[as]", "M8[Y]", "U1", "S1"]


def _values(dtype: np.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Every byte value, NaT first for the datetime kinds, stray UCS-4 units for U."""
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.array([(k * 131 + seed * 17) % 256 for k in range(n)], dtype=np.uint8)
    arr = raw.view(dtype).reshape(shape).copy()
    flat = arr.reshape(-1)
    if dtype.kind in "Mm" and flat.size:
        flat[0] = np.datetime64("NaT") if dtype.kind == "M" else np.timedelta64("NaT")
    return arr


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("dtype", NEW_DTYPES)
def test_dense_round_trip_byte_for_byte(store_path, dtype, codec):
    dt = np.dtype(dtype)
    data = _values(dt, (5, 2, 3), 1)
    with Dense.create(store_path, dt, (2, 3), codec=codec, data_shards=2) as w:
        w.append(data)
    with Dense.open(store_path) as s:
        assert s.dtype == dt
        # Index parts, the writer's default, are format 1.2 (the dtype alone is 1.1: below).
        assert s.format_version == (1, 2)
        got = s[:]
        assert got.dtype == dt and got.shape == data.shape
        assert got.tobytes() == data.tobytes()
        assert s[3].tobytes() == data[3].tobytes()
        s.verify()


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("dtype", NEW_DTYPES)
def test_ragged_round_trip_byte_for_byte(store_path, dtype, codec):
    dt = np.dtype(dtype)
    records = [_values(dt, (n, 2), n) for n in (3, 0, 5, 1)]
    with Ragged.create(store_path, dt, 2, codec=codec) as w:
        w.append(records)
    with Ragged.open(store_path) as s:
        assert s.dtype == dt
        for want, got in zip(records, s[:]):
            assert got.dtype == dt and got.shape == want.shape
            assert got.tobytes() == want.tobytes()


def test_a_store_of_1_0_dtypes_is_still_format_1_0(store_path, tmp_path):
    """[ZR-HDR-018] A writer that uses nothing of 1.1 (nor index parts, the writer's default
    since [O2]) writes a 1.0 store; a dtype of 1.1 makes it 1.1, index parts 1.2."""
    with Dense.create(store_path, np.float32, (2,), codec="raw", index_parts=False) as w:
        w.append(np.zeros((1, 2), np.float32))
    with Dense.open(store_path) as s:
        assert s.format_version == (1, 0)
    with open(os.path.join(store_path, "header.zrh"), "rb") as f:
        assert f.read()[80:128] == bytes(48)
    for name, dtype, parts, minor in (("u", "U3", False, 1), ("p", np.float32, True, 2)):
        with Dense.create(tmp_path / name, dtype, (2,), codec="raw", index_parts=parts) as w:
            w.append(np.zeros((1, 2), dtype))
        with Dense.open(tmp_path / name) as s:
            assert s.format_version == (1, minor)


def test_zstd_dict_round_trip_of_strings(store_path):
    from zrecord import train_dict

    words = np.array([f"item-{k % 97:03d}" for k in range(4000)], dtype="<U8").reshape(-1, 4)
    d = train_dict(list(words.view(np.uint8).reshape(len(words), -1)), dict_size=1024)
    with Dense.create(store_path, words.dtype, (4,), codec="zstd_dict", dict_bytes=d) as w:
        w.append(words)
    with Dense.open(store_path) as s:
        assert s[:].tobytes() == words.tobytes()


@pytest.mark.parametrize(("store_dtype", "record_dtype"), [
    ("M8[ns]", "M8[s]"), ("m8[s]", "m8[ms]"), ("V4", [("a", "<i4")]), ("S3", "S4"), ("U2", "U3"),
])
def test_append_never_casts_between_units_or_lengths(store_path, store_dtype, record_dtype):
    record = np.zeros(3, dtype=record_dtype)
    with Ragged.create(store_path, store_dtype, 1, codec="raw") as w:
        with pytest.raises(SchemaError, match="dtype"):
            w.append([record])
        w.abort()
    with Dense.create(store_path, store_dtype, (3,), codec="raw") as w:
        with pytest.raises(SchemaError, match="dtype"):
            w.append(record[None])
        w.abort()


def test_generic_datetime_and_big_endian_strings_are_refused(store_path):
    for dtype in ("M8", "m8", ">U2", ">M8[ns]"):
        with pytest.raises(SchemaError):
            Dense.create(store_path, dtype, (1,), codec="raw")
    assert not os.path.exists(store_path)


def test_an_item_size_above_numpys_is_refused(store_path):
    with pytest.raises((LimitError, SchemaError, TypeError, ValueError)):
        Dense.create(store_path, np.dtype(("S", 1 << 31)), (1,), codec="raw")


def test_cli_head_shows_the_new_dtypes(tmp_path, capsys):
    """`zrecord head` prints and dumps (as JSON) every new dtype, NaT included."""
    stores = {}
    for dtype in ("M8[ns]", "m8[s]", "S3", "U2", "V4"):
        dt = np.dtype(dtype)
        path = str(tmp_path / dt.kind.replace("M", "dt").replace("m", "td"))
        with Dense.create(path, dt, (3,), codec="raw") as w:
            w.append(_values(dt, (2, 3), 2))
        stores[dtype] = path
    for dtype, path in stores.items():
        assert cli.main(["head", path, "-n", "2"]) == 0
        text = capsys.readouterr().out
        assert f"{np.dtype(dtype)}" in text
        assert cli.main(["head", path, "-n", "2", "--json"]) == 0
        out = capsys.readouterr().out
        assert out.strip()
        if dtype.startswith("M8"):
            assert "NaT" in out


@pytest.mark.parametrize("dtype", ["<i4", "<f8", "<u2", "<c8"])
def test_arrays_read_carry_numpys_own_dtype_object(tmp_path, dtype):
    """A reader's arrays share NumPy's own descriptor of their dtype (np.dtype("<i4") on a
    little-endian host), not an equal copy made with newbyteorder: the copy is one more shared
    object whose reference count every thread reading scalars updates (free-threaded CPython)."""
    data = np.arange(24).astype(dtype).reshape(6, 4)
    with Dense.create(str(tmp_path / "d"), dtype, (4,), codec="raw") as w:
        w.append(data)
    with Ragged.create(str(tmp_path / "r"), dtype, 1, codec="raw") as w:
        w.append(list(data))
    with Dense.open(str(tmp_path / "d")) as d, Ragged.open(str(tmp_path / "r")) as r:
        own = np.dtype(dtype)
        assert d.dtype is own and d[[0, 5]].dtype is own and d[2].dtype is own
        assert r.dtype is own and all(rec.dtype is own for rec in r[[1, 3]])
