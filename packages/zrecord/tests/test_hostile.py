"""Hostile stores: every offset, length and shape read from disk is checked before use.

Each store here is built byte by byte (through tests/fuzz/storemodel.py, which lays out the
format from the spec and reseals checksums), so that exactly one rule is broken and the check
under test, not an earlier checksum, must catch it. The tests named ``test_regression_*`` are
inputs the fuzzer (tests/fuzz/fuzz_store.py) found; the others pin the checks it relies on.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
from collections.abc import Iterator

import numpy as np
import pytest
import zstandard

import zrecord
from zrecord import Dense, Ragged
from zrecord.errors import (
    CorruptStoreError,
    DecodeError,
    FormatError,
    LimitError,
    StoreOSError,
    ZrecordError,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz"))

import storemodel as sm  # noqa: E402

DTYPE_INT32 = 6
DTYPE_UINT8 = 3
RAW, ZSTD = 0, 1
DENSE, RAGGED = 1, 2


def dense_store(item_shape, stored, *, dtype=DTYPE_INT32, codec=RAW, shards=1) -> sm.Store:
    return sm.Store(DENSE, dtype, len(item_shape), codec, shards, list(item_shape), b"",
                    [sm.Record(k % shards, s) for k, s in enumerate(stored)])


def write(path: str, files: dict[str, bytes]) -> str:
    sm.write_store(path, files)
    return path


def open_and_read_all(path: str) -> None:
    with zrecord.open_store(path) as store:
        store.verify()
        list(store)


# ---- regressions found by the fuzzer -------------------------------------------------------


def test_regression_dense_empty_records_with_an_axis_numpy_cannot_hold(tmp_path):
    """Fuzz input 1:4294968005: item_shape (0, 2**64 - 58...) is a valid store of empty records
    ([ZR-HDR-009] counts only the product), but NumPy cannot make the array; reading raised a
    bare ValueError from numpy. Now open raises LimitError naming header.zrh."""
    path = write(str(tmp_path / "s"), dense_store((0, (1 << 64) - 58), [b"", b"", b""]).encode())
    with pytest.raises(LimitError, match="header.zrh"):
        Dense.open(path)
    with pytest.raises(LimitError):
        zrecord.open_store(path)
    # The same shape where the product stays within NumPy's range opens and reads.
    path2 = write(str(tmp_path / "t"), dense_store((0, 1 << 40), [b"", b""]).encode())
    with Dense.open(path2) as ds:
        assert ds[:].shape == (2, 0, 1 << 40)


def test_regression_stacked_empty_records_numpy_cannot_hold(tmp_path):
    """Fuzz input 2:22001: item_shape (0, 2**60) of int32 is one NumPy array per record, but
    not three stacked; ds[:] raised numpy's ValueError. Now it is a LimitError that says to read
    fewer records at a time."""
    path = write(str(tmp_path / "s"), dense_store((0, 1 << 60), [b"", b"", b""]).encode())
    with Dense.open(path) as ds:
        assert ds[0].shape == (0, 1 << 60)
        with pytest.raises(LimitError, match="read fewer"):
            ds[:]


def test_regression_writer_refuses_an_item_shape_numpy_cannot_hold(tmp_path):
    """The writer published such a store too (with a RuntimeWarning); it now refuses it."""
    with pytest.raises(LimitError, match="NumPy"):
        Dense.create(str(tmp_path / "s"), np.int32, (0, (1 << 64) - 1), codec="raw")
    assert not os.path.exists(tmp_path / "s")


def test_regression_ragged_empty_record_with_axes_numpy_cannot_hold(tmp_path):
    """The Ragged twin: record 1 has shape (0, 2**32-1, 2**32-1, 2**32-1), size 0 and valid by
    [ZR-IDX-004]; reading it raised numpy's ValueError. Format 1.1 bounds the non-zero axes
    ([ZR-IDX-007]), so the store itself is now refused at open, with a LimitError naming the
    record, as the reference reader refuses it."""
    big = (1 << 32) - 1
    store = sm.Store(RAGGED, DTYPE_INT32, 4, RAW, 1, [], b"", [
        sm.Record(0, np.arange(2, dtype="<i4").tobytes(), [1, 1, 1, 2]),
        sm.Record(0, b"", [0, big, big, big]),
    ])
    path = write(str(tmp_path / "s"), store.encode())
    with pytest.raises(LimitError, match="record 1 .*ZR-IDX-007"):
        Ragged.open(path)


@pytest.mark.parametrize("name", ["header.zrh", "index.zri", "data-000.zrd"])
def test_regression_fifo_in_place_of_a_store_file_is_refused_not_waited_on(tmp_path, name):
    """Found while extending the fuzzer's file mutations: open(2) of a FIFO blocks until a
    writer appears, so a store with a FIFO in place of any of its files hung open() forever.
    The core now opens store files with O_NONBLOCK and refuses what is not a regular file
    (CorruptStoreError naming the file). Run in a subprocess so that a regression fails the
    test on its timeout instead of hanging the suite."""
    import subprocess

    path = write(str(tmp_path / "s"), dense_store((2,), [np.arange(2, dtype="<i4").tobytes()]
                                                  ).encode())
    os.remove(os.path.join(path, name))
    os.mkfifo(os.path.join(path, name))
    script = ("import sys, zrecord\n"
              "try:\n    zrecord.open_store(sys.argv[1])\n"
              "except zrecord.errors.CorruptStoreError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert name in out.stdout and "not a regular file" in out.stdout


@pytest.mark.parametrize("command", ["head", "stats", "info"])
def test_regression_cli_on_a_corrupt_record_prints_one_line_not_a_traceback(tmp_path, capsys,
                                                                             command):
    """`zrecord head` on a store whose record 0 is corrupt ([ZR-SUM-002]) ended in a Python
    traceback; every command now prints one line naming the problem and exits 1, the store is
    not valid ([U1]: it was 2, the status of usage errors; info and stats read no record data
    and succeed)."""
    from zrecord.cli import main

    store = dense_store((2,), [np.arange(2, dtype="<i4").tobytes()] * 2)
    files = store.encode()
    shard = bytearray(files["data-000.zrd"])
    shard[0] ^= 1
    files["data-000.zrd"] = bytes(shard)
    path = write(str(tmp_path / "s"), files)
    rc = main([command, path])
    out, err = capsys.readouterr()
    if command == "head":
        assert rc == 1
        assert err.count("\n") == 1 and "record 0" in err and "data-000.zrd" in err
    else:
        assert rc == 0 and err == ""


def test_regression_cli_head_json_of_empty_records_with_a_long_axis(tmp_path, capsys):
    """Fuzz input 8:4294973937: item_shape (2**24, 0) is a valid store of empty records, and
    `zrecord head --json` turned each into 16 million nested empty lists (MemoryError under
    the fuzzer's address-space limit). An empty record's values are now []."""
    from zrecord.cli import main

    path = write(str(tmp_path / "s"), dense_store((1 << 24, 0), [b"", b"", b""]).encode())
    assert main(["head", path, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [r["shape"] for r in shown] == [[1 << 24, 0]] * 3
    assert [r["values"] for r in shown] == [[], [], []]


def test_regression_cli_head_json_of_complex_records(tmp_path, capsys):
    """Fuzz input 9:46680 (a mutated dtype code): `zrecord head --json` of a complex store
    raised TypeError (JSON has no complex numbers). Complex values are [real, imag] pairs."""
    from zrecord.cli import main

    path = str(tmp_path / "s")
    with Dense.create(path, np.complex64, (2,), codec="raw") as w:
        w.append(np.array([[1 + 2j, -3.5j]], np.complex64))
    assert main(["head", path, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown[0]["values"] == [[1.0, 2.0], [0.0, -3.5]]


# ---- offsets, lengths and sizes ------------------------------------------------------------


def entry_store_with(tmp_path, name, offset=None, stored_size=None, shard=None) -> str:
    """A one-shard raw Dense store of 3 records whose record 1's entry is overwritten and the
    index and header resealed."""
    files = dense_store((2,), [np.arange(2, dtype="<i4").tobytes()] * 3).encode()
    index = bytearray(files["index.zri"])
    for value, off, size in ((offset, 0, 8), (stored_size, 8, 4), (shard, 12, 1)):
        if value is not None:
            sm.put(index, 24 + off, size, value)
    files["index.zri"] = bytes(index)
    header = bytearray(files["header.zrh"])
    sm.put(header, 64, 8, sm.xxh64(bytes(index)))
    sm.reseal_header(header)
    files["header.zrh"] = bytes(header)
    return write(str(tmp_path / name), files)


@pytest.mark.parametrize("offset", [8 * 3 - 7, 1 << 40, (1 << 64) - 1, (1 << 64) - 8])
def test_record_range_past_or_wrapping_the_shard_is_refused(tmp_path, offset):
    """[ZR-IDX-002] offset + stored_size is checked without overflow before any byte is read."""
    path = entry_store_with(tmp_path, f"s{offset}", offset=offset)
    with pytest.raises(CorruptStoreError, match="ZR-IDX-002"):
        Dense.open(path)


def test_shard_number_past_data_shards_is_refused(tmp_path):
    """[ZR-IDX-001]"""
    with pytest.raises(CorruptStoreError, match="ZR-IDX-001"):
        Dense.open(entry_store_with(tmp_path, "s", shard=1))


def test_stored_size_other_than_the_raw_record_size_is_refused(tmp_path):
    """[ZR-IDX-004] for codec raw."""
    with pytest.raises(FormatError):
        Dense.open(entry_store_with(tmp_path, "s", stored_size=4))


def test_record_count_larger_than_the_index_file_is_refused_before_allocating(tmp_path):
    """[ZR-HDR-011] [ZR-HDR-014] a header that claims 2**48 records (and a matching index_size)
    over an index of 3 entries is refused on the size, not by allocating 6 PiB."""
    files = dense_store((2,), [np.arange(2, dtype="<i4").tobytes()] * 3).encode()
    header = bytearray(files["header.zrh"])
    sm.put(header, 24, 8, 1 << 48)
    sm.put(header, 56, 8, (1 << 48) * 24)
    sm.reseal_header(header)
    files["header.zrh"] = bytes(header)
    with pytest.raises(CorruptStoreError, match="index.zri"):
        Dense.open(write(str(tmp_path / "s"), files))


def test_oversized_header_file_is_refused_without_reading_it(tmp_path):
    """[ZR-HDR-022] a sparse 1 GiB header.zrh is refused on its size alone."""
    files = dense_store((2,), [np.arange(2, dtype="<i4").tobytes()]).encode()
    path = write(str(tmp_path / "s"), files)
    with open(os.path.join(path, "header.zrh"), "r+b") as f:
        f.truncate(1 << 30)
    with pytest.raises(CorruptStoreError, match="ZR-HDR-022"):
        Dense.open(path)


def test_shard_truncated_before_open_is_an_error_not_sigbus(tmp_path):
    """[ZR-HDR-010] every shard's size is checked against the header at open, so a shard cut
    short before open never reaches the mapping (where reading past its end is SIGBUS)."""
    path = str(tmp_path / "s")
    with Dense.create(path, np.uint8, (100,), codec="raw", data_shards=2) as w:
        w.append(np.ones((40, 100), np.uint8))
    os.truncate(os.path.join(path, "data-001.zrd"), 1000)
    with pytest.raises(CorruptStoreError, match="data-001.zrd"):
        Dense.open(path)


def test_large_record_shard_truncated_after_open_is_an_error(tmp_path):
    """Large records are read with pread: a shard truncated after open is CorruptStoreError
    naming the shard ([ZR-PUB-005] says it must not happen; the reader still must not crash)."""
    path = str(tmp_path / "s")
    with Dense.create(path, np.uint8, (64 << 10,), codec="raw", data_shards=1) as w:
        w.append(np.ones((4, 64 << 10), np.uint8))
    with Dense.open(path) as ds:
        os.truncate(os.path.join(path, "data-000.zrd"), 100)
        with pytest.raises(CorruptStoreError, match="data-000.zrd"):
            ds[3]


# ---- crafted zstd frames -------------------------------------------------------------------


def frame_store(tmp_path, name, frame: bytes, item_shape=(16,)) -> str:
    """A zstd Dense store whose record 0 is `frame`, with a correct checksum and sizes."""
    store = dense_store(item_shape, [frame], dtype=DTYPE_UINT8, codec=ZSTD)
    return write(str(tmp_path / name), store.encode())


@pytest.mark.parametrize("case", ["longer", "shorter", "no_content_size", "two_frames",
                                  "skippable", "truncated", "huge_content_size", "garbage"])
def test_crafted_frames_are_decode_errors(tmp_path, case):
    """[ZR-IDX-005] a frame that does not decode to exactly the logical size is DecodeError,
    whatever it declares; nothing is allocated from a frame's declared size."""
    c = zstandard.ZstdCompressor()
    frame = {
        "longer": c.compress(bytes(17)),
        "shorter": c.compress(bytes(15)),
        "no_content_size": zstandard.ZstdCompressor(write_content_size=False).compress(bytes(16)),
        "two_frames": c.compress(bytes(8)) + c.compress(bytes(8)),
        "skippable": b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + bytes(4),
        "truncated": c.compress(bytes(range(16)))[:-3],
        "garbage": bytes(range(40)),
    }.get(case)
    if case == "huge_content_size":
        # Frame header descriptor 0xC0 (8-byte content size, single segment unset): declares
        # 2**40 bytes with an empty raw block.
        frame = (b"\x28\xb5\x2f\xfd" + b"\xc0\x00" + (1 << 40).to_bytes(8, "little")
                 + b"\x01\x00\x00")
    path = frame_store(tmp_path, case, frame)
    with Dense.open(path) as ds:
        with pytest.raises((DecodeError, CorruptStoreError)) as info:
            ds[0]
        assert info.value.record == 0
        with pytest.raises(ZrecordError):
            ds.verify()


HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz", "fuzz_store.py")


def run_harness(tmp_path, seconds: int, selftest: str | None = None):
    import subprocess

    env = dict(os.environ)
    env.pop("ZRECORD_FUZZ_SELFTEST", None)
    if selftest:
        env["ZRECORD_FUZZ_SELFTEST"] = selftest
    return subprocess.run([sys.executable, HARNESS, "--seconds", str(seconds), "--jobs", "1",
                           "--timeout", "2", "--findings", str(tmp_path / "findings")],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.slow
def test_fuzz_harness_smoke(tmp_path):
    """The fuzz harness runs (a few hundred inputs) and finds nothing."""
    out = run_harness(tmp_path, 4)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert '"findings": 0' in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("selftest,report", [("crash", "crash input"), ("hang", "hang input"),
                                             ("memory", "overallocation")])
def test_fuzz_harness_catches_crashes_hangs_and_overallocation(tmp_path, selftest, report):
    """The supervisor's watchdogs work: a worker killed by SIGSEGV, one stuck past --timeout and
    one allocating past its RLIMIT_AS are each reported with a replayable input."""
    out = run_harness(tmp_path, 5, selftest)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert report in out.stdout
    saved = os.listdir(tmp_path / "findings")
    assert any(name.endswith(".json") for name in saved)
    assert any(name.endswith(".store") for name in saved)


def test_a_socket_in_place_of_a_store_file_is_corrupt(tmp_path, monkeypatch):
    """[ZR-GEN-004] [ZR-GEN-006] open(2) of a socket fails (ENXIO) instead of opening a file
    of another type: it is still a store file that is present and not regular."""
    import socket

    path = write(str(tmp_path / "s"), dense_store((2,), [np.arange(2, dtype="<i4").tobytes()]
                                                  ).encode())
    os.remove(os.path.join(path, "index.zri"))
    monkeypatch.chdir(path)  # a socket's path is limited to 108 bytes
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("index.zri")
        with pytest.raises(CorruptStoreError, match="not a regular file"):
            zrecord.open_store(path)


def test_the_store_path_nothing_there_or_not_a_directory(tmp_path):
    """[ZR-GEN-005] Nothing at the path (or a dangling link) is StoreNotFoundError
    (not_found); a file there is NotPublishedError (not_published)."""
    with pytest.raises(zrecord.errors.StoreNotFoundError):
        zrecord.open_store(str(tmp_path / "none"))
    os.symlink("none", tmp_path / "link")
    with pytest.raises(zrecord.errors.StoreNotFoundError):
        zrecord.open_store(str(tmp_path / "link"))
    (tmp_path / "file").write_bytes(b"\x89ZREC\r\n\x1a")
    with pytest.raises(zrecord.errors.NotPublishedError, match="not a directory"):
        zrecord.open_store(str(tmp_path / "file"))
    # ENOTDIR on the way to the path is the same outcome as at its end.
    with pytest.raises(zrecord.errors.NotPublishedError, match="not a directory"):
        zrecord.open_store(str(tmp_path / "file" / "store"))


@contextlib.contextmanager
def _file_permissions_enforced() -> Iterator[None]:
    """Makes permission bits apply to this thread: root reads a file of mode 000 through
    CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so for root both are dropped from the calling
    thread's effective set (capabilities are per thread on Linux; the core opens stores in the
    calling thread) and restored afterwards."""
    if os.geteuid() != 0:
        yield
        return
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    version_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two Data words
    saved = (Data * 2)()
    if libc.capget(ctypes.byref(Header(version_3, 0)), saved) != 0:
        pytest.skip("capget failed: cannot drop root's permission override here")
    dropped = (Data * 2)(*[Data(d.effective, d.permitted, d.inheritable) for d in saved])
    dropped[0].effective &= ~((1 << 1) | (1 << 2))  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.capset(ctypes.byref(Header(version_3, 0)), dropped) != 0:
        pytest.skip("capset failed: cannot drop root's permission override here")
    try:
        yield
    finally:
        assert libc.capset(ctypes.byref(Header(version_3, 0)), saved) == 0


def _expect_os_error(path: str, code: int) -> None:
    """[ZR-GEN-009] An environmental failure is StoreOSError with the system's errno, not a
    format code (FormatError and its subclasses, or StoreNotFoundError)."""
    with pytest.raises(StoreOSError) as info:
        zrecord.open_store(path)
    assert info.value.errno == code, repr(info.value)
    assert not isinstance(info.value, (FormatError, zrecord.errors.StoreNotFoundError))


def test_store_path_failures_other_than_enoent_and_enotdir_are_os_errors(tmp_path):
    """[ZR-GEN-005] [ZR-GEN-009] A loop of links at the path or on the way to it (ELOOP) and a
    name longer than the system allows (ENAMETOOLONG) are errors of the system, not
    not_found."""
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    _expect_os_error(str(tmp_path / "a"), errno.ELOOP)
    _expect_os_error(str(tmp_path / "a" / "store"), errno.ELOOP)
    _expect_os_error(str(tmp_path / ("x" * 300)), errno.ENAMETOOLONG)


def test_store_files_the_reader_may_not_read_are_os_errors_not_corrupt(tmp_path):
    """[ZR-GEN-009] Permission denied (EACCES) on header.zrh, index.zri, a shard file, the
    store directory or a directory on the way to it is StoreOSError naming the file: the store
    is fine, so it is neither corrupt nor missing."""
    files = dense_store((2,), [np.arange(2, dtype="<i4").tobytes()] * 2, shards=2).encode()
    locked: list[tuple[str, str]] = []
    for name in ("header.zrh", "index.zri", "data-001.zrd"):
        path = write(str(tmp_path / name), files)
        os.chmod(os.path.join(path, name), 0)
        locked.append((path, name))
    unreadable = write(str(tmp_path / "dir"), files)
    os.chmod(unreadable, 0o300)  # searchable, not readable: the directory cannot be opened
    parent = tmp_path / "parent"
    parent.mkdir()
    behind = write(str(parent / "s"), files)
    os.chmod(parent, 0o600)  # not searchable: nothing inside it can be reached
    try:
        with _file_permissions_enforced():
            for path, name in locked:
                with pytest.raises(StoreOSError, match=name) as info:
                    zrecord.open_store(path)
                assert info.value.errno == errno.EACCES, repr(info.value)
                assert not isinstance(info.value, FormatError)
            _expect_os_error(unreadable, errno.EACCES)
            _expect_os_error(behind, errno.EACCES)
    finally:
        os.chmod(parent, 0o700)
        os.chmod(unreadable, 0o700)


def test_a_header_above_the_largest_valid_size_is_corrupt_before_it_is_read(tmp_path):
    """[ZR-HDR-022] A sparse header.zrh of 1 GiB with a valid start is refused from its size."""
    path = write(str(tmp_path / "s"), dense_store((2,), [np.arange(2, dtype="<i4").tobytes()]
                                                  ).encode())
    with open(os.path.join(path, "header.zrh"), "r+b") as f:
        f.truncate(1 << 30)
    with pytest.raises(CorruptStoreError, match="largest valid header"):
        zrecord.open_store(path)


def test_a_zstd_dictionary_with_id_0_is_refused_at_create_and_at_open(tmp_path):
    """[ZR-COD-010] RFC 8878 reserves Dictionary_ID 0; libzstd takes it, spec 1.1 does not, so
    the writer refuses to make such a store and the reader to open one."""
    trained = bytearray(zrecord.train_dict(
        [np.frombuffer(f"row {k % 50} of many similar rows".encode(), np.uint8) for k in range(2000)],
        dict_size=1024))
    trained[4:8] = bytes(4)
    with pytest.raises(zrecord.errors.InvalidArgumentError, match="6.3"):
        Ragged.create(str(tmp_path / "w"), np.uint8, 1, codec="zstd_dict", dict_bytes=bytes(trained))
    assert not os.path.exists(tmp_path / "w")


@pytest.mark.parametrize(("parts", "validate"), [(False, "cached"), (True, "full")])
@pytest.mark.parametrize("field", [8, 13, 16])  # an entry's stored_size, a reserved byte, its checksum
def test_verify_reads_index_zri_again_after_an_open_that_judged_it_whole(tmp_path, parts, validate,
                                                                          field):
    """Found by a corruption campaign. Was: a reader that hashed index.zri at open (a store
    without index parts, or one with them opened with validate="full") did not read it again
    in verify(): one changed under it after open passed (a stored_size or reserved byte), or
    its checksum field was blamed on the record's shard (ZR-ERR-007, ZR-SUM-003)."""
    path = tmp_path / "s"
    with Dense.create(path, np.int16, (15,), codec="raw", data_shards=1, index_parts=parts,
                      index_cache=None) as w:
        w.append(np.arange(40 * 15, dtype=np.int16).reshape(40, 15))
    with Dense.open(path, validate=validate, index_cache=None) as ds:
        with open(path / "index.zri", "r+b") as f:
            at = 5 * 24 + field
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ 1]))
        with pytest.raises(zrecord.errors.ZrecordError, match=r"index\.zri"):
            ds.verify()
