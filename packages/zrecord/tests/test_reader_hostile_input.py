"""The native reader given hostile input: symbolic links out of a store, a fork while another
thread gathers, a shard truncated after open, an index that claims more than it holds, shard
bytes that no record covers, and paths long enough to crowd an error message out.

These are the regressions of the hostile-input trial [R1]: each test cites its item and failed
on the reader before that item's fix. Stores are built with the writer or, where one rule must be broken on its own, byte by
byte through tests/fuzz/storemodel.py (which reseals every checksum the change does not
concern). Anything that could kill or hang the process on a regression (SIGBUS, a close that
never returns, gigabytes of memory) runs in a child process with a timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from zrecord import Dense, Ragged
from zrecord.errors import ChecksumError, CorruptStoreError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz"))

import storemodel as sm  # noqa: E402

DTYPE_INT32 = 6
RAW = 0
DENSE = 1


def run_child(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `script` in a fresh interpreter; a signal death shows as a negative returncode."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args],
                          capture_output=True, text=True, timeout=timeout)


def write_files(path: str, files: dict[str, bytes]) -> str:
    sm.write_store(path, files)
    return path


# ---- symbolic links out of a store ([R1] item 4) -----------------------------------------


def _checksums_of(data: bytes, record_bytes: int) -> list[str]:
    """Every XXH64 a reader could compute over `data`: of the whole and of each record-sized
    piece, in the 16-digit hexadecimal form messages used to print."""
    sums = {sm.xxh64(data)}
    for off in range(0, len(data), record_bytes):
        sums.add(sm.xxh64(data[off:off + record_bytes]))
    return [f"{s:016x}" for s in sums]


@pytest.mark.parametrize("name", ["data-000.zrd", "index.zri", "header.zrh"])
@pytest.mark.parametrize("same_size", [False, True])
def test_symlink_out_of_the_store_is_refused_without_disclosing_the_target(
        tmp_path, name, same_size):
    """[R1] item 4: a store file that is a symbolic link to a file outside the store was
    followed: open errors printed the target's size, and checksum errors the XXH64 of its
    bytes, so a planted store and `zrecord verify --json` read a file back byte by byte. Store
    files are now opened relative to the store directory without following links
    ([ZR-GEN-004]); the link is refused with CorruptStoreError at open, and the message names
    neither the target's size nor any checksum of its bytes."""
    path = str(tmp_path / "s")
    with Dense.create(path, np.uint8, (64,), codec="raw", data_shards=1) as w:
        w.append(np.arange(64 * 8, dtype=np.uint8).reshape(8, 64))
    own = os.path.getsize(os.path.join(path, name))
    # The secret: same size as the file it replaces (so size checks pass), or an odd size.
    size = own if same_size else 7919
    secret = bytes((i * 131 + 7) % 251 for i in range(size))
    outside = tmp_path / "secret.bin"
    outside.write_bytes(secret)
    os.remove(os.path.join(path, name))
    os.symlink(outside, os.path.join(path, name))
    with pytest.raises(CorruptStoreError) as info:
        with Dense.open(path) as ds:
            ds.verify()
            ds[:]
    message = str(info.value)
    assert name in message and "symbolic link" in message
    if not same_size:
        assert str(size) not in message
    for digest in _checksums_of(secret, 64):
        assert digest not in message.lower()


def test_symlinked_store_directory_opens(tmp_path):
    """[R1] item 4: the store path itself may be a symbolic link to the store directory
    ([ZR-GEN-004]); only the files inside must not be links."""
    real = str(tmp_path / "real")
    with Ragged.create(real, np.int32, 1, codec="raw") as w:
        w.append([np.arange(n, dtype=np.int32) for n in (3, 0, 5)])
    link = str(tmp_path / "link")
    os.symlink(real, link)
    with Ragged.open(link) as rs:
        rs.verify()
        assert [r.tolist() for r in rs[:]] == [[0, 1, 2], [], [0, 1, 2, 3, 4]]


# ---- fork while another thread gathers ([R1] item 5) ---------------------------------------


def _wait_child(pid: int, timeout: float) -> int:
    """The child's wait status, or kill it and fail the test when it outlives `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"forked child {pid} did not exit within {timeout} s: its close() hung")


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_fork_during_gather_child_closes(tmp_path, codec):
    """[R1] item 5: a process forked while another thread was inside a gather gave the child
    a copy of the reader whose count of calls in flight included that thread, which does not
    exist in the child; the child's close() (or its finalizer at exit) then waited forever.
    20 children are forked under a thread that gathers in a loop (small records: the mapping
    path, and zstd: pooled decoders); each must read, close and exit."""
    path = str(tmp_path / "s")
    rng = np.random.default_rng(5)
    n = 20_000
    data = rng.integers(0, 4, size=(n, 256), dtype=np.uint8)
    with Dense.create(path, np.uint8, (256,), codec=codec, data_shards=2) as w:
        w.append(data)
    ds = Dense.open(path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def gather_loop() -> None:
        order = np.random.default_rng(7).permutation(n)
        try:
            while not stop.is_set():
                got = ds[order]
                assert np.array_equal(got[:4], data[order[:4]])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=gather_loop)
    thread.start()
    try:
        for k in range(20):
            time.sleep(0.005 * (k % 4))
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    if not np.array_equal(ds[np.arange(k, k + 64)], data[k:k + 64]):
                        code = 2
                    ds.close()
                except BaseException:  # noqa: BLE001 - the exit status says it
                    code = 3
                os._exit(code)
            status = _wait_child(pid, 30)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (k, status)
    finally:
        stop.set()
        thread.join(60)
        ds.close()
    assert not errors, errors


@pytest.mark.slow
def test_fork_while_the_batch_pool_lock_is_held_child_closes(tmp_path):
    """[R1] item 5, the Python half: a thread that held the store's batch-pool lock at the
    moment of fork left it locked in the child, where `close()` waited for it forever. The
    child now replaces the locks of its pools (os.register_at_fork). The parent's thread is
    stood in for by this thread holding the lock across the fork."""
    path = str(tmp_path / "s")
    with Dense.create(path, np.uint8, (1024,), codec="raw") as w:
        w.append(np.ones((2048, 1024), np.uint8))
    ds = Dense.open(path)
    ds[:]  # a batch of 2 MiB goes through the pool
    with ds._pool._lock:
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                if int(ds[:].sum()) != 2048 * 1024:
                    code = 2
                ds.close()
            except BaseException:  # noqa: BLE001 - the exit status says it
                code = 3
            os._exit(code)
    status = _wait_child(pid, 30)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    ds.close()


# ---- a shard truncated after open, on the mapping path ([R1] item 6) ----------------------


TRUNCATE_SCRIPT = """
    import os, sys
    import numpy as np
    import zrecord
    path, how = sys.argv[1], sys.argv[2]
    store = zrecord.open_store(path)
    os.truncate(os.path.join(path, "data-000.zrd"), 4096)
    try:
        if how == "verify":
            store.verify()
        else:
            store[np.arange(len(store))]
    except zrecord.ZrecordError as exc:
        print(type(exc).__name__, exc.record, exc.shard)
        print(exc)
    else:
        print("no error")
    # The reader stays usable: the records before the cut still read.
    store[0]
    store.close()
"""


@pytest.mark.parametrize("kind,codec,how", [("dense", "raw", "gather"),
                                            ("ragged", "raw", "gather"),
                                            ("dense", "zstd", "gather"),
                                            ("dense", "raw", "verify"),
                                            ("ragged", "zstd", "verify")])
def test_shard_truncated_after_open_is_corrupt_store_error_not_sigbus(
        tmp_path, kind, codec, how):
    """[R1] item 6: records under 32 KiB are copied from the shard's mapping, and a shard cut
    short after open killed the process with SIGBUS there. The copy now runs under a SIGBUS
    guard: the gather (or verify) raises CorruptStoreError naming the file and the record,
    and the process lives on. Run in a child process, so a regression shows as a signal."""
    path = str(tmp_path / "s")
    rng = np.random.default_rng(6)
    # Incompressible records of 2 KiB, so that zstd frames are as large and 4096 bytes hold
    # the first records only; record 2 starts on a page past the new end of the file.
    records = rng.integers(0, 256, size=(16, 2048), dtype=np.uint8)
    if kind == "dense":
        with Dense.create(path, np.uint8, (2048,), codec=codec, data_shards=1) as w:
            w.append(records)
    else:
        with Ragged.create(path, np.uint8, 1, codec=codec, data_shards=1) as w:
            w.append(list(records))
    out = run_child(TRUNCATE_SCRIPT, path, how)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr[-3000:])
    first, message = out.stdout.splitlines()[:2]
    assert first.split()[0] == "CorruptStoreError", out.stdout
    assert first.split()[2] == "0", out.stdout
    assert "data-000.zrd" in message and "truncated" in message
    assert f"record {first.split()[1]}" in message
    assert int(first.split()[1]) >= 1


# ---- open allocates what the index claims ([R1] item 8) ------------------------------------


SPARSE_INDEX_SCRIPT = """
    import sys
    import zrecord
    try:
        zrecord.open_store(sys.argv[1])
    except zrecord.ZrecordError as exc:
        print(type(exc).__name__)
    else:
        print("opened")
    with open("/proc/self/status") as f:
        print([line.split()[1] for line in f if line.startswith("VmHWM:")][0])
"""


@pytest.mark.slow  # 9 s of the kernel's memory accounting; not the interpreter's concern
def test_sparse_index_does_not_cost_its_claimed_size_at_open(tmp_path):
    """[R1] item 8: open read index.zri into memory as large as the file claimed, before its
    checksum could say anything: a sparse 3 GiB index (no byte on disk) with a header that
    matches it cost 3 GiB of RSS. The index is now streamed through its checksum in fixed
    chunks before anything is allocated for it; peak RSS stays far below the claimed size."""
    records = [np.arange(2, dtype="<i4").tobytes()] * 3
    store = sm.Store(DENSE, DTYPE_INT32, 1, RAW, 1, [2], b"",
                     [sm.Record(0, r) for r in records])
    files = store.encode()
    claimed = 3 << 30
    header = bytearray(files["header.zrh"])
    sm.put(header, 24, 8, claimed // 24)  # record_count
    sm.put(header, 56, 8, claimed)  # index_size
    sm.reseal_header(header)
    files["header.zrh"] = bytes(header)
    path = write_files(str(tmp_path / "s"), files)
    os.truncate(os.path.join(path, "index.zri"), claimed)
    out = run_child(SPARSE_INDEX_SCRIPT, path)
    assert out.returncode == 0, out.stderr[-3000:]
    outcome, hwm_kib = out.stdout.split()
    assert outcome in ("ChecksumError", "CorruptStoreError"), out.stdout
    assert int(hwm_kib) < 256 * 1024, f"peak RSS {int(hwm_kib) >> 10} MiB"


# ---- verify proves every shard byte is covered ([R1] item 10) -------------------------------


def overlapping_store(tmp_path, name: str) -> str:
    """A raw Dense store of three 8-byte records in one 24-byte shard whose record 1 is moved
    to overlap record 0: entries [0, 8), [4, 12), [16, 24). Every checksum matches its range
    and the sizes add up to the shard, but bytes [12, 16) belong to no record."""
    shard = bytes(range(24))
    ranges = [(0, 8), (4, 12), (16, 24)]
    index = bytearray()
    for off, end in ranges:
        entry = bytearray(24)
        sm.put(entry, 0, 8, off)
        sm.put(entry, 8, 4, end - off)
        sm.put(entry, 16, 8, sm.xxh64(shard[off:end]))
        index += entry
    model = sm.Store(DENSE, DTYPE_INT32, 1, RAW, 1, [2], b"", [])
    files = {"data-000.zrd": shard, "index.zri": bytes(index),
             "header.zrh": model.encode_header(3, 24, [24], bytes(index))}
    return write_files(str(tmp_path / name), files)


def test_verify_catches_bytes_no_record_covers(tmp_path):
    """[R1] item 10: with two overlapping entries whose checksums still add up, shard bytes
    [12, 16) were covered by no checksum, and verify said OK after they changed. verify() (and
    `zrecord verify`) now checks that every shard byte lies in exactly one record's stored
    range ([ZR-IDX-006], [ZR-DAT-001]) and names the shard and the byte ranges that do not."""
    path = overlapping_store(tmp_path, "s")
    with open(os.path.join(path, "data-000.zrd"), "r+b") as f:
        f.seek(13)
        f.write(b"\xff")
    with Dense.open(path) as ds:
        for i in range(3):
            ds[i]  # every record still reads: its own bytes are intact
        with pytest.raises(CorruptStoreError) as info:
            ds.verify()
        message = str(info.value)
        assert "data-000.zrd" in message
        assert "[12, 16)" in message and "[4, 8)" in message
        assert info.value.shard == 0
        # Any range of records: the layout is a property of the whole store.
        with pytest.raises(CorruptStoreError, match=r"\[12, 16\)"):
            ds.verify(2, 3)

    from zrecord.cli import main

    assert main(["verify", path, "--json", "-q"]) == 1


def test_verify_accepts_an_exact_layout_out_of_record_order(tmp_path):
    """[R1] item 10: writers may lay records out in any order (spec §5); a shard covered
    exactly, though not in record order, verifies. A gap between such records is found."""
    shard = bytes(range(24))
    model = sm.Store(DENSE, DTYPE_INT32, 1, RAW, 1, [2], b"", [])

    def store(name: str, ranges: list[tuple[int, int]], shard_bytes: bytes) -> str:
        index = bytearray()
        for off, end in ranges:
            entry = bytearray(24)
            sm.put(entry, 0, 8, off)
            sm.put(entry, 8, 4, end - off)
            sm.put(entry, 16, 8, sm.xxh64(shard_bytes[off:end]))
            index += entry
        files = {"data-000.zrd": shard_bytes, "index.zri": bytes(index),
                 "header.zrh": model.encode_header(len(ranges), 8 * len(ranges),
                                                   [len(shard_bytes)], bytes(index))}
        return write_files(str(tmp_path / name), files)

    with Dense.open(store("exact", [(16, 24), (0, 8), (8, 16)], shard)) as ds:
        ds.verify()
    # Records [16, 24) and [0, 8) twice: the sizes add up, [8, 16) is no record's.
    with Dense.open(store("gap", [(16, 24), (0, 8), (0, 8)], shard)) as ds:
        with pytest.raises(CorruptStoreError, match=r"\[8, 16\)"):
            ds.verify()


# ---- long paths in error messages ([R1] item 17) --------------------------------------------


def _deep_dir(tmp_path, total: int) -> str:
    """A directory whose path is about `total` characters long, made of nested long names."""
    path = str(tmp_path)
    while len(path) < total - 210:
        path = os.path.join(path, "d" * 200)
    path = os.path.join(path, "e" * max(1, total - len(path) - 1))
    os.makedirs(path)
    return path


@pytest.mark.parametrize("length", [1000, 3900])
def test_long_path_message_keeps_the_cause_and_the_record(tmp_path, length):
    """[R1] item 17: native messages were cut at 511 bytes, so with a long store path only the
    path survived. The buffer now holds 4096 bytes, and a message that still does not fit loses
    the middle of its path, never the cause, the record or the file."""
    short = str(tmp_path / "s")
    with Dense.create(short, np.uint8, (16,), codec="raw", data_shards=1) as w:
        w.append(np.zeros((3, 16), np.uint8))
    with open(os.path.join(short, "data-000.zrd"), "r+b") as f:
        f.seek(16 + 5)
        f.write(b"\x01")
    deep = os.path.join(_deep_dir(tmp_path, length), "s")
    os.rename(short, deep)
    assert len(deep) >= length
    with Dense.open(deep) as ds:
        with pytest.raises(ChecksumError) as info:
            ds[1]
    message = str(info.value)
    assert "record 1 is corrupt" in message, message[-400:]
    assert "data-000.zrd" in message and "ZR-SUM-001" in message
    assert len(message.encode()) < 4096
    # The path keeps its start and its end.
    assert deep[:40] in message or "..." in message
    assert message.startswith("store '" + deep[:20])
