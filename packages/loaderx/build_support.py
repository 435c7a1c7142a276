"""Build support: compile the Cython sampler into one abi3 extension with `zig cc`.

One `python -m ziglang build-lib` call compiles the Cython-generated C file, which includes
the batch function from src/loaderx/_sampler_core.h (declared for Cython in
_sampler_core.pxd; both ship in the sdist, neither in the wheel): baseline CPU,
glibc 2.28, the Limited API of CPython 3.10 (one `cp310-abi3` wheel for 3.10+) and a version
script that exports `PyInit__sampler` only. The same toolchain as zrecord's core, so a user
needs nothing but pip.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

EXTENSION = "_sampler.abi3.so"
LIMITED_API = "0x030A0000"
ZIG_TARGETS = {"x86_64": "x86_64-linux-gnu.2.28", "aarch64": "aarch64-linux-gnu.2.28"}


def build_extension(root: Path, verbose: bool = False) -> Path:
    """Build src/loaderx/_sampler.abi3.so unless it is newer than its inputs; return its path."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"loaderx build: only Linux is supported so far, not {sys.platform}")
    machine = platform.machine()
    if machine not in ZIG_TARGETS:
        raise RuntimeError(f"loaderx build: unsupported CPU architecture {machine!r}")
    pkg = root / "src" / "loaderx"
    out = pkg / EXTENSION
    inputs = [pkg / "_sampler.pyx", pkg / "_sampler_core.pxd", pkg / "_sampler_core.h",
              root / "build_support.py"]
    if out.exists() and out.stat().st_mtime >= max(p.stat().st_mtime for p in inputs):
        return out
    build = root / "build" / "native"
    build.mkdir(parents=True, exist_ok=True)
    c_file = build / "_sampler.c"
    subprocess.run([sys.executable, "-m", "cython", "-3", "--fast-fail", str(pkg / "_sampler.pyx"),
                    "-o", str(c_file)], check=True)
    exports = build / "exports.map"
    exports.write_text("{ global: PyInit__sampler; local: *; };\n")
    tmp_out = build / EXTENSION
    cmd = [sys.executable, "-m", "ziglang", "build-lib", "-dynamic",
           "-target", ZIG_TARGETS[machine], "-mcpu=baseline", "-OReleaseFast", "-fPIC", "-lc",
           "-fstrip", "-cflags", f"-DPy_LIMITED_API={LIMITED_API}", "-O2",
           "-fno-strict-aliasing", "-I", str(pkg), "-I", sysconfig.get_paths()["include"], "--",
           str(c_file),
           "--version-script", str(exports), f"-femit-bin={tmp_out}"]
    env = dict(os.environ)
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(root / "build" / "zig-global-cache"))
    env.setdefault("ZIG_LOCAL_CACHE_DIR", str(root / "build" / "zig-local-cache"))
    if verbose:
        print("loaderx build:", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=build, env=env)
    os.replace(tmp_out, out)
    return out
