"""One apt-get at a time among this project's tools (tools/wine.py, tools/freethreaded.py,
tools/arm64.py).

The test suite runs its sessions two at a time, and on a fresh machine two of them install
with apt-get: `windows` (Wine) and `freethreaded` (the build dependencies of CPython 3.13t).
apt-get does not wait for another apt-get's locks: it fails at once ("Could not get lock").
Each tool's apt-get runs while holding this lock, so the second one waits for the first.
Standard library only; Linux (flock).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator

LOCK_FILE = os.path.join(tempfile.gettempdir(), "zrecord-dev-apt-get.lock")


@contextlib.contextmanager
def apt_lock() -> Iterator[None]:
    """Hold the lock for the block: the apt-get calls of one tool's step."""
    with open(LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
