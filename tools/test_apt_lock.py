"""tools/apt_lock.py: a second holder waits until the first lets go."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import apt_lock
import pytest

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import apt_lock
apt_lock.LOCK_FILE = sys.argv[2]
with apt_lock.apt_lock():
    open(sys.argv[3], "w").close()
"""


def test_a_second_holder_waits_for_the_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock, entered = tmp_path / "apt.lock", tmp_path / "entered"
    monkeypatch.setattr(apt_lock, "LOCK_FILE", str(lock))
    tools = os.path.dirname(os.path.abspath(apt_lock.__file__))
    with apt_lock.apt_lock():
        child = subprocess.Popen([sys.executable, "-c", CHILD, tools, str(lock), str(entered)])
        time.sleep(0.5)
        assert not entered.exists(), "the second holder did not wait for the first"
    assert child.wait(timeout=30) == 0
    assert entered.exists()
