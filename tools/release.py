"""Build the release wheelhouse dist/ from a clean checkout of HEAD: the `release` nox session.

Run with the python of an environment that has the three distributions' build requirements,
`build`, `twine` and `auditwheel` (the session installs them):

    python tools/release.py --work FOLDER

The three sdists are built from `git archive HEAD`, so nothing uncommitted or built in the
working tree reaches them; every wheel is built from its unpacked sdist: zrecord and loaderx as
cp310-abi3 manylinux_2_28 and macosx_11_0 wheels for every CPU of build_support.ARCHS and as
win_amd64 wheels (cross-compiled by Zig, zstd built in), and with --free-threaded as Linux
cp313t wheels too; loaderx-converter as a pure wheel. Then `twine check --strict` on all of
them, `auditwheel show` on each Linux binary wheel, tools/macho.py on each macOS one and
tools/pe.py on each Windows one. Last, the wheels of every third-party
dependency for the running CPython (and each --deps-python) on this machine's CPU land in
dist/ beside them, and the README's `pip install --no-index --find-links dist ...` line must
resolve from dist/ alone. Exits non-zero on the first thing that fails.

    python tools/release.py --deps-only --dist FOLDER

fetches the dependencies' wheels for the project's wheels already in FOLDER and checks the
README's line against them: the `wheelhouse` session's install uses this, the release's code.

The noxfile imports this file too: `release_env` gives every session's wheels the settings of
a release build, and `readme_install_line` is what the `wheelhouse` session runs. So this
module imports nothing beyond the standard library and runs on the oldest supported CPython.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("zrecord", "loaderx", "loaderx-converter")
OURS = {"zrecord", "loaderx", "loaderx-converter"}
# The extras whose requirements the wheelhouse carries beside each distribution's own, by wheel
# name: the README installs 'loaderx[converter]'.
WHEELHOUSE_EXTRAS = {"loaderx": "[converter]"}


def build_support() -> ModuleType:
    """packages/build_support.py, the packages' native build (for its settings and searches)."""
    if str(ROOT / "packages") not in sys.path:
        sys.path.insert(0, str(ROOT / "packages"))
    import build_support

    return build_support


def run(*command: str, env: dict[str, str] | None = None, capture: bool = False,
        cwd: Path | None = None, base: dict[str, str] | None = None) -> str:
    """Run `command`, printed first as a session prints it; its output when `capture`.
    `env` is added to `base`, by default this process's environment."""
    print("+ " + (f"(in {cwd}) " if cwd else "") + " ".join(command), file=sys.stderr, flush=True)
    done = subprocess.run(command, check=True, text=True, cwd=cwd,
                          env={**(os.environ if base is None else base), **(env or {})},
                          stdout=subprocess.PIPE if capture else None)
    return done.stdout if capture else ""


def release_env(arch: str, system: str = "linux") -> dict[str, str]:
    """The settings of a release build for `arch` on `system`: zstd compiled in from the pinned
    sources.

    The source archive is fetched once with pip into build/ (git-ignored) and handed to every
    build, so no build fetches anything itself; the library is compiled once into
    build/zstd-static/ and linked by every build, so a wheel built from an unpacked sdist does
    not compile it again."""
    support = build_support()
    folder = ROOT / "build" / "zstd-sdist"
    if not (folder / support.ZSTD_SDIST_FILE).is_file():
        # Fetched into a folder of its own, then renamed into place whole: pip copies the file
        # into --dest, and a session started beside this one (the suite's `wheels` and
        # `windows`) would otherwise find it there half-copied and build from it.
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".fetching-", dir=folder) as staged:
            run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                "--ignore-requires-python", "--dest", staged, support.ZSTD_SDIST_REQUIREMENT)
            os.replace(Path(staged) / support.ZSTD_SDIST_FILE, folder / support.ZSTD_SDIST_FILE)
    return {"NATIVE_BUILD_ARCH": arch, "NATIVE_BUILD_OS": system, "ZRECORD_ZSTD": "static",
            "ZRECORD_ZSTD_SDIST": str(folder / support.ZSTD_SDIST_FILE),
            "ZRECORD_ZSTD_BUILD": str(ROOT / "build" / "zstd-static")}


def requires_dist(wheel: Path, extra: str | None = None) -> list[str]:
    """The third-party requirements of a wheel: those without a marker, and with `extra` the
    ones of that extra (markers dropped)."""
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        lines = z.read(name).decode().splitlines()
    out = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req, _, marker = line.split(":", 1)[1].partition(";")
        if marker and not re.search(rf"""extra\s*==\s*['"]{extra}['"]""", marker):
            continue
        if re.split(r"[ <>=!~\[]", req.strip(), maxsplit=1)[0].lower() not in OURS:
            out.append(req.strip())
    return out


def audit(wheel: Path) -> None:
    """`auditwheel show` must find `wheel` manylinux_2_28-compatible for its CPU: nothing
    outside the policy's libraries, no glibc symbol newer than 2.28."""
    text = " ".join(run(sys.executable, "-m", "auditwheel", "show", str(wheel), capture=True).split())
    print(text, file=sys.stderr)
    tag = wheel.name.removesuffix(".whl").split("-")[-1]  # e.g. manylinux_2_28_x86_64
    arch = tag.split("_", 3)[3]
    found = re.search(r'consistent with the following platform tag: "manylinux_(\d+)_(\d+)_(\w+)"', text)
    if tag != f"manylinux_2_28_{arch}" or found is None or found[3] != arch \
            or (int(found[1]), int(found[2])) > (2, 28):
        raise SystemExit(f"{wheel.name} is not manylinux_2_28 compatible: {text}")


def build(dist: Path, work: Path, free_threaded: str | None = None) -> list[Path]:
    """The sdists of HEAD and every wheel built from them, in `dist` (emptied first); with
    `free_threaded` (a free-threaded CPython 3.13 with the build requirements), zrecord's and
    loaderx's cp313t wheels beside the abi3 ones."""
    changed = run("git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", capture=True)
    if changed.strip():
        print("warning: the working tree has uncommitted changes; the release is built from HEAD "
              "without them", file=sys.stderr)
    for folder in (dist, work):
        shutil.rmtree(folder, ignore_errors=True)
    (work / "checkout").mkdir(parents=True)
    run("git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(work / "head.tar"), "HEAD")
    shutil.unpack_archive(work / "head.tar", work / "checkout")
    for name in PACKAGES:
        run(sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(dist),
            str(work / "checkout" / "packages" / name))
    archs = build_support().ARCHS
    for sdist in sorted(dist.glob("*.tar.gz")):
        shutil.unpack_archive(sdist, work / "sdists")
        src = work / "sdists" / sdist.name.removesuffix(".tar.gz")
        native = (src / "hatch_build.py").is_file()
        if not native:
            run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src))
            continue
        for system in build_support().SYSTEMS:
            # The free-threaded wheels are Linux only: macOS and Windows builds are abi3 only;
            # Windows builds are for x86-64 only.
            pythons = [sys.executable, *([free_threaded] if free_threaded and system == "linux" else [])]
            for arch in archs if system != "windows" else ("x86_64",):
                for python in pythons:
                    run(python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist),
                        str(src), env=release_env(arch, system))
    files = sorted(dist.iterdir())
    print("dist: " + ", ".join(f.name for f in files), file=sys.stderr)
    # 3 sdists, the converter's pure wheel, and zrecord's and loaderx's: abi3 (and cp313t)
    # for Linux and abi3 for macOS on every CPU, abi3 for Windows on x86-64.
    expected = 3 + 1 + 2 * (len(archs) * ((2 if free_threaded else 1) + 1) + 1)
    if len(files) != expected:
        raise SystemExit(f"expected {expected} files in dist/, found {len(files)}")
    return files


def own_wheels(house: Path, python: str) -> list[Path]:
    """The project's wheels in `house` that the CPython `python` on this machine can install:
    the pure ones and those built for its CPU and its kind (abi3, or cp313t on a free-threaded
    interpreter)."""
    arch = platform.machine()
    probe = "import sysconfig; print(bool(sysconfig.get_config_var('Py_GIL_DISABLED')))"
    free = run(python, "-c", probe, capture=True).strip() == "True"
    return sorted(wheel for wheel in house.glob("*.whl")
                  if wheel.name.split("-")[0].replace("_", "-") in OURS
                  and (wheel.name.endswith("-any.whl")
                       or (wheel.name.endswith(f"-manylinux_2_28_{arch}.whl")
                           and ("t-manylinux" in wheel.name) == free)))


def readme_install_line(readme: Path) -> list[str]:
    """The words of the README's install from the wheelhouse (`pip install --no-index ...`)."""
    lines = [line for line in readme.read_text().splitlines()
             if line.startswith("pip install --no-index")]
    if len(lines) != 1:
        raise SystemExit(f"{readme}: expected one line starting `pip install --no-index` (the "
                         f"install from the wheelhouse), found {len(lines)}")
    return shlex.split(lines[0], comments=True)


def download_dependencies(house: Path, python: str, readme: Path) -> list[Path]:
    """Fetch into `house` wheels of every third-party distribution that the project's wheels
    there need at run time on the CPython `python` and this machine's CPU, then check that the
    README's install line resolves from `house` alone. Returns the files added.

    pip resolves the project's own wheel files (loaderx's with its converter extra, which the
    README installs), so the set is what an install needs, transitive requirements and
    environment markers included. Markers are evaluated for the interpreter that runs pip, and
    so another CPython needs its own run (`python` is that interpreter), never pip's
    --python-version. Wheels only: a dependency without a wheel for the target fails here, not
    on a machine without a compiler."""
    ours = own_wheels(house, python)
    if not ours:
        raise SystemExit(f"{house}: none of the project's wheels for {platform.machine()}")
    before = set(house.iterdir())
    wanted = [f"{wheel}{WHEELHOUSE_EXTRAS.get(wheel.name.split('-')[0], '')}" for wheel in ours]
    run(python, "-m", "pip", "download", "-q", "--only-binary", ":all:", "--dest", str(house), *wanted)
    added = sorted(set(house.iterdir()) - before)
    size = sum(f.stat().st_size for f in added) / 2**20
    print(f"dependencies for {python}: {len(added)} wheels, {size:.0f} MiB", file=sys.stderr)
    words = readme_install_line(readme)
    if words[:2] != ["pip", "install"] or words.count("--find-links") != 1 \
            or words[words.index("--find-links") + 1:][:1] != [house.name]:
        raise SystemExit(f"{readme}: the install line is {shlex.join(words)}, but the check "
                         f"needs `pip install ... --find-links {house.name} ...` for {house}")
    # As on a machine with nothing but the folder: no pip configuration, no index.
    bare = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    run(python, "-m", *words, "--dry-run", "--ignore-installed", "-q", cwd=house.parent,
        base=bare, env={"PIP_CONFIG_FILE": os.devnull})
    return added


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path,
                    help="a scratch folder (emptied first) for the checkout and the unpacked sdists")
    ap.add_argument("--dist", type=Path, default=ROOT / "dist",
                    help="the wheelhouse (emptied first unless --deps-only; default dist/)")
    ap.add_argument("--deps-python", action="append", metavar="PYTHON",
                    help="a CPython for which dist/ gets the dependencies' wheels (repeatable; "
                         "default the one running this script)")
    ap.add_argument("--free-threaded", metavar="PYTHON",
                    help="a free-threaded CPython 3.13 that has the build requirements: zrecord's "
                         "and loaderx's cp313t wheels are built by it too")
    ap.add_argument("--deps-only", action="store_true",
                    help="only fetch the dependencies' wheels for the project's wheels already in "
                         "--dist, and check the README's install line against them")
    args = ap.parse_args(argv)
    pythons = args.deps_python or [sys.executable]
    if args.deps_only:
        for python in pythons:
            download_dependencies(args.dist, python, ROOT / "README.md")
        return 0
    if args.work is None:
        ap.error("--work is required to build a release")
    work = args.work / "release"
    files = build(args.dist, work, args.free_threaded)
    run(sys.executable, "-m", "twine", "check", "--strict", *(str(f) for f in files))
    for wheel in files:
        # macOS's and Windows' extensions: their own symbol checks (tools/macho.py, pe.py).
        if wheel.name.endswith(".whl") and "-macosx_" in wheel.name:
            run(sys.executable, str(ROOT / "tools" / "macho.py"), str(wheel))
        elif wheel.name.endswith("-win_amd64.whl"):
            run(sys.executable, str(ROOT / "tools" / "pe.py"), str(wheel))
        elif wheel.name.endswith(".whl") and not wheel.name.endswith("-any.whl"):
            audit(wheel)
    # The README of the released commit, as the sdists are.
    for python in pythons:
        download_dependencies(args.dist, python, work / "checkout" / "README.md")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:
        sys.exit(f"release: {' '.join(map(str, exc.cmd))} exited with {exc.returncode}")
