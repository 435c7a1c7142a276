"""Durable writes: the order of flushes that makes publication atomic, and the direct-I/O path.

A durable writer ([P1], decision record 0001 section 18) writes the first bytes of a store
through the page cache (its page-cache budget, 256 MiB by default) and the rest with O_DIRECT
from aligned buffers where the file system allows, keeps each shard's partial last block for
later, and publishes in this order ([ZR-PUB-002], [ZR-PUB-003]): every shard (partial block written
first) and the index flushed; then header.zrh created, written and flushed together with the
temporary directory; then the rename; then the parent directory flushed. The first tests read
that order from the system calls of real writes (strace); the others check that every way of
splitting appends across block boundaries stores exactly the records given.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import zrecord
from zrecord import Dense, Ragged

# Traced processes and direct I/O exercise the kernel and the native core, not the interpreter:
# run once, in the zrecord session, not once per CPython.
pytestmark = pytest.mark.slow

WRITER = textwrap.dedent("""
    import sys, numpy as np
    from zrecord import Dense, Ragged
    path, kind, codec, sync = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    budget = int(sys.argv[5]) if len(sys.argv) > 5 else None  # the page-cache budget
    rng = np.random.default_rng(5)
    # index_cache=None: the trace is of the write alone, not of the open that would write the
    # compact index to the cache folder after it.
    if kind == "dense":
        data = rng.integers(0, 255, (700, 3000), dtype=np.uint8)
        with Dense.create(path, np.uint8, (3000,), codec=codec, data_shards=3, sync=sync,
                          index_cache=None) as w:
            if budget is not None:
                w._handle.set_page_cache_bytes(budget)
            w.append(data[:3])          # a few KB: through the page cache
            w.append(data[3:600])       # MBs: whole blocks with O_DIRECT, past the budget
            w.append(data[600:])
    elif kind == "small":  # 3,000 appends of one 4 KB record each: 12 MB, under the budget
        rec = np.arange(1000, dtype=np.int32)
        with Ragged.create(path, np.int32, 1, codec=codec, data_shards=1, sync=sync,
                           index_cache=None) as w:
            for _ in range(3000):
                w.append([rec])
    else:
        recs = [rng.integers(0, 1000, rng.integers(0, 20000), dtype=np.int32) for _ in range(400)]
        with Ragged.create(path, np.int32, 1, codec=codec, data_shards=2, sync=sync,
                           index_cache=None) as w:
            if budget is not None:
                w._handle.set_page_cache_bytes(budget)
            w.append(recs[:5])
            w.append(recs[5:])
""")

CALLS = ("openat,close,fsync,fdatasync,rename,renameat,renameat2,pwrite64,pwritev,fcntl,"
         "sync_file_range")


def trace(tmp_path, kind: str, codec: str, sync: bool = True,
          budget: int | None = None) -> tuple[list[str], str]:
    """The system calls of one write, in the order strace saw them start or finish; `budget`
    sets the writer's page-cache budget (default: the library's)."""
    out = tmp_path / "trace.txt"
    path = str(tmp_path / "store")
    extra = [] if budget is None else [str(budget)]
    subprocess.run(["strace", "-f", "-qq", "-e", f"trace={CALLS}", "-o", str(out),
                    sys.executable, "-c", WRITER, path, kind, codec, "1" if sync else "0", *extra],
                   check=True, timeout=300)
    with zrecord.open_store(path) as store:
        store.verify()
    return out.read_text().splitlines(), path


class Events:
    """Each call's start and end line in the trace, with file names resolved from descriptors."""

    def __init__(self, lines: list[str]) -> None:
        self.calls: list[dict] = []
        pending: dict[tuple[str, str], dict] = {}
        names: dict[str, str] = {}
        for i, line in enumerate(lines):
            m = re.match(r"(\d+)\s+(.*)$", line)
            if not m:
                continue
            pid, rest = m.groups()
            resumed = re.match(r"<\.\.\. (\w+) resumed>(.*)$", rest)
            if resumed:
                call = pending.pop((pid, resumed.group(1)))
                call["end"] = i
                self._finish(call, call["text"] + resumed.group(2), names)
                continue
            c = re.match(r"(\w+)\((.*)$", rest)
            if not c:
                continue
            call = {"name": c.group(1), "start": i, "end": i, "text": rest}
            self.calls.append(call)
            if rest.endswith("<unfinished ...>"):
                call["text"] = rest[: -len("<unfinished ...>")].rstrip()
                pending[(pid, call["name"])] = call
                # A descriptor's name must be known when the call starts.
                self._resolve(call, names)
            else:
                self._finish(call, rest, names)

    @staticmethod
    def _resolve(call: dict, names: dict[str, str]) -> None:
        fd = re.match(r"\w+\((-?\d+)", call["text"])
        if fd and call["name"] != "openat":
            call["file"] = names.get(fd.group(1), "?")

    def _finish(self, call: dict, text: str, names: dict[str, str]) -> None:
        call["text"] = text
        if "file" not in call:
            self._resolve(call, names)
        if call["name"] == "openat":
            # Store files are opened relative to their directory's descriptor.
            m = re.match(r'openat\(([^,]+), "([^"]+)".*= (\d+)', text)
            if m:
                where, name, fd = m.groups()
                call["file"] = name if where == "AT_FDCWD" else os.path.join(
                    names.get(where, "?"), name)
                names[fd] = call["file"]
        elif call["name"] == "close":
            fd = re.match(r"close\((\d+)", text)
            if fd:
                names.pop(fd.group(1), None)

    def find(self, name: str, file_re: str) -> list[dict]:
        return [c for c in self.calls if c["name"] == name and re.search(file_re, c.get("file", ""))]


@pytest.fixture(scope="module")
def strace_available():
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    probe = subprocess.run(["strace", "-f", "-qq", "-e", "trace=getpid", sys.executable, "-c", ""],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here: {probe.stderr[-200:]!r}")


@pytest.mark.parametrize("budget", [None, 0], ids=["page-cache-first", "direct"])
@pytest.mark.parametrize("kind,codec", [("dense", "raw"), ("ragged", "raw"), ("dense", "zstd"),
                                        ("ragged", "zstd")])
def test_publish_flushes_data_then_header_then_rename_then_parent(tmp_path, strace_available, kind,
                                                                  codec, budget):
    """[ZR-PUB-002] [ZR-PUB-003] data and index durable before the header exists; the header and
    the temporary directory durable before the rename; the parent flushed after it. Whether the
    shard bytes went through the page cache (a small store, the default) or around it."""
    ev = Events(trace(tmp_path, kind, codec, budget=budget)[0])
    shards = r"/data-\d{3}\.zrd$"
    header_open = ev.find("openat", r"/header\.zrh$")
    renames = [c for c in ev.calls if c["name"].startswith("rename")]
    assert len(header_open) == 1 and len(renames) == 1
    created, renamed = header_open[0]["start"], renames[0]["start"]

    data_syncs = ev.find("fsync", shards) + ev.find("fdatasync", shards)
    index_syncs = ev.find("fsync", r"/index\.zri$") + ev.find("fdatasync", r"/index\.zri$")
    shard_count = 3 if kind == "dense" else 2
    assert len({c["file"] for c in data_syncs}) == shard_count and index_syncs
    # Every flush of a shard or the index ends before the header file is created...
    assert max(c["end"] for c in data_syncs + index_syncs) < created
    # ...and every write to a shard (partial last blocks included) ends before its flush.
    for sync in data_syncs:
        writes = [c for c in ev.calls if c["name"].startswith("pwrite")
                  and c.get("file") == sync["file"]]
        assert writes and max(c["end"] for c in writes) < sync["start"], sync["file"]

    header_syncs = ev.find("fsync", r"/header\.zrh$") + ev.find("fdatasync", r"/header\.zrh$")
    tmp_dir = re.escape(os.path.dirname(header_open[0]["file"])) + "$"
    dir_syncs = ev.find("fsync", tmp_dir)
    assert header_syncs and dir_syncs
    assert created < min(c["start"] for c in header_syncs + dir_syncs)
    assert max(c["end"] for c in header_syncs + dir_syncs) < renamed

    parent = re.escape(str(tmp_path)) + "$"
    parent_syncs = [c for c in ev.find("fsync", parent) if c["start"] > renamed]
    assert parent_syncs, "the parent directory is not flushed after the rename"


def direct_writes(lines: list[str]) -> list[re.Match]:
    """The shard writes of a trace made while their descriptor had O_DIRECT set: (descriptor,
    size, offset, result) of each, in the order they started."""
    fd_direct: dict[str, bool] = {}
    found = []
    for call in Events(lines).calls:
        m = re.match(r"fcntl\((\d+), F_SETFL, (.*)\)", call["text"])
        if m:
            fd_direct[m.group(1)] = "O_DIRECT" in m.group(2)
            continue
        m = re.match(r"pwrite64\((\d+), .*, (\d+), (\d+)\)\s*=\s*(\d+)$", call["text"])
        if m and fd_direct.get(m.group(1)):
            found.append(m)
    return found


def test_durable_writer_writes_around_the_page_cache(tmp_path, strace_available):
    """A durable writer on a disk file system writes whole blocks with O_DIRECT once its
    page-cache budget is spent (0 here); a writer with sync=False never flushes and never asks
    for O_DIRECT."""
    if zrecord_fs_is_memory(tmp_path):
        pytest.skip("the test folder is on a memory file system")
    lines, _ = trace(tmp_path, "dense", "raw", budget=0)
    direct = [line for line in lines if "F_SETFL" in line and "O_DIRECT" in line]
    assert direct, "no shard was switched to O_DIRECT"
    # The big append goes out in block-aligned pieces at block-aligned offsets.
    aligned = [m for m in direct_writes(lines) if m.group(2) == m.group(4)
               and int(m.group(2)) % 4096 == 0 and int(m.group(3)) % 4096 == 0]
    assert len(aligned) >= 3, direct_writes(lines)

    shutil.rmtree(tmp_path / "store")
    lines, _ = trace(tmp_path, "dense", "raw", sync=False)
    assert not [line for line in lines if "O_DIRECT" in line and "F_SETFL" in line]
    assert not Events(lines).find("fsync", r".")


def test_small_durable_store_is_written_through_the_page_cache(tmp_path, strace_available):
    """Within its page-cache budget (256 MiB by default) a durable writer never asks for
    O_DIRECT: it writes through the page cache and leaves the rest to publish's flushes."""
    if zrecord_fs_is_memory(tmp_path):
        pytest.skip("the test folder is on a memory file system")
    lines, _ = trace(tmp_path, "dense", "raw")
    assert not [line for line in lines if "F_SETFL" in line and "O_DIRECT" in line]
    ev = Events(lines)
    shards = r"/data-\d{3}\.zrd$"
    assert len({c["file"] for c in ev.find("fsync", shards)}) == 3


def test_writeback_is_started_behind_the_writes_a_mebibyte_at_a_time(tmp_path, strace_available):
    """A durable writer starts writing back what it wrote once a file has 1 MiB or more of
    bytes not yet started (sync_file_range), whatever the size of its writes: 3,000 appends of
    one 4 KB record made two such calls each (the shard's and the index's), 6,000 in all, which
    sent the disk a few KiB each and the index's partial page again each time; now 12 MB make
    at most 12 calls, each over at least 1 MiB, and the store's bytes are all started or
    flushed by publish."""
    if zrecord_fs_is_memory(tmp_path):
        pytest.skip("the test folder is on a memory file system")
    lines, path = trace(tmp_path, "small", "raw")
    ev = Events(lines)
    hints = [re.match(r"sync_file_range\(\d+, (\d+), (\d+),", c["text"]) for c in
             ev.find("sync_file_range", r".")]
    assert 1 <= len(hints) <= 12, len(hints)
    assert all(m is not None and int(m.group(2)) >= 1 << 20 for m in hints), hints
    # One shard: its hints cover its bytes from the start, back to back.
    starts = [int(m.group(1)) for m in hints]
    ends = [int(m.group(1)) + int(m.group(2)) for m in hints]
    assert starts[0] == 0 and starts[1:] == ends[:-1]
    assert os.path.getsize(os.path.join(path, "data-000.zrd")) - ends[-1] < 1 << 20
    assert len({c["file"] for c in ev.find("fsync", r"/data-\d{3}\.zrd$")}) == 1


def test_spent_budget_turns_the_writes_direct_mid_store(tmp_path, strace_available):
    """A store larger than the page-cache budget starts through the page cache and goes on with
    O_DIRECT on every shard once its share of the budget is spent; the store verifies."""
    if zrecord_fs_is_memory(tmp_path):
        pytest.skip("the test folder is on a memory file system")
    lines, _ = trace(tmp_path, "ragged", "raw", budget=4 << 20)  # ~16 MB over 2 shards
    fd_of = {}
    for call in Events(lines).calls:
        if call["name"] == "openat" and re.search(r"/data-\d{3}\.zrd$", call.get("file", "")):
            fd_of[re.search(r"= (\d+)$", call["text"]).group(1)] = call["file"]
    direct = direct_writes(lines)
    assert {fd_of[m.group(1)] for m in direct} == set(fd_of.values()), "a shard never went direct"
    # Before its first direct write, each shard took at least its 2 MiB share buffered.
    buffered = dict.fromkeys(fd_of, 0)
    went_direct: set[str] = set()
    for call in Events(lines).calls:
        m = re.match(r"fcntl\((\d+), F_SETFL, .*O_DIRECT", call["text"])
        if m:
            went_direct.add(m.group(1))
        m = re.match(r"pwrite64\((\d+), .*, (\d+), \d+\)\s*=", call["text"])
        if m and m.group(1) in fd_of and m.group(1) not in went_direct:
            buffered[m.group(1)] += int(m.group(2))
    assert all(n >= 2 << 20 for n in buffered.values()), buffered


def test_memory_file_system_is_written_through_the_page_cache(tmp_path, strace_available):
    """On tmpfs, where nothing reaches a device, a durable writer does not copy into aligned
    buffers for O_DIRECT; it still flushes in the same order."""
    shm = "/dev/shm"
    if not os.path.isdir(shm) or not zrecord_fs_is_memory(shm) or not os.access(shm, os.W_OK):
        pytest.skip("no writable tmpfs at /dev/shm")
    folder = tmp_path / "shm"
    os.symlink(shm, folder)  # keeps the trace's paths under tmp_path/shm, the store on tmpfs
    store = folder / f"zrecord-durability-{os.getpid()}"
    try:
        out = tmp_path / "trace.txt"
        subprocess.run(["strace", "-f", "-qq", "-e", f"trace={CALLS}", "-o", str(out),
                        sys.executable, "-c", WRITER, str(store), "dense", "raw", "1", "0"],
                       check=True, timeout=300)
        lines = out.read_text().splitlines()
        assert not [line for line in lines if "F_SETFL" in line and "O_DIRECT" in line]
        assert Events(lines).find("fsync", r"/index\.zri$")
    finally:
        shutil.rmtree(store, ignore_errors=True)


def zrecord_fs_is_memory(path) -> bool:
    """Whether `path` lies on a file system held in memory (tmpfs, ramfs)."""
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True,
                          check=True).stdout.strip()
    return kind in ("tmpfs", "ramfs")


# -- the direct-I/O path stores exactly what was appended -----------------------------------------


@pytest.mark.parametrize("budget", [0, 2_500_000, None], ids=["direct", "switch", "default"])
@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("shards", [1, 3])
def test_appends_of_every_size_round_trip_through_direct_writes(tmp_path, codec, shards, budget):
    """Appends that end inside a block, on a block boundary, below and above the size that goes
    around the page cache, and records larger than a lane buffer: every byte lands where the
    index says, and each shard is exactly as long as its records (partial blocks included).
    With every large write direct, with the page-cache budget spent mid-store, and with the
    default budget (all of it through the page cache)."""
    rng = np.random.default_rng(shards)
    sizes = [1, 4095, 4096, 4097, 5, 130_000, 1 << 20, (1 << 20) + 3, 3 << 20, 7, 0, 200_000, 1]
    recs = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    path = str(tmp_path / "s")
    with Ragged.create(path, np.uint8, 1, codec=codec, data_shards=shards) as w:
        if budget is not None:
            w._handle.set_page_cache_bytes(budget)
        for k in range(0, len(recs), 2):  # several appends, each starting mid-block
            w.append(recs[k:k + 2])
        w.append([])
        w.append(recs)  # and all of them again in one append
    want = recs + recs
    with Ragged.open(path) as rs:
        rs.verify()
        got = rs[:]
        assert len(got) == len(want)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
    total = sum(os.path.getsize(os.path.join(path, f"data-{k:03d}.zrd")) for k in range(shards))
    if codec == "raw":
        assert total == 2 * sum(sizes)


def test_dense_append_one_record_at_a_time_then_a_large_one(tmp_path):
    """Thousands of tiny appends (each through the page cache) followed by a large one (with
    O_DIRECT, rewriting the partial block the small ones left): the store reads back whole."""
    rng = np.random.default_rng(3)
    data = rng.integers(0, 1 << 30, (3000, 333), dtype=np.int32)  # 1332-byte records
    path = str(tmp_path / "d")
    with Dense.create(path, np.int32, (333,), codec="raw", data_shards=2) as w:
        w._handle.set_page_cache_bytes(0)
        for i in range(1000):
            w.append(data[i:i + 1])
        w.append(data[1000:])
    with Dense.open(path) as ds:
        ds.verify()
        np.testing.assert_array_equal(ds[:], data)
