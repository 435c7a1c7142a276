"""A free-threaded CPython 3.13 (3.13t) for the `freethreaded` and `release` nox sessions.

    python tools/freethreaded.py            # prints the interpreter's path, building it once

Debian 12 has no free-threaded interpreter; Debian 13's source package of CPython 3.13 builds
one (docs/development.md, "Free-threaded CPython"). This script follows that recipe: a deb-src
line for Debian 13 (trixie) `main` on the mirror this machine's apt already uses, the build
dependencies from apt, the source package downloaded by apt (which checks it against the
signed archive), `./configure --disable-gil --with-ensurepip=install`, `make`, `make install`.
apt-get needs root; without it the message says what to install.

The interpreter lives outside the checkout, in `$ZRECORD_FREETHREADED_PREFIX` (default
`~/.cache/zrecord-dev/cpython-3.13t`), and is reused while it runs with the GIL disabled and
its install finished (a marker file written last): about 5 minutes on 2 cores the first time,
nothing after. A folder left by an interrupted build is removed and built again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from apt_lock import apt_lock

SOURCE_PACKAGE = "python3.13"
SUITE = "trixie"
PREFIX = Path(os.environ.get("ZRECORD_FREETHREADED_PREFIX")
              or Path.home() / ".cache" / "zrecord-dev" / "cpython-3.13t")
MARKER = ".installed"
SOURCES = Path("/etc/apt/sources.list.d/zrecord-trixie-src.sources")
BUILD_DEPENDENCIES = ["build-essential", "pkg-config", "dpkg-dev", "libssl-dev", "zlib1g-dev",
                      "libffi-dev", "libbz2-dev", "liblzma-dev", "libsqlite3-dev",
                      "libreadline-dev", "libzstd-dev", "libgdbm-dev", "uuid-dev",
                      "libncurses-dev"]


def interpreter(prefix: Path = PREFIX) -> Path:
    return prefix / "bin" / "python3.13t"


def usable(prefix: Path = PREFIX) -> bool:
    """Whether `prefix` holds a finished install that runs with the GIL disabled."""
    python = interpreter(prefix)
    if not (prefix / MARKER).is_file() or not python.is_file():
        return False
    probe = subprocess.run([str(python), "-c", "import sys; sys.exit(sys._is_gil_enabled())"],
                           capture_output=True)
    return probe.returncode == 0


def _run(*command: str, cwd: Path | None = None) -> None:
    print("+ " + " ".join(command), file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(command, cwd=cwd, check=True, env=env)


def _mirror() -> str:
    """The URI of the Debian archive this machine's apt uses (deb.debian.org if none is named)."""
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if path == SOURCES or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        found = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or \
            re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+/debian)\s", text, re.M)
        if found:
            return found[1]
    return "http://deb.debian.org/debian"


def build(prefix: Path = PREFIX) -> Path:
    """Build and install the interpreter into `prefix` (emptied first); returns its path."""
    if os.geteuid() != 0:
        raise SystemExit(
            f"building a free-threaded CPython needs root for apt-get (a {SUITE} deb-src line, "
            f"the build dependencies: {' '.join(BUILD_DEPENDENCIES)}); run this as root, or "
            f"point ZRECORD_FREETHREADED_PREFIX at an install made by the recipe in "
            f"docs/development.md")
    SOURCES.write_text(f"Types: deb-src\nURIs: {_mirror()}\nSuites: {SUITE}\nComponents: main\n"
                       "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    with apt_lock():  # the suite's other sessions may be installing too
        _run("apt-get", "update", "-q")
        _run("apt-get", "install", "-y", "-q", "--no-install-recommends", *BUILD_DEPENDENCIES)
    shutil.rmtree(prefix, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="cpython-3.13t-") as tmp:
        work = Path(tmp)
        with apt_lock():
            _run("apt-get", "source", "--download-only", SOURCE_PACKAGE, cwd=work)
        (orig,) = work.glob(f"{SOURCE_PACKAGE}_*.orig.tar.xz")
        _run("tar", "xf", orig.name, cwd=work)
        (src,) = (p for p in work.iterdir() if p.is_dir() and p.name.startswith("Python-3.13"))
        _run("./configure", f"--prefix={prefix}", "--disable-gil", "--with-ensurepip=install",
             "-q", cwd=src)
        _run("make", f"-j{os.cpu_count() or 1}", "-s", cwd=src)
        _run("make", "install", "-s", cwd=src)
    (prefix / MARKER).write_text(f"{orig.name}\n")
    if not usable(prefix):
        raise SystemExit(f"{interpreter(prefix)} was built but does not run with the GIL disabled")
    return interpreter(prefix)


def main() -> int:
    python = interpreter() if usable() else build()
    print(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
