"""Faults while writing: a writer killed at any moment, and a disk that fills up.

A store path holds either nothing or a complete, valid, published store, whatever happens to
the writer ([ZR-PUB-001], [ZR-PUB-002], [ZR-PUB-003]); what a dead writer leaves behind never
stops a later create at the same path.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import zrecord
from zrecord import Dense

# One writer, chosen by argv: Dense or Ragged, a codec, a number of appends. It prints "ready"
# once its imports are done, so that kill delays are measured from the start of the write.
WRITER = textwrap.dedent("""
    import sys, numpy as np
    from zrecord import Dense, Ragged
    path, kind, codec, appends = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    print("ready", flush=True)
    if kind == "dense":
        block = (np.arange(2048 * 64, dtype=np.int64) % 1000).reshape(2048, 64)
        with Dense.create(path, np.int64, (64,), codec=codec, data_shards=3) as w:
            for _ in range(appends):
                w.append(block)
    else:
        recs = [np.arange(i % 300, dtype=np.int32) for i in range(3000)]
        with Ragged.create(path, np.int32, 1, codec=codec, data_shards=2) as w:
            for _ in range(appends):
                w.append(recs)
    print("done", flush=True)
""")

KILLS = 24


def expected(kind: str, appends: int):
    if kind == "dense":
        block = (np.arange(2048 * 64, dtype=np.int64) % 1000).reshape(2048, 64)
        return np.concatenate([block] * appends)
    return [np.arange(i % 300, dtype=np.int32) for i in range(3000)] * appends


def check_published(path: str, kind: str, appends: int) -> None:
    """The store at `path` is complete: every record is there and right, every checksum holds."""
    want = expected(kind, appends)
    with zrecord.open_store(path) as store:
        store.verify()
        assert len(store) == len(want)
        if kind == "dense":
            np.testing.assert_array_equal(store[:], want)
        else:
            got = store[:]
            assert all(np.array_equal(a, b) for a, b in zip(got, want))


def writer_seconds(tmp_path, kind: str, codec: str, appends: int) -> float:
    path = str(tmp_path / f"timing-{kind}-{codec}")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, kind, codec, str(appends)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    assert proc.stdout.readline().strip() == "done"
    elapsed = time.monotonic() - t0
    proc.wait(30)
    shutil.rmtree(path)
    return elapsed


def kill_and_check(tmp_path, k: int, kind: str, codec: str, appends: int,
                   delay: float | None) -> str:
    """Start writer `k`, SIGKILL it `delay` seconds after it is ready (None: once it says it
    is done, i.e. after close()), and check that its path holds nothing or a complete store
    and that a later writer at or beside it works and cleans up. Returns the outcome."""
    path = str(tmp_path / f"s{k}")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, kind, codec, str(appends)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    if delay is None:
        assert proc.stdout.readline().strip() == "done"
    else:
        time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    if os.path.exists(path):
        check_published(path, kind, appends)
        outcome = "published"
        # A kill between the rename and the unlink of the writer's lock leaves that free
        # lock file; the next writer in the directory removes it, whatever its name.
        with Dense.create(path + "-next", np.uint8, (1,), codec="raw", data_shards=1) as w:
            w.append(np.array([[k]], np.uint8))
    else:
        outcome = "nothing"
        with pytest.raises(zrecord.StoreNotFoundError):
            zrecord.open_store(path)
        # A later writer at the same path works and removes the dead one's leftovers.
        with Dense.create(path, np.uint8, (1,), codec="raw", data_shards=1) as w:
            w.append(np.array([[k]], np.uint8))
        with Dense.open(path) as ds:
            assert ds[0].tolist() == [k]
    # A published store's temporary directory was consumed by the rename; an unpublished
    # one was removed by the create above.
    leftovers = [e for e in os.listdir(tmp_path) if e.startswith(f".s{k}.zr-tmp-")]
    assert leftovers == [], leftovers
    return outcome


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_nothing_or_a_valid_store(tmp_path):
    """[ZR-PUB-001] [ZR-PUB-002] [ZR-PUB-003] 24 writers (Dense and Ragged, three codecs) are
    killed with SIGKILL at seeded random moments spread over their whole run, publication
    included. Each path then holds nothing or a complete valid store, and a later create at
    the same path succeeds and cleans up the dead writer's temporary directory."""
    rng = random.Random(20261201)
    configs = [("dense", "raw", 3), ("ragged", "zstd", 2)]
    # The faster of two runs: the first pays for cold caches.
    durations = {c: min(writer_seconds(tmp_path, *c) for _ in range(2)) for c in configs}
    outcomes = {"nothing": 0, "published": 0}
    for k in range(KILLS):
        kind, codec, appends = configs[k % len(configs)]
        # Stratified over the write and 25% past its measured length, so that kills land
        # early, late, during close() and (the last few) after it.
        fraction = 1.25 * (k + rng.random()) / KILLS
        outcome = kill_and_check(tmp_path, k, kind, codec, appends,
                                 fraction * durations[(kind, codec, appends)])
        outcomes[outcome] += 1
    # A machine busier than during the timing runs stretches every write, and a kill meant
    # for after close() lands before it (or the reverse): then one more writer each, killed
    # at the moment that outcome needs, so that both are always tested.
    if outcomes["published"] == 0:
        outcomes[kill_and_check(tmp_path, KILLS, "dense", "raw", 1, None)] += 1
    if outcomes["nothing"] == 0:
        outcomes[kill_and_check(tmp_path, KILLS + 1, "ragged", "zstd", 2, 0.0)] += 1
    print(f"SIGKILL outcomes: {outcomes}")
    assert KILLS <= sum(outcomes.values()) <= KILLS + 1
    # The random moments must have covered both outcomes, or the test tests less than it says.
    assert outcomes["nothing"] > 0 and outcomes["published"] > 0, outcomes


FULL_DISK = textwrap.dedent("""
    import json, os, resource, sys, numpy as np
    import zrecord
    from zrecord import Dense
    path, target = sys.argv[1], sys.argv[2]
    if target != "tmpfs":
        limit = int(sys.argv[3])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    result = {}
    try:
        if target == "index":
            # Zero records compress to about 17 bytes: the 24-byte index entries outgrow the data.
            with Dense.create(path, np.uint8, (64,), codec="zstd", data_shards=1) as w:
                w.append(np.zeros((100000, 64), np.uint8))
        else:
            with Dense.create(path, np.uint8, (4096,), codec="raw", data_shards=2) as w:
                w.append(np.ones((2000, 4096), np.uint8))
        result["raised"] = None
    except Exception as exc:
        result.update(raised=type(exc).__name__, errno=getattr(exc, "errno", None),
                      message=str(exc), is_os=isinstance(exc, OSError),
                      is_zr=isinstance(exc, zrecord.ZrecordError))
    parent = os.path.dirname(path)
    result["exists"] = os.path.exists(path)
    result["leftovers"] = [e for e in os.listdir(parent) if ".zr-tmp-" in e]
    # The disk is still usable for a store that fits.
    with Dense.create(path + "-small", np.uint8, (4,), codec="raw", data_shards=1) as w:
        w.append(np.ones((3, 4), np.uint8))
    with Dense.open(path + "-small") as ds:
        result["small_ok"] = ds[2].tolist() == [1, 1, 1, 1]
    print(json.dumps(result))
""")


def run_full_disk(args: list[str], prefix: list[str] | None = None) -> dict:
    out = subprocess.run([*(prefix or []), sys.executable, "-c", FULL_DISK, *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("target,file,limit", [("data", "data-00", 1 << 20),
                                               ("index", "index.zri", 2 << 20)])
def test_file_size_limit_is_a_clear_error_and_nothing_is_published(tmp_path, target, file, limit):
    """A write refused by the system (RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC) raises
    StoreOSError (an OSError and a ZrecordError) with the errno, naming the file; nothing is
    published ([ZR-PUB-001]) and the temporary directory is removed."""
    path = str(tmp_path / "store")
    r = run_full_disk([path, target, str(limit)])
    assert r["raised"] == "StoreOSError", r
    assert r["is_os"] and r["is_zr"] and r["errno"] == errno.EFBIG, r
    assert file in r["message"] and ".zr-tmp-" in r["message"], r
    assert r["message"].count("File too large") == 1, r
    assert not r["exists"] and r["leftovers"] == [] and r["small_ok"], r


def _userns_tmpfs_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c",
                            "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d && umount $d "
                            "&& rmdir $d"], capture_output=True, timeout=30)
    return probe.returncode == 0


def test_full_tmpfs_is_a_clear_error_and_nothing_is_published(tmp_path):
    """A real full disk (ENOSPC on a 4 MiB tmpfs in a private mount namespace, where one is
    allowed): StoreOSError naming the shard file; nothing published, no temporary left."""
    if not _userns_tmpfs_works():
        pytest.skip("no user namespace with tmpfs mounts here")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = (f"mount -t tmpfs -o size=4m tmpfs {mnt} && exec \"$0\" \"$@\"")
    r = run_full_disk([str(mnt / "store"), "tmpfs"],
                      prefix=["unshare", "-rm", "sh", "-c", script])
    assert r["raised"] == "StoreOSError", r
    assert r["errno"] == errno.ENOSPC, r
    assert "data-00" in r["message"] and ".zr-tmp-" in r["message"], r
    assert not r["exists"] and r["leftovers"] == [] and r["small_ok"], r
