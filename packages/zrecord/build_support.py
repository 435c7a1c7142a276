"""Build support: compile the Zig core and the Cython binding into one abi3 extension.

The extension `zrecord/_native.abi3.so` is built by a single `python -m ziglang build-lib`
call that compiles the Zig root module together with the Cython-generated C file. `zig build`
is deliberately not used here: it compiles its build runner first, which costs minutes on a
cold cache, while one direct `build-lib` call costs ~20 s cold.

Choices that matter to users of the wheel:
- An explicit baseline CPU and glibc 2.28, so the extension runs on any x86-64 (or ARM64)
  Linux from the last years, not only on the machine that built it.
- The Limited API (Py_LIMITED_API = 3.10), so one `cp310-abi3` wheel serves CPython 3.10+.
- A linker version script that exports `PyInit__native` only.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

EXTENSION = "_native.abi3.so"
LIMITED_API = "0x030A0000"
ZIG_TARGETS = {"x86_64": "x86_64-linux-gnu.2.28", "aarch64": "aarch64-linux-gnu.2.28"}


def _zig_dir(root: Path) -> Path:
    """The Zig core lives at the monorepo's top level; an sdist carries its own copy."""
    for candidate in (root.parent.parent / "zig", root / "zig"):
        if (candidate / "src" / "root.zig").is_file():
            return candidate
    raise RuntimeError(
        f"zrecord build: cannot find the Zig core (zig/src/root.zig) next to {root} or in "
        "the monorepo two levels up; build from the repository or from an sdist"
    )


# The zstd codecs link the platform's libzstd dynamically (never a vendored copy); these are
# the places Debian/Ubuntu, Fedora/RHEL and Alpine put it. ZRECORD_LIBZSTD overrides.
LIBZSTD_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib/x86_64-linux-gnu",
                "/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64", "/lib"]


def find_libzstd() -> Path:
    override = os.environ.get("ZRECORD_LIBZSTD")
    candidates = [Path(override)] if override else [Path(d) / "libzstd.so.1" for d in LIBZSTD_DIRS]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise RuntimeError(
        "zrecord build: the zstd library libzstd.so.1 was not found (looked in "
        + ", ".join(str(c.parent) for c in candidates)
        + "). Install it: Debian/Ubuntu `apt-get install libzstd1`, Fedora/RHEL "
        "`dnf install libzstd`, Alpine `apk add zstd-libs`; or set ZRECORD_LIBZSTD to its path."
    )


def c_sources(zig: Path) -> list[str]:
    """The core's own C files, compiled with the Zig root module (today the SIGBUS guard,
    zig/src/sigbus_guard.c, which needs sigsetjmp). Every `zig test` of zig/src must name them
    too: the noxfile's `zig` and `conformance` sessions do."""
    return [str(p) for p in sorted((zig / "src").glob("*.c"))]


def _newest_mtime(paths: list[Path]) -> float:
    return max(p.stat().st_mtime for p in paths)


def build_extension(root: Path, verbose: bool = False) -> Path:
    """Build src/zrecord/_native.abi3.so unless it is newer than every input; return its path."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"zrecord build: only Linux is supported so far, not {sys.platform}")
    machine = platform.machine()
    if machine not in ZIG_TARGETS:
        raise RuntimeError(f"zrecord build: unsupported CPU architecture {machine!r}")
    zig = _zig_dir(root)
    pkg = root / "src" / "zrecord"
    out = pkg / EXTENSION
    inputs = sorted((zig / "src").rglob("*.zig")) + sorted((zig / "src").glob("*.c"))
    inputs += [zig / "include" / "zrecord.h"]
    inputs += [pkg / "_native.pyx", pkg / "_capi.pxd", root / "build_support.py"]
    if out.exists() and out.stat().st_mtime >= _newest_mtime(inputs):
        return out

    build = root / "build" / "native"
    build.mkdir(parents=True, exist_ok=True)
    c_file = build / "_native.c"
    subprocess.run(
        [sys.executable, "-m", "cython", "-3", "--fast-fail", "-I", str(pkg),
         str(pkg / "_native.pyx"), "-o", str(c_file)],
        check=True,
    )
    exports = build / "exports.map"
    exports.write_text("{ global: PyInit__native; local: *; };\n")
    py_include = sysconfig.get_paths()["include"]
    tmp_out = build / EXTENSION
    cmd = [
        sys.executable, "-m", "ziglang", "build-lib", "-dynamic",
        "-target", ZIG_TARGETS[machine], "-mcpu=baseline", "-OReleaseSafe", "-fPIC", "-lc",
        "-fstrip",
        str(zig / "src" / "root.zig"), str(find_libzstd()),
        "-cflags", f"-DPy_LIMITED_API={LIMITED_API}", "-O2", "-fno-strict-aliasing",
        "-I", str(zig / "include"), "-I", py_include, "--", str(c_file), *c_sources(zig),
        "--version-script", str(exports),
        f"-femit-bin={tmp_out}",
    ]
    env = dict(os.environ)
    # Keep Zig's cache inside the build folder unless the caller chose one: a user's pip run
    # must not depend on a writable home directory.
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(root / "build" / "zig-global-cache"))
    env.setdefault("ZIG_LOCAL_CACHE_DIR", str(root / "build" / "zig-local-cache"))
    if verbose:
        print("zrecord build:", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=build, env=env)
    os.replace(tmp_out, out)
    return out
