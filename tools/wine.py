"""Wine for the `windows` nox session: find it, or install it with apt-get.

    python tools/wine.py        # prints the path of wine64, installing it first if missing
    python tools/wine.py PREFIX # the same, with the Wine prefix PREFIX made first if missing

The session runs the Zig core's test suite, cross-compiled for Windows x86-64, under Wine
(Debian's `wine64`, Wine 8 on bookworm). Installing needs root for apt-get; without it the
message says what to install. Standard library only.

A prefix is made before the tests run, not by their first program: Wine makes a missing
prefix as the first program it starts begins, and in one fresh-clone run of the suite
(sessions side by side) that program failed to load kernel32.dll (status c0000135) in a
prefix made that way; the cause was not reproduced. Here `wineboot --init` makes it and
`wineserver --wait` waits until it is written; a prefix that still lacks kernel32.dll is made
again, once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from apt_lock import apt_lock

PACKAGE = "wine64"
# Debian installs the 64-bit loader outside PATH unless the `wine` package adds its wrapper.
CANDIDATES = ("wine64", "wine")
DEBIAN_LOADER = Path("/usr/lib/wine/wine64")


def find() -> str | None:
    """The path of a 64-bit Wine loader, None where none is installed."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return str(DEBIAN_LOADER) if DEBIAN_LOADER.is_file() else None


def install() -> str:
    """Installs Debian's wine64 (root needed) and returns the loader's path."""
    if os.geteuid() != 0:
        raise SystemExit(f"the Windows tests run under Wine, which is not installed: install "
                         f"it (Debian/Ubuntu: `apt-get install --no-install-recommends {PACKAGE}`) "
                         "or run this as root")
    with apt_lock():  # the suite's other sessions may be installing too
        subprocess.run(["apt-get", "update", "-q"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGE],
                       check=True)
    found = find()
    if found is None:
        raise SystemExit(f"apt-get installed {PACKAGE}, but no Wine loader is on PATH or at "
                         f"{DEBIAN_LOADER}")
    return found


def make_prefix(loader: str, prefix: Path) -> None:
    """Make the Wine prefix `prefix` (nothing if it is made), and wait until it is written."""
    kernel32 = prefix / "drive_c" / "windows" / "system32" / "kernel32.dll"
    env = {**os.environ, "WINEPREFIX": str(prefix), "WINEDEBUG": "-all"}
    server = Path(loader).with_name("wineserver")
    for attempt in range(2):
        if kernel32.is_file():
            return
        if attempt:
            shutil.rmtree(prefix, ignore_errors=True)
        made = subprocess.run([loader, "wineboot", "--init"], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
        if server.is_file():
            subprocess.run([str(server), "--wait"], env=env, check=False)
    if not kernel32.is_file():
        raise SystemExit(f"Wine did not make its prefix {prefix} (no {kernel32.name} in it); "
                         f"`wineboot --init` said:\n{made.stdout}{made.stderr}")


def main() -> int:
    loader = find() or install()
    if len(sys.argv) > 1:
        make_prefix(loader, Path(sys.argv[1]).resolve())
    print(loader)
    return 0


if __name__ == "__main__":
    sys.exit(main())
