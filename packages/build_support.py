"""The native build of zrecord and loaderx: one implementation for both packages.

Each package's ``hatch_build.py`` only loads this file: from beside itself in an sdist (each
package's pyproject.toml force-includes it there, so an sdist builds without the monorepo
around it) or from ``packages/`` in the repository. What differs between the packages is
declared in their pyproject.toml, in the ``[tool.hatch.build.hooks.custom]`` table:

- ``module``: the extension, e.g. ``zrecord._native``: ``src/zrecord/_native.pyx`` is
  cythonized and compiled into ``zrecord/_native.abi3.so``; the package folder is on the
  include path of Cython and of the C compiler (``.pxd`` and ``.h`` files beside the ``.pyx``).
- ``zig-core``: also compile the Zig core (``zig/src/root.zig``, ``zig/include``) into the
  extension, linked with zstd.
- ``optimize``: Zig's release mode for the extension (default ``ReleaseSafe``).

One ``python -m ziglang build-lib`` call compiles the Cython-generated C file (and the Zig root
module) into one extension. ``zig build`` is deliberately not used: it compiles its build
runner first, which costs minutes on a cold cache, while one direct ``build-lib`` call costs
~20 s cold. Choices that matter to users of the wheels:

- An explicit baseline CPU and glibc 2.28, so the extension runs on any x86-64 or ARM64 Linux
  from the last years, not only on the machine that built it.
- The Limited API (``Py_LIMITED_API`` = 3.10), so one ``cp310-abi3`` wheel serves CPython 3.10+.
- A linker version script that exports the module's ``PyInit_`` function only.

``ZRECORD_LIBZSTD`` names the ``libzstd.so.1`` to link; otherwise it is looked for in the
folders listed in ``zig/libzstd-dirs.txt``, the list that ``zig/build.zig`` reads too.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

LIMITED_API = "0x030A0000"
GLIBC = "2.28"
ARCHS = ("x86_64", "aarch64")


def zig_target(arch: str) -> str:
    return f"{arch}-linux-gnu.{GLIBC}"


def target_arch() -> str:
    """The CPU to build for: this machine's."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError(f"native build: only Linux is supported so far, not {sys.platform}")
    arch = platform.machine()
    if arch not in ARCHS:
        raise RuntimeError(f"native build: unsupported CPU architecture {arch!r}; "
                           f"supported: {', '.join(ARCHS)}")
    return arch


def zig_dir(root: Path) -> Path:
    """zrecord's sdist carries its own copy of the Zig core; in the repository it lives at the
    top level."""
    for candidate in (root / "zig", root.parent.parent / "zig"):
        if (candidate / "src" / "root.zig").is_file():
            return candidate
    raise RuntimeError(
        f"native build: cannot find the Zig core (zig/src/root.zig) in {root} or in the "
        "monorepo two levels up; build from the repository or from an sdist"
    )


def libzstd_dirs(zig: Path, arch: str) -> list[Path]:
    """The folders to search for libzstd.so.1, read from zig/libzstd-dirs.txt.

    ``{arch}`` in a line stands for the target's CPU; a line without it names a folder of the
    building machine's own libraries, searched only when building for that machine.
    """
    native = arch == platform.machine()
    dirs = []
    for line in (zig / "libzstd-dirs.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{arch}" in line:
            dirs.append(Path(line.replace("{arch}", arch)))
        elif native:
            dirs.append(Path(line))
    return dirs


def find_libzstd(zig: Path, arch: str | None = None) -> Path:
    """The platform's libzstd.so.1 for `arch` (default: this machine's CPU)."""
    arch = arch or platform.machine()
    override = os.environ.get("ZRECORD_LIBZSTD")
    candidates = ([Path(override)] if override
                  else [d / "libzstd.so.1" for d in libzstd_dirs(zig, arch)])
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise RuntimeError(
        f"zrecord build: the zstd library libzstd.so.1 for {arch} was not found (looked in "
        + ", ".join(str(c.parent) for c in candidates)
        + "). Install it: Debian/Ubuntu `apt-get install libzstd1`, Fedora/RHEL "
        "`dnf install libzstd`, Alpine `apk add zstd-libs`; or set ZRECORD_LIBZSTD to its path."
    )


def _newer(out: Path, inputs: list[Path]) -> bool:
    return out.exists() and out.stat().st_mtime >= max(p.stat().st_mtime for p in inputs)


def build_extension(root: Path, config: dict[str, Any], verbose: bool = False) -> Path:
    """Build the extension that `config` describes into src/ unless it is newer than every
    input; return its path."""
    arch = target_arch()
    package, _, name = str(config["module"]).rpartition(".")
    pkg = root / "src" / package
    out = pkg / f"{name}.abi3.so"
    inputs = sorted(pkg.glob("*.pyx")) + sorted(pkg.glob("*.pxd")) + sorted(pkg.glob("*.h"))
    inputs.append(Path(__file__).resolve())
    include = ["-I", str(pkg)]
    core: list[str] = []
    if config.get("zig-core"):
        zig = zig_dir(root)
        inputs += sorted((zig / "src").rglob("*.zig")) + sorted((zig / "include").glob("*.h"))
        inputs.append(zig / "libzstd-dirs.txt")
        include += ["-I", str(zig / "include")]
        core = [str(zig / "src" / "root.zig"), str(find_libzstd(zig, arch))]
    if _newer(out, inputs):
        return out

    build = root / "build" / "native"
    build.mkdir(parents=True, exist_ok=True)
    c_file = build / f"{name}.c"
    subprocess.run([sys.executable, "-m", "cython", "-3", "--fast-fail", *include,
                    str(pkg / f"{name}.pyx"), "-o", str(c_file)], check=True)
    exports = build / "exports.map"
    exports.write_text(f"{{ global: PyInit_{name}; local: *; }};\n")
    tmp_out = build / out.name
    cmd = [sys.executable, "-m", "ziglang", "build-lib", "-dynamic",
           "-target", zig_target(arch), "-mcpu=baseline", f"-O{config.get('optimize', 'ReleaseSafe')}",
           "-fPIC", "-lc", "-fstrip", *core,
           "-cflags", f"-DPy_LIMITED_API={LIMITED_API}", "-O2", "-fno-strict-aliasing", *include,
           "-I", sysconfig.get_paths()["include"], "--", str(c_file),
           "--version-script", str(exports), f"-femit-bin={tmp_out}"]
    env = dict(os.environ)
    # Keep Zig's cache inside the build folder unless the caller chose one: a user's pip run
    # must not depend on a writable home directory.
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(root / "build" / "zig-global-cache"))
    env.setdefault("ZIG_LOCAL_CACHE_DIR", str(root / "build" / "zig-local-cache"))
    if verbose:
        print(f"{package} build:", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=build, env=env)
    os.replace(tmp_out, out)
    return out


def get_build_hook() -> type:
    """The hatchling hook class; each package's hatch_build.py hands it to hatchling."""
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface

    class NativeBuildHook(BuildHookInterface):  # type: ignore[misc]
        """Builds the extension named in the package's hook table into its wheel."""

        PLUGIN_NAME = "custom"

        def initialize(self, version: str, build_data: dict[str, Any]) -> None:
            if self.target_name != "wheel":
                return
            out = build_extension(Path(self.root), self.config, verbose=True)
            build_data["pure_python"] = False
            plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
            build_data["tag"] = f"cp310-abi3-{plat}"
            if version != "editable":
                # The extension is git-ignored, so it must be named explicitly for the wheel.
                package = str(self.config["module"]).rpartition(".")[0]
                build_data["force_include"][str(out)] = f"{package}/{out.name}"

    return NativeBuildHook
