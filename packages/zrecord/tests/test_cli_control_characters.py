"""[R2] item 15: `zrecord info FOLDER` printed the names of the stores below the folder raw, so
a store named with a terminal escape sequence drove the terminal of whoever listed the folder
(and a name that is not UTF-8 printed a byte that is no character). Every name and path the
command line prints now has what is not printable escaped, as Python's repr writes it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from zrecord import Dense

ZRECORD_SCRIPT = Path(sys.executable).parent / "zrecord"
# A colour change, a bell and a window-title change (OSC 0), then a byte that is not UTF-8.
HOSTILE = "ev\x1b[31mil\x07\x1b]0;owned\x07"
SHOWN = "ev\\x1b[31mil\\x07\\x1b]0;owned\\x07"
RAW_BYTES = (b"\x1b", b"\x07", b"\xff")


def _cli(*argv: str) -> subprocess.CompletedProcess[bytes]:
    """The real console script; its output as bytes, which is what reaches a terminal."""
    return subprocess.run([str(ZRECORD_SCRIPT), *argv], capture_output=True, timeout=120)


def _raw(output: bytes) -> list[bytes]:
    return [b for b in RAW_BYTES if b in output]


def test_names_from_disk_are_printed_with_control_characters_escaped(tmp_path):
    root = tmp_path / "data"
    hostile = root / HOSTILE
    not_utf8 = os.fsdecode(os.fsencode(root) + b"/by\xfftes")
    for path in (hostile, not_utf8):
        with Dense.create(path, np.int8, (), codec="raw") as w:
            w.append(np.zeros(2, np.int8))
    broken = root / ("bro\x1bken")
    broken.mkdir()
    (broken / "index.zri").write_bytes(b"")

    proc = _cli("info", str(root))
    assert proc.returncode == 1 and _raw(proc.stdout + proc.stderr) == [], proc.stdout
    text = proc.stdout.decode()
    assert f"  {SHOWN}  " in text and "  by\\xfftes  " in text
    assert "  bro\\x1bken: has index.zri but no header.zrh" in text

    proc = _cli("verify", str(root))
    assert proc.returncode == 1 and _raw(proc.stdout + proc.stderr) == [], proc.stdout
    text = proc.stdout.decode()
    assert f"{SHOWN}: OK: 2 records" in text and "by\\xfftes: OK" in text
    assert text.splitlines()[-1].endswith("FAILED: bro\\x1bken")
    assert f"{SHOWN}: 2/2 records (100%) done" in proc.stderr.decode()

    for command in ("info", "stats", "verify", "head"):
        proc = _cli(command, str(hostile))
        assert proc.returncode == 0 and _raw(proc.stdout + proc.stderr) == [], (command, proc.stdout)
        if command != "head":
            assert SHOWN in (proc.stdout + proc.stderr).decode()  # verify's is its progress line
    # Errors name the path too, on stderr.
    proc = _cli("head", str(broken))
    assert proc.returncode == 1 and _raw(proc.stderr) == [] and b"bro\\x1bken" in proc.stderr
    # --json was never raw: JSON escapes control characters itself.
    proc = _cli("info", str(root), "--json")
    assert _raw(proc.stdout) == [] and b"\\u001b[31mil" in proc.stdout
