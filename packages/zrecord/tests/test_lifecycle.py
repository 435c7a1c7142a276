"""Publishing, modes and closing: nothing half-written, clear errors, never a crash."""

from __future__ import annotations

import gc
import os
import threading
import warnings

import numpy as np
import pytest

import zrecord
from zrecord import ClosedError, Dense, Ragged
from zrecord.errors import KindMismatchError, ModeError, NotPublishedError, StoreNotFoundError


def siblings(path: str) -> list[str]:
    parent = os.path.dirname(path)
    return sorted(os.listdir(parent))


def test_nothing_visible_until_close(store_path):  # [ZR-PUB-001] [ZR-PUB-003]
    w = Dense.create(store_path, np.uint8, (4,), codec="raw")
    w.append(np.zeros((3, 4), np.uint8))
    assert not os.path.exists(store_path)
    with pytest.raises(FileNotFoundError):
        Dense.open(store_path)
    w.close()
    assert os.path.isdir(store_path)
    assert sorted(os.listdir(store_path)) == ["data-000.zrd", "data-001.zrd", "data-002.zrd",
                                              "data-003.zrd", "header.zrh", "index.zri", "index.zrs"]
    assert siblings(store_path) == ["store"]  # the temporary directory is gone


def test_exception_inside_with_publishes_nothing(store_path):
    with pytest.raises(RuntimeError, match="boom"):
        with Dense.create(store_path, np.uint8, (4,), codec="raw") as ds:
            ds.append(np.zeros((3, 4), np.uint8))
            raise RuntimeError("boom")
    assert not os.path.exists(store_path)
    assert siblings(store_path) == []
    # and the path is free for a new store
    with Dense.create(store_path, np.uint8, (4,), codec="raw") as ds:
        ds.append(np.ones((1, 4), np.uint8))
    assert len(Dense.open(store_path)) == 1


def test_unclosed_writer_publishes_nothing_when_collected(store_path):
    w = Ragged.create(store_path, np.int32, 1, codec="raw")
    w.append([np.arange(3, dtype=np.int32)])
    with pytest.warns(UserWarning, match="1 appended records were discarded"):
        del w
        gc.collect()
    assert not os.path.exists(store_path)
    assert siblings(store_path) == []


def test_create_on_existing_path_raises_file_exists(store_path, tmp_path):
    with Dense.create(store_path, np.uint8, (1,), codec="raw"):
        pass
    with pytest.raises(FileExistsError):
        Dense.create(store_path, np.uint8, (1,), codec="raw")
    (tmp_path / "plainfile").write_text("x")
    with pytest.raises(FileExistsError):
        Ragged.create(tmp_path / "plainfile", np.uint8, 1, codec="raw")


def test_store_appearing_during_write_is_not_replaced(store_path):  # [ZR-PUB-003]
    w = Dense.create(store_path, np.uint8, (1,), codec="raw")
    w.append(np.zeros((2, 1), np.uint8))
    with Dense.create(store_path, np.uint8, (1,), codec="raw") as other:
        other.append(np.ones((5, 1), np.uint8))
    with pytest.raises(FileExistsError):
        w.close()
    with Dense.open(store_path) as ds:
        assert len(ds) == 5
    assert siblings(store_path) == ["store"]


def test_missing_path_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        Dense.open(tmp_path / "nope")
    with pytest.raises(FileNotFoundError):
        Ragged.open(tmp_path / "nope")


def test_directory_without_header_is_not_published(tmp_path):  # [ZR-PUB-004]
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "index.zri").write_bytes(b"")
    with pytest.raises(NotPublishedError):
        Dense.open(tmp_path / "half")


def test_parent_directories_are_created(tmp_path):
    path = tmp_path / "mnist" / "train" / "x"
    with Dense.create(path, np.uint8, (2,), codec="raw") as ds:
        ds.append(np.zeros((1, 2), np.uint8))
    assert len(Dense.open(path)) == 1


def test_reader_cannot_append_and_writer_cannot_be_read(store_path):
    w = Dense.create(store_path, np.uint8, (2,), codec="raw")
    with pytest.raises(ModeError, match="cannot be read"):
        w[0]
    with pytest.raises(ModeError, match="cannot be iterated"):
        iter(w)
    w.append(np.zeros((2, 2), np.uint8))
    w.close()
    with Dense.open(store_path) as ds:
        with pytest.raises(ModeError, match="read-only"):
            ds.append(np.zeros((1, 2), np.uint8))
        with pytest.raises(TypeError):
            ds.append(np.zeros((1, 2), np.uint8))


def test_writer_after_close_is_closed(store_path):
    w = Dense.create(store_path, np.uint8, (2,), codec="raw")
    w.close()
    w.close()  # idempotent
    with pytest.raises(ClosedError, match="immutable"):
        w.append(np.zeros((1, 2), np.uint8))


def test_use_after_close_is_a_clear_error(store_path):
    with Dense.create(store_path, np.uint8, (2,), codec="raw") as w:
        w.append(np.zeros((4, 2), np.uint8))
    ds = Dense.open(store_path)
    ds.close()
    ds.close()  # idempotent
    for op in (lambda: ds[0], lambda: ds[0, 1], lambda: ds[:], lambda: list(ds),
               lambda: ds.verify()):
        with pytest.raises(ClosedError, match="closed"):
            op()
    assert len(ds) == 4  # metadata stays readable


def test_kind_mismatch(tmp_path):
    with Dense.create(tmp_path / "d", np.uint8, (2,), codec="raw"):
        pass
    with Ragged.create(tmp_path / "r", np.uint8, 1, codec="raw"):
        pass
    with pytest.raises(KindMismatchError, match="is a Dense store; open it with Dense.open"):
        Ragged.open(tmp_path / "d")
    with pytest.raises(KindMismatchError, match="is a Ragged store; open it with Ragged.open"):
        Dense.open(tmp_path / "r")
    assert isinstance(zrecord.open_store(tmp_path / "d"), Dense)
    assert isinstance(zrecord.open_store(tmp_path / "r"), Ragged)


def test_partial_ragged_append_failure_poisons_the_writer(store_path, monkeypatch):
    import zrecord._writer as store

    monkeypatch.setattr(store, "_RAGGED_CHUNK_RECORDS", 2)

    def records():
        yield from (np.zeros(2, np.int32) for _ in range(5))
        yield np.zeros(2, np.int64)  # wrong dtype after two chunks were written

    w = Ragged.create(store_path, np.int32, 1, codec="raw")
    with pytest.raises(TypeError):
        w.append(records())
    with pytest.raises(zrecord.ZrecordError, match="published nothing"):
        w.close()
    assert not os.path.exists(store_path)


def test_a_relative_path_is_the_one_of_the_working_folder_at_create(tmp_path, monkeypatch):
    """Was: the writer kept the relative path and published it from the working folder of
    close(), or failed there ("its parent directory '.' is gone")."""
    monkeypatch.chdir(tmp_path)
    os.mkdir("elsewhere")
    w = Dense.create("s", np.int64, (2,), codec="raw")
    w.append(np.zeros((3, 2), np.int64))
    monkeypatch.chdir(tmp_path / "elsewhere")
    w.close()
    assert os.listdir(tmp_path / "elsewhere") == []
    with zrecord.open_store(tmp_path / "s") as r:
        assert len(r) == 3


def test_partial_dense_append_failure_poisons_the_writer(store_path, monkeypatch):
    """A Dense append interrupted after its first chunk was written. Was: close() published
    the chunks written, a part of what the caller asked for (32 of 40 records)."""
    import zrecord._writer as store

    monkeypatch.setattr(store, "_CHUNK_BYTES", 2 * 8)  # two records of 8 bytes a chunk
    real = store.DenseWriter._append_chunk
    calls = []

    def interrupted(self, chunk):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("Ctrl-C in the middle of an append")
        return real(self, chunk)

    monkeypatch.setattr(store.DenseWriter, "_append_chunk", interrupted)
    w = Dense.create(store_path, np.int64, (), codec="raw")
    w.append(np.arange(2, dtype=np.int64))  # a whole append before: it stays appended
    with pytest.raises(KeyboardInterrupt):
        w.append(np.arange(10, dtype=np.int64))
    assert len(w) == 4
    with pytest.raises(zrecord.ZrecordError, match="published nothing: an earlier append "
                       "failed after writing 2 of its records"):
        w.close()
    assert not os.path.exists(store_path)


def test_ragged_chunks_written_on_the_helper_thread_round_trip_in_order(store_path, monkeypatch):
    import zrecord._writer as store

    monkeypatch.setattr(store, "_RAGGED_CHUNK_RECORDS", 7)
    recs = [np.arange(i % 13, dtype=np.int32) + i for i in range(200)]
    threads: set[str] = set()
    real = store.RaggedWriter._flush

    def spy(*args):  # type: ignore[no-untyped-def]
        threads.add(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(store.RaggedWriter, "_flush", spy)
    with Ragged.create(store_path, np.int32, 1, codec="zstd") as w:
        w.append(iter(recs))
        assert len(w) == 200
    assert threads == {"zrecord-ragged-append", threading.current_thread().name}
    assert not [t for t in threading.enumerate() if t.name == "zrecord-ragged-append"]
    with Ragged.open(store_path) as r:
        for got, want in zip(r[:], recs, strict=True):
            np.testing.assert_array_equal(got, want)


def test_ragged_failure_on_the_helper_thread_reaches_the_caller(store_path, monkeypatch):
    import zrecord._writer as store

    monkeypatch.setattr(store, "_RAGGED_CHUNK_RECORDS", 2)
    real = store.RaggedWriter._flush
    calls = []

    def flaky(*args):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device (injected)")
        return real(*args)

    monkeypatch.setattr(store.RaggedWriter, "_flush", flaky)
    w = Ragged.create(store_path, np.int32, 1, codec="raw")
    with pytest.raises(OSError, match="injected"):
        w.append(np.zeros(2, np.int32) for _ in range(10))
    with pytest.raises(zrecord.ZrecordError, match="published nothing"):
        w.close()
    assert not os.path.exists(store_path)


def test_ragged_interrupt_in_the_source_waits_for_the_helper(store_path, monkeypatch):
    import zrecord._writer as store

    monkeypatch.setattr(store, "_RAGGED_CHUNK_RECORDS", 2)
    real = store.RaggedWriter._flush
    in_flight = threading.Event()
    release = threading.Event()
    finished = []

    def slow(*args):  # type: ignore[no-untyped-def]
        in_flight.set()
        release.wait(5)
        real(*args)
        finished.append(1)

    monkeypatch.setattr(store.RaggedWriter, "_flush", slow)

    def records():  # type: ignore[no-untyped-def]
        yield from (np.zeros(3, np.int32) for _ in range(2))  # one chunk, now on the helper
        in_flight.wait(5)
        threading.Timer(0.2, release.set).start()
        raise KeyboardInterrupt

    w = Ragged.create(store_path, np.int32, 1, codec="raw")
    with pytest.raises(KeyboardInterrupt):
        w.append(records())
    # append returned only after the helper's native call: nothing runs on the writer now.
    assert finished == [1]
    with pytest.raises(zrecord.ZrecordError, match="published nothing"):
        w.close()
    assert not os.path.exists(store_path)


def test_close_while_other_threads_read_is_an_error_not_a_crash(store_path):
    data = np.arange(256 * 1024, dtype=np.uint8).reshape(256, 1024)
    with Dense.create(store_path, np.uint8, (1024,), codec="raw") as w:
        w.append(data)
    ds = Dense.open(store_path)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        rng = np.random.default_rng()
        while not stop.is_set():
            try:
                idx = rng.integers(0, 256, 64)
                batch = ds[idx]
                assert np.array_equal(batch, data[idx])
            except ClosedError:
                return
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)
                return

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    ds.close()
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors


def test_many_threads_read_one_store_concurrently(store_path):
    rng = np.random.default_rng(7)
    data = rng.integers(0, 2**31, size=(500, 300), dtype=np.int64)
    with Dense.create(store_path, np.int64, (300,), codec="raw") as w:
        w.append(data)
    failures: list[str] = []
    with Dense.open(store_path) as ds:
        def work(seed: int) -> None:
            r = np.random.default_rng(seed)
            for _ in range(50):
                idx = r.integers(0, 500, 100)
                if not np.array_equal(ds[idx], data[idx]):
                    failures.append(f"thread {seed}")
        threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert failures == []


def test_writer_dropped_without_close_warns_and_publishes_nothing(store_path):
    """A writer collected unclosed says so ([U1]), with a warning Python shows by default
    (a UserWarning, [U3]: a ResourceWarning is hidden, and the script exited 0 having lost its
    data), naming the path and the records lost; its handle aborts."""
    w = Dense.create(store_path, np.int32, (2,), codec="raw")
    w.append(np.zeros((3, 2), np.int32))
    with pytest.warns(UserWarning, match="dropped without close.*its 3 appended records were "
                      "discarded") as caught:
        del w
        gc.collect()
    assert store_path in str(caught[0].message)
    assert not os.path.exists(store_path)
    assert not [e for e in os.listdir(os.path.dirname(store_path)) if ".zr-tmp-" in e]
    # Closed or aborted writers are silent.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Dense.create(store_path, np.int32, (2,), codec="raw") as ok:
            ok.append(np.zeros((1, 2), np.int32))
        del ok
        other = Dense.create(store_path + "2", np.int32, (2,), codec="raw")
        other.abort()
        del other
        gc.collect()


def test_reprs_show_schema_count_and_size(store_path):
    """[U1]: a repr says what a user needs to see: kind, path, dtype, shape, codec, records,
    bytes on disk; writers the records appended so far."""
    w = Dense.create(store_path, np.uint8, (3, 4), codec="raw")
    assert repr(w) == f"<DenseWriter {store_path!r} uint8 (3, 4) raw, 0 records appended>"
    w.append(np.zeros((1500, 3, 4), np.uint8))
    assert "1,500 records appended" in repr(w)
    w.close()
    assert repr(w).endswith("raw, closed>")
    with Dense.open(store_path) as ds:
        assert repr(ds) == f"<Dense {store_path!r} uint8 (3, 4) raw, 1,500 records, 18 KiB>"
    assert repr(ds).endswith("raw, closed>")
    with Ragged.create(store_path + "r", np.int32, 2, codec="zstd") as rw:
        assert repr(rw).startswith(f"<RaggedWriter {store_path + 'r'!r} int32 ndim=2 zstd, 0 ")
    with Ragged.open(store_path + "r") as rs:
        assert repr(rs) == f"<Ragged {store_path + 'r'!r} int32 ndim=2 zstd, 0 records, 0 B>"


def test_appends_show_progress_when_asked(store_path, capsys):
    """[U1]: progress=True shows progress (on stderr) for Dense and Ragged appends; [U2] item
    7: where stderr is not a terminal (here pytest's capture), as plain lines, not as tqdm
    bars joined by carriage returns into one long line."""
    import re

    with Dense.create(store_path, np.int16, (2,), codec="raw") as w:
        w.append(np.zeros((10, 2), np.int16), progress=True)
    with Ragged.create(store_path + "r", np.int16, 1, codec="raw") as rw:
        rw.append((np.zeros(3, np.int16) for _ in range(7)), progress=True)
        rw.append([np.zeros(1, np.int16)] * 4)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert re.fullmatch(re.escape(store_path) + r": 10/10 records \(100%\) done in [0-9.]+ s.*",
                        lines[0])
    # A generator's length is not known: a count without a share.
    assert re.fullmatch(re.escape(store_path + "r") + r": 7 records done in [0-9.]+ s.*", lines[1])
    with Ragged.open(store_path + "r") as rs:
        assert len(rs) == 11


def test_progress_lines_come_at_intervals_and_not_after_an_error(capsys, monkeypatch):
    """[U2] item 7: away from a terminal, progress is one line per interval while work goes
    on and one when it is done; work ended by an exception (Ctrl-C included) adds no line."""
    from zrecord import console

    with console.progress_bar(True, 30, "job", "rows") as advance:
        for _ in range(3):
            advance(10)
    assert capsys.readouterr().err.count("\n") == 1  # the interval (15 s) never passed
    monkeypatch.setattr(console, "PROGRESS_LINES_INTERVAL_S", 0.0)
    with pytest.raises(KeyboardInterrupt):
        with console.progress_bar(True, 30, "job", "rows") as advance:
            for _ in range(3):
                advance(10)
            raise KeyboardInterrupt
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" after ")[0] for line in lines] == [
        "job: 10/30 rows (33%)", "job: 20/30 rows (67%)", "job: 30/30 rows (100%)"]
    with console.progress_bar(False, 30, "job") as advance:
        advance(30)
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal_is_a_bar(tmp_path):
    """[U2] item 7: on a terminal (here a pseudo-terminal) progress is still tqdm's bar,
    redrawn in place."""
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    pytest.importorskip("tqdm")
    script = ("import sys, numpy as np\n"
              "from zrecord import Dense\n"
              "assert sys.stderr.isatty()\n"
              "with Dense.create(sys.argv[1], np.int8, (), codec='raw') as w:\n"
              "    w.append(np.zeros(5, np.int8), progress=True)\n")
    parent, child = pty.openpty()
    # A new pseudo-terminal is 0 columns wide, where tqdm draws nothing: make it 80 wide.
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        # The bar's label is the store's path: a short relative one, so that the bar fits in
        # 80 columns wherever the temporary folder is (a longer one cut "5.00/5" short).
        proc = subprocess.run([sys.executable, "-c", script, "s"], cwd=tmp_path,
                              stderr=child, stdout=subprocess.PIPE, timeout=60)
        os.close(child)
        child = -1
        shown = b""
        while True:
            try:
                chunk = os.read(parent, 4096)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if child >= 0:
            os.close(child)
        os.close(parent)
    assert proc.returncode == 0
    assert b"\r" in shown and b"100%|" in shown and b"5.00/5" in shown, shown


def test_a_script_that_forgets_close_shows_the_loss_by_default(tmp_path):
    """[U3] Without any warning filter set, the loss reaches stderr."""
    import subprocess
    import sys

    code = ("import numpy as np\nfrom zrecord import Dense\n"
            f"w = Dense.create({str(tmp_path / 's')!r}, np.int32, (2,), codec='raw')\n"
            "w.append(np.zeros((5, 2), np.int32))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"})
    assert out.returncode == 0
    assert "UserWarning: DenseWriter for" in out.stderr and "5 appended records" in out.stderr


def test_opening_a_store_a_live_writer_is_still_writing_says_so(store_path):
    """[U3] Before, it said only "does not exist", where the CLI said "writer alive"."""
    with Dense.create(store_path, np.int32, (2,), codec="raw") as w:
        w.append(np.zeros((3, 2), np.int32))
        with pytest.raises(StoreNotFoundError, match="does not exist.*a writer is still writing "
                           "it.*close\\(\\) publishes it"):
            Dense.open(store_path)
    assert len(Dense.open(store_path)) == 3
    with pytest.raises(StoreNotFoundError) as info:
        Dense.open(store_path + "-other")
    assert "writer" not in str(info.value)


def test_opening_a_folder_that_is_not_a_store_says_what_it_is(tmp_path):
    """Found by a newcomer's walk through the docs. Was: a converted dataset's root, a
    dataset of parts and a loaderx 2.x store each got only "has no header.zrh: it is not a
    published zrecord store (an unfinished or aborted write leaves such a directory)"."""
    for rel in ("fm/train/image", "fm/train/label", "fm/test/image", "fm/test/label"):
        with Dense.create(tmp_path / rel, np.uint8, (2,), codec="raw") as w:
            w.append(np.zeros((1, 2), np.uint8))
    with pytest.raises(NotPublishedError, match=r"it is a folder of stores: open one of them, "
                       r"such as '.*fm/test/image', '.*fm/test/label', '.*fm/train/image'$"):
        Dense.open(tmp_path / "fm")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "meta.zr").write_bytes(b"{}")
    with pytest.raises(NotPublishedError, match=r"it holds meta.zr: a store of the loaderx 2.x "
                       r"of PyPI.*migrate_2x_stores.py"):
        zrecord.open_store(tmp_path / "old")
    zrecord.write_dataset(tmp_path / "ds", lambda i: np.zeros((1, 2), np.uint8), range(2),
                          dtype=np.uint8, item_shape=(2,), codec="raw", progress=False)
    with pytest.raises(NotPublishedError, match=r"it is a dataset of parts .* open it with "
                       r"zrecord.open_dataset"):
        Dense.open(tmp_path / "ds")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotPublishedError, match=r"leaves such a directory\) \(ZR-PUB-004\) "
                       r"\(errno 2: No such file or directory\)$"):
        Dense.open(tmp_path / "empty")
