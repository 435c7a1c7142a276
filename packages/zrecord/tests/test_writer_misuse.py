"""Writers and readers used in ways a review found them to fail: each now refused by name, or
done right (found in review, 2026-12-07). Every test here fails on the code before it."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from zrecord import Dense, Ragged, open_store
from zrecord._index import normalise
from zrecord._pages import release_mapped_pages
from zrecord.errors import ClosedError, LimitError, ModeError, SchemaError, ZrecordError


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int32])
def test_a_read_works_on_its_own_copy_of_the_indices(dtype):
    """A read looks at its indices more than once (a Ragged read: the shapes, then the
    records); another thread refilling the caller's array meanwhile made the core read past
    the output it had sized and abort the process. Was: a view of an 8-byte index array."""
    given = np.array([3, 1, 2], dtype=dtype)
    idx = normalise(given, 10, "s")
    assert not np.shares_memory(idx, given)
    assert idx.dtype == np.uint64 and idx.flags.c_contiguous and idx.tolist() == [3, 1, 2]
    # An array that owns its memory and is read-only (a DataLoader's copy) is used as it is;
    # a read-only view of a writable array is copied.
    owned = np.array([3, 1, 2], dtype=np.uint64)
    owned.flags.writeable = False
    assert normalise(owned, 10, "s") is owned
    view = np.array([3, 1, 2, 0], dtype=np.uint64)[:3]
    view.flags.writeable = False
    assert not np.shares_memory(normalise(view, 10, "s"), view)


def _in_a_thread(fn):
    """fn() on a daemon thread, its exception or None; 'hung' where it did not return."""
    out: list[object] = []

    def run():
        try:
            fn()
            out.append(None)
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(20)
    return out[0] if out else "hung"


def test_abort_from_inside_the_writers_own_append_is_refused(tmp_path):
    """The records' generator (or a signal handler during append) calling abort() or close():
    a ModeError that says what to do. Was: a wait for the append's own lock, forever."""
    for what in ("abort", "close"):
        w = Ragged.create(tmp_path / what, np.int32, 1, codec="raw")

        def records(w=w, what=what):
            yield np.arange(3, dtype=np.int32)
            getattr(w, what)()

        raised = _in_a_thread(lambda w=w, records=records: w.append(records()))
        assert isinstance(raised, ModeError), raised
        assert f"{what}() of the writer" in str(raised) and "own append" in str(raised)
        w.abort()  # once append has raised: as the message says
        assert not (tmp_path / what).exists()


def test_a_list_subclass_is_read_as_any_iterable(tmp_path):
    """Was: any list or tuple subclass was trusted as a plain list (its records never copied),
    and one whose __iter__ refilled one buffer stored every record as the last."""
    def frames():
        buf = np.empty(4, np.int32)
        for i in range(5):
            buf[:] = i
            yield buf

    class Lazy(list):
        def __iter__(self):
            return frames()

    with Ragged.create(tmp_path / "r", np.int32, 1, codec="raw") as w:
        w.append(Lazy())
    with open_store(tmp_path / "r") as r:
        assert [int(x[0]) for x in r[:]] == [0, 1, 2, 3, 4]


def test_a_source_by_the_sequence_protocol_is_an_iterable(tmp_path):
    """__len__ and __getitem__ only (a map-style dataset): iter() takes it, and so does append.
    Was: SchemaError "takes an iterable of numpy arrays"."""
    class Records:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            if i >= 3:
                raise IndexError(i)
            return np.arange(i + 1, dtype=np.int16)

    with Ragged.create(tmp_path / "r", np.int16, 1, codec="raw") as w:
        w.append(Records())
    with open_store(tmp_path / "r") as r:
        assert [x.tolist() for x in r[:]] == [[0], [0, 1], [0, 1, 2]]


def test_a_poisoned_writer_refuses_the_next_append_at_once(tmp_path):
    """An append that failed after writing some records poisons the writer (close() publishes
    nothing). Was: later appends went on and were thrown away at close()."""
    def records():
        for i in range(9000):
            if i == 8500:
                raise OSError("the source failed")
            yield np.full(2, i, np.int32)

    w = Ragged.create(tmp_path / "r", np.int32, 1, codec="raw")
    with pytest.raises(OSError, match="the source failed"):
        w.append(records())
    assert len(w) > 0  # some were written: poisoned
    with pytest.raises(ZrecordError, match=r"takes no more records: an earlier append failed.*abort\(\)"):
        w.append([np.zeros(2, np.int32)])
    w.abort()


def test_close_after_a_change_of_working_folder_publishes_and_returns(tmp_path, monkeypatch):
    """A relative path, the working folder changed before close(), a store large enough for
    the index cache. Was: published, then StoreNotFoundError from the cache step, which
    reopened the relative path."""
    monkeypatch.chdir(tmp_path)
    w = Dense.create("big", np.int8, (), codec="raw", index_cache=str(tmp_path / "cache"))
    w.append(np.zeros(70_000, np.int8))
    os.mkdir(tmp_path / "elsewhere")
    monkeypatch.chdir(tmp_path / "elsewhere")
    w.close()
    with open_store(tmp_path / "big") as s:
        assert len(s) == 70_000


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="RSS from /proc (Linux)")
def test_the_pages_of_a_strided_view_of_a_memory_map_are_released(tmp_path):
    """A view copied before it is written (src[:, ::2], a transpose) reads every page it
    spans. Was: only addr + nbytes of it released (half of a ::2 view), and a Dense append of
    such a view released nothing, keeping a 1.2 GiB source resident."""
    path = tmp_path / "src.bin"
    rows, width = 256, 256 << 10  # 64 MiB
    np.ones((rows, width), np.uint8).tofile(path)
    src = np.memmap(path, dtype=np.uint8, mode="r", shape=(rows, width))
    view = src[:, ::2]
    before = _rss()
    assert int(np.ascontiguousarray(view).sum(dtype=np.int64)) == rows * width // 2  # read
    read = _rss()
    release_mapped_pages(view)
    after = _rss()
    assert read - before > 48 << 20  # the copy and the mapped pages
    assert read - after > 56 << 20, (before, read, after)  # the mapped pages went
    del view, src


def test_a_dense_append_of_a_strided_memory_map_releases_its_pages(tmp_path, monkeypatch):
    """The chunk that needed a copy is released too (was: only chunks written as they were)."""
    released: list[np.ndarray] = []
    from zrecord import _writer
    monkeypatch.setattr(_writer, "release_mapped_pages", lambda *c: released.extend(c))
    path = tmp_path / "src.bin"
    np.arange(64 * 16, dtype=np.uint8).tofile(path)
    src = np.memmap(path, dtype=np.uint8, mode="r", shape=(64, 16))
    with Dense.create(tmp_path / "d", np.uint8, (8,), codec="raw") as w:
        w.append(src[:, ::2])
    assert released and all(np.shares_memory(c, src) for c in released)
    with open_store(tmp_path / "d") as d:
        np.testing.assert_array_equal(d[:], src[:, ::2])
    # Ragged records copied for the same reason (was: only those taken as they were).
    released.clear()
    with Ragged.create(tmp_path / "r", np.uint8, 1, codec="raw") as w:
        w.append(src[i, ::2] for i in range(64))
    assert len(released) == 64 and all(np.shares_memory(c, src) for c in released)


@pytest.mark.skipif(not hasattr(np.dtypes, "StringDType"), reason="NumPy 2's StringDType")
def test_variable_width_strings_and_objects_are_refused_as_a_schema_error(tmp_path):
    """Was: TypeError "Cannot use DescrNewByteOrder for this new style DTypes" (StringDType)."""
    for dtype in (np.dtypes.StringDType(), np.dtype("O")):
        with pytest.raises(SchemaError, match="fixed-width 'U<n>' or bytes 'S<n>'"):
            Dense.create(tmp_path / "s", dtype, (), codec="raw")
        with pytest.raises(SchemaError, match="fixed-width"):
            Ragged.create(tmp_path / "r", dtype, 1, codec="raw")


def test_an_empty_index_cache_string_is_off_as_the_environment_variable_is(tmp_path, monkeypatch):
    """Was: taken as the working folder, which got a cache file and a prune stamp."""
    monkeypatch.chdir(tmp_path)
    with Dense.create(tmp_path / "s", np.int8, (), codec="raw", index_cache="") as w:
        w.append(np.zeros(70_000, np.int8))
    with open_store(tmp_path / "s", index_cache="") as s:
        assert s.index_info()["folder"] is None
    assert os.listdir(tmp_path) == ["s"]


def test_iteration_stops_at_the_next_record_once_the_store_is_closed(tmp_path):
    """Was: the rest of the block read ahead (up to 4,096 records) came out after close()."""
    with Dense.create(tmp_path / "s", np.int32, (), codec="raw") as w:
        w.append(np.arange(5000, dtype=np.int32))
    s = open_store(tmp_path / "s")
    it = iter(s)
    assert int(next(it)) == 0
    s.close()
    with pytest.raises(ClosedError):
        next(it)


def test_a_ragged_record_over_the_size_limit_says_its_size(tmp_path):
    """[ZR-LIM-001]: the limit, its value and the value given. Was: the limit alone."""
    w = Ragged.create(tmp_path / "r", np.uint8, 1, codec="raw")
    try:
        with pytest.raises(LimitError, match=r"record 0 has 2147483649 bytes .* above "
                                             r"record_size_bytes_max 2147483648"):
            w.append([np.empty(2**31 + 1, np.uint8)])  # never touched: no memory used
    finally:
        w.abort()


def test_verify_takes_int_bounds_only(tmp_path):
    """Was: verify(1.5) checked from record 1 (the native call truncated the float)."""
    with Dense.create(tmp_path / "s", np.int32, (), codec="raw") as w:
        w.append(np.arange(5, dtype=np.int32))
    with open_store(tmp_path / "s") as s:
        for bad in ({"start": 1.5}, {"stop": 2.0}, {"start": True}):
            with pytest.raises(TypeError, match="verify (start|stop) must be an int"):
                s.verify(**bad)
        s.verify(np.int64(1), 3)
