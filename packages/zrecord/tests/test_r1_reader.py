"""Regressions of issue [R1], a hostile-input trial of the native reader.

Each test is named after the item of [R1] it pins and failed on the reader before that item's
fix. Stores are built with the writer or, where one rule must be broken on its own, byte by
byte through tests/fuzz/storemodel.py (which reseals every checksum the change does not
concern). Anything that could kill or hang the process on a regression (SIGBUS, a close that
never returns, gigabytes of memory) runs in a child process with a timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from zrecord import Dense, Ragged
from zrecord.errors import CorruptStoreError

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


# ---- item 4: symbolic links out of a store -----------------------------------------------


def _checksums_of(data: bytes, record_bytes: int) -> list[str]:
    """Every XXH64 a reader could compute over `data`: of the whole and of each record-sized
    piece, in the 16-digit hexadecimal form messages used to print."""
    sums = {sm.xxh64(data)}
    for off in range(0, len(data), record_bytes):
        sums.add(sm.xxh64(data[off:off + record_bytes]))
    return [f"{s:016x}" for s in sums]


@pytest.mark.parametrize("name", ["data-000.zrd", "index.zri", "header.zrh"])
@pytest.mark.parametrize("same_size", [False, True])
def test_r1_04_symlink_out_of_the_store_is_refused_without_disclosing_the_target(
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


def test_r1_04_symlinked_store_directory_opens(tmp_path):
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
