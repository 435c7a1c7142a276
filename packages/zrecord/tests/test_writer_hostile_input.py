"""The writer given hostile input: sources that refill one buffer for every record, live and
planted temporaries beside the path, a path inside a published store or with a NUL byte, and
unaligned arrays.

These are the writer regressions of the hostile-input trial [R1] (items 1, 2, 3, 9, 13, 14):
each test cites its item and failed on the code before the fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zrecord
from zrecord import Dense, Ragged, _native
from zrecord.errors import ImmutableStoreError

SMALL, LARGE = 7, 40_000  # int32 elements: 28 bytes, 160 KB (both sides of the copy threshold)


def refilled_buffer(n_records: int, size: int):
    """A decoder-style generator: one buffer, refilled and yielded for every record."""
    buf = np.empty(size, np.int32)
    for i in range(n_records):
        buf[:] = i
        yield buf


def ring_of_views(n_records: int, size: int, ring: int = 3):
    """Views into a ring of slots of one array, each slot refilled when its turn comes again."""
    big = np.empty(ring * size, np.int32)
    for i in range(n_records):
        slot = big[(i % ring) * size:(i % ring + 1) * size]
        slot[:] = i
        yield slot


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("size", [SMALL, LARGE])
@pytest.mark.parametrize("source", [refilled_buffer, ring_of_views])
def test_generator_reusing_a_buffer_stores_each_record_as_yielded(tmp_path, codec, size,
                                                                         source):
    """[R1] item 2: every record is stored as it was when yielded, not as the buffer ends up."""
    n = 50
    path = str(tmp_path / "s")
    with Ragged.create(path, np.int32, 1, codec=codec) as w:
        w.append(source(n, size))
    with Ragged.open(path) as rs:
        got = [int(r[0]) for r in rs]
        assert got == list(range(n))
        assert all((r == i).all() and r.shape == (size,) for i, r in enumerate(rs[:]))


def test_only_records_that_can_change_are_copied():
    """[R1] item 2: records are held by reference when nothing else can reach their memory."""

    def collected(source, trusted=False):
        chunk = _native.RaggedChunk(1)
        chunk.trusted = trusted
        _native.ragged_collect(iter(source), chunk, "i", 4, 1 << 20, 1 << 40, None, 0)
        return chunk.count, chunk.copied

    def fresh(size):
        for i in range(5):
            yield np.full(size, i, np.int32)

    def from_bytes():
        for i in range(5):
            yield np.frombuffer(np.full(LARGE, i, np.int32).tobytes(), np.int32)

    def held_by_generator():
        for i in range(5):
            x = np.full(LARGE, i, np.int32)
            yield x.reshape(LARGE)  # a view of `x`, which the generator still holds

    assert collected(fresh(LARGE)) == (5, 0)
    assert collected(from_bytes()) == (5, 0)
    assert collected([np.zeros(LARGE, np.int32)] * 5, trusted=True) == (5, 0)
    assert collected(fresh(SMALL)) == (5, 5)  # small records: copying is cheaper than checking
    assert collected(refilled_buffer(5, LARGE)) == (5, 5)
    assert collected(ring_of_views(5, LARGE)) == (5, 5)
    assert collected(held_by_generator()) == (5, 5)


def test_read_only_memory_maps_are_not_copied(tmp_path):
    """[R1] item 2: slices of a read-only memory map stay zero-copy (big sources stay cheap)."""
    np.save(tmp_path / "a.npy", np.arange(5 * LARGE, dtype=np.int32))
    ro = np.load(tmp_path / "a.npy", mmap_mode="r")
    rw = np.load(tmp_path / "a.npy", mmap_mode="r+")
    for source, copies in ((ro, 0), (rw, 5)):
        chunk = _native.RaggedChunk(1)
        parts = (source[i * LARGE:(i + 1) * LARGE] for i in range(5))
        _native.ragged_collect(parts, chunk, "i", 4, 1 << 20, 1 << 40, None, 0)
        assert (chunk.count, chunk.copied) == (5, copies)
        # Copied records of a map stay listed, so the writer releases the consumed pages.
        assert len(chunk.arrays) == 5


HOLD_LOCK = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.read()
""")


def test_live_writer_under_a_foreign_pid_keeps_its_temporary(tmp_path):
    """[R1] item 3, [ZR-PUB-006]: liveness is the writer's lock, not a PID, so a writer in another PID
    namespace (here: a temporary named with a PID that does not exist in this one, whose lock
    a live process holds) keeps its temporary directory; once it dies, the next create of the
    same name removes it."""
    path = tmp_path / "s"
    foreign = tmp_path / ".s.zr-tmp-4000000000-00000000deadbeef"
    foreign.mkdir()
    (foreign / "data-000.zrd").write_bytes(b"in progress")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, f"{foreign}.lock"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with Dense.create(path, np.uint8, (1,), codec="raw") as w:
            w.append(np.zeros((1, 1), np.uint8))
        assert (foreign / "data-000.zrd").read_bytes() == b"in progress"
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    with Dense.create(tmp_path / "t", np.uint8, (1,), codec="raw"):
        pass  # another name: the foreign temporary is not its business
    assert foreign.exists()
    os.rename(path, tmp_path / "old")
    with Dense.create(path, np.uint8, (1,), codec="raw"):
        pass
    assert not foreign.exists() and not os.path.exists(f"{foreign}.lock")


def test_a_writer_keeps_its_temporary_while_another_writer_starts(tmp_path):
    """[R1] item 3: a second create of the same path leaves the first writer's files alone, so
    the first still publishes (and the second then finds the path taken)."""
    path = str(tmp_path / "s")
    first = Dense.create(path, np.int64, (2,), codec="raw")
    first.append(np.arange(4, dtype=np.int64).reshape(2, 2))
    second = Dense.create(path, np.int64, (2,), codec="raw")
    first.close()
    with Dense.open(path) as ds:
        assert ds[1].tolist() == [2, 3]
    with pytest.raises(zrecord.StoreExistsError):
        second.close()


@pytest.mark.parametrize("planted", ["dir", "file", "symlink"])
def test_malformed_temporaries_do_not_block_create(tmp_path, planted):
    """[R1] item 9: a planted `.NAME.zr-tmp-<huge number>-x` (a directory, a file or a link,
    with or without a lock file) is never parsed: create works and leaves it alone."""
    bogus = tmp_path / ".s.zr-tmp-99999999999999999999-x"
    if planted == "dir":
        bogus.mkdir()
    elif planted == "file":
        bogus.write_bytes(b"")
    else:
        os.symlink("/etc", bogus)
    with Dense.create(tmp_path / "s", np.uint8, (1,), codec="raw") as w:
        w.append(np.ones((1, 1), np.uint8))
    assert os.path.lexists(bogus)
    with Dense.open(tmp_path / "s") as ds:
        assert ds[0].tolist() == [1]


def test_a_lock_file_beside_a_planted_link_never_removes_its_target(tmp_path):
    """[R1] item 9: a free lock beside a symbolic link named like a temporary removes the link
    only, never what it points to."""
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep").write_bytes(b"keep")
    link = tmp_path / ".s.zr-tmp-1"
    os.symlink(target, link)
    (tmp_path / ".s.zr-tmp-1.lock").write_bytes(b"")
    with Dense.create(tmp_path / "s", np.uint8, (1,), codec="raw"):
        pass
    assert (target / "keep").read_bytes() == b"keep"
    assert not os.path.lexists(link)


@pytest.mark.parametrize("inside", ["x", "a/b/x"])
def test_create_inside_a_published_store_is_refused(tmp_path, inside):
    """[R1] item 1: nothing is created inside a published (immutable) store, at any depth."""
    store = tmp_path / "store"
    with Dense.create(store, np.uint8, (1,), codec="raw") as w:
        w.append(np.ones((1, 1), np.uint8))
    before = sorted(os.listdir(store))
    for kind in (Dense, Ragged):
        with pytest.raises(ImmutableStoreError, match="inside the published store") as info:
            if kind is Dense:
                Dense.create(store / inside, np.uint8, (1,), codec="raw")
            else:
                Ragged.create(store / inside, np.uint8, 1, codec="raw")
        assert isinstance(info.value, PermissionError)
    assert sorted(os.listdir(store)) == before
    # Through a symbolic link to the store, too.
    os.symlink(store, tmp_path / "alias")
    with pytest.raises(ImmutableStoreError):
        Dense.create(tmp_path / "alias" / inside, np.uint8, (1,), codec="raw")
    assert sorted(os.listdir(store)) == before


def test_an_embedded_nul_in_a_path_is_refused(tmp_path):
    """[R1] item 13: `path + "\\0junk"` raises ValueError (as os does) instead of opening or
    creating `path`."""
    path = str(tmp_path / "s")
    with Dense.create(path, np.uint8, (1,), codec="raw") as w:
        w.append(np.ones((1, 1), np.uint8))
    for call in (lambda: Dense.open(path + "\0junk"), lambda: zrecord.open_store(path + "\0x"),
                 lambda: Dense.create(str(tmp_path / "t") + "\0x", np.uint8, (1,), codec="raw"),
                 lambda: Ragged.open(os.fsencode(path) + b"\0x")):
        with pytest.raises(ValueError, match="null byte"):
            call()
    assert sorted(os.listdir(tmp_path)) == ["s"]


def test_unaligned_contiguous_dense_append_is_copied(tmp_path):
    """[R1] item 14: an unaligned C-contiguous array is appended like a strided one."""
    raw = np.arange(24, dtype=np.float64)
    unaligned = np.frombuffer(b"\0" + raw.tobytes(), dtype=np.float64, offset=1).reshape(8, 3)
    assert unaligned.flags.c_contiguous and not unaligned.flags.aligned
    path = tmp_path / "s"
    with Dense.create(path, np.float64, (3,), codec="raw") as w:
        w.append(unaligned)
    with Dense.open(path) as ds:
        np.testing.assert_array_equal(ds[:], raw.reshape(8, 3))
