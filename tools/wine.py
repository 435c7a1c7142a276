"""Wine for the `windows` nox session: find it, or install it with apt-get.

    python tools/wine.py        # prints the path of wine64, installing it first if missing

The session runs the Zig core's test suite, cross-compiled for Windows x86-64, under Wine
(Debian's `wine64`, Wine 8 on bookworm). Installing needs root for apt-get; without it the
message says what to install. Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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
    subprocess.run(["apt-get", "update", "-q"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGE], check=True)
    found = find()
    if found is None:
        raise SystemExit(f"apt-get installed {PACKAGE}, but no Wine loader is on PATH or at "
                         f"{DEBIAN_LOADER}")
    return found


def main() -> int:
    print(find() or install())
    return 0


if __name__ == "__main__":
    sys.exit(main())
