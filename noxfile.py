"""The one task runner of the monorepo.

`python -m nox` (no arguments) runs the full test suite: the `suite` session, which runs every
session of `SUITE`, two at a time. Other sessions (`demo`, `bench`, `release`, `arm64`, ...)
run by name, and so does each of the suite's.

The distributions are installed from wheels built from their folders once per run (see
`_pkg`), never from a package index. Those wheels are release builds for this machine (zstd
built in, docs/decisions/0004-zstd-in-wheels.md), so the tests run what users install.
"""

from __future__ import annotations

import atexit
import functools
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

import nox

ROOT = Path(__file__).resolve().parent
ZRECORD = ROOT / "packages" / "zrecord"
LOADERX = ROOT / "packages" / "loaderx"
CONVERTER = ROOT / "packages" / "loaderx-converter"
# The development test kit (never released): the loopback servers, the link proxy and their
# pytest fixtures, installed from this run's wheel into the sessions that run remote tests.
TESTKIT = ROOT / "packages" / "zrecord-testkit"
# The core's own C files (the SIGBUS guard), which every `zig test` of zig/src must compile.
CORE_C_SOURCES = [str(p) for p in sorted((ROOT / "zig" / "src").glob("*.c"))]
ZIG_VERSION = "0.17.1"  # the packages' build-system pin, which _zig_env checks it against
# Zig's caches, inside the checkout, and the Zig library they are built from: one for every
# native build of this run (`_pkg`, `roundtrip`) and every `zig test` a session runs (`_zig_env`).
ZIG_CACHE_DIRS = {"ZIG_GLOBAL_CACHE_DIR": str(ROOT / "zig" / ".zig-cache" / "global"),
                  "ZIG_LOCAL_CACHE_DIR": str(ROOT / "zig" / ".zig-cache" / "local")}
TORCH = "torch==2.13.0"
# The published loaderx that docs/coming-from.md migrates stores from (and the benchmarks'
# peer): our distribution's name, so always in a venv of its own.
PEER_LOADERX = "loaderx==2.5.9"

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = False
# The full test suite's sessions (`suite` runs them), each with the seconds it took in a fresh
# clone on a 2-core machine (one at a time, 84afecf): only the order they start in comes from
# these, longest first, so that the two run side by side end close together.
# loaderx-converter's tests run in the `loaderx` session, which installs it anyway: a session
# of their own cost the suite another environment of the same wheels (about a minute in CI).
SUITE = {"windows": 164, "loaderx": 141, "zrecord": 135, "freethreaded": 131, "macos": 117,
         "lint": 100, "pythons": 81, "wheelhouse": 69, "docs": 63, "distributed": 50,
         "roundtrip": 39, "fuzz": 39, "conformance": 19, "zig": 9, "pins": 5}
# Those that install none of the Linux wheels that `wheels` builds first: they start at once.
SUITE_WITHOUT_WHEELS = {"windows", "macos", "freethreaded", "roundtrip", "zig", "pins"}
nox.options.sessions = ["suite"]
nox.options.error_on_missing_interpreters = True

# Readers of large stores keep compact indexes in a cache folder (the user's ~/.cache by
# default). Every session here (tests, docs, demo, benchmarks) uses a folder of this run
# instead, removed at its end, so a run never leaves files in the user's cache.
if "ZRECORD_INDEX_CACHE" not in os.environ:
    os.environ["ZRECORD_INDEX_CACHE"] = tempfile.mkdtemp(prefix="nox-zrecord-index-")
    atexit.register(shutil.rmtree, os.environ["ZRECORD_INDEX_CACHE"], True)


def _interpreter(version: str) -> str:
    """Prefer pyenv's exact interpreters (their shims need PYENV_VERSION), else PATH."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin",
                                          f"python{version}")))
    return found[-1] if found else version


# The other supported CPythons; 3.11 (DEFAULT_PYTHON) runs everything in the other sessions.
PYTHONS = [_interpreter(v) for v in ("3.10", "3.12", "3.13")]
DEFAULT_PYTHON = _interpreter("3.11")


NATIVE_ARCH = platform.machine()


@functools.cache
def _zig_env() -> dict[str, str]:
    """Zig's settings for every native build and `zig test` of this run: the caches of
    ZIG_CACHE_DIRS, and as ZIG_LIB_DIR the library of one ziglang of ZIG_VERSION, installed
    once into .nox/ (a folder of its own: the runner's environment is left alone).

    Zig keys what it compiles from its library (a target's C library, its compiler runtime)
    by that library's path, and each isolated wheel build installs ziglang into a new
    temporary environment: so every build compiled them again, whatever the cache (in a fresh
    clone a Windows wheel of loaderx took 50 s, 11 s with one library for all). The builds'
    own ziglang is the same pinned version, checked here against this one."""
    # The pins as written in the [build-system] tables (read as text: tomllib needs 3.11, and
    # nox runs on 3.10 too).
    pinned = sorted({pin for folder in (ZRECORD, LOADERX) for pin in
                     re.findall(r'"(ziglang[^"]*)"', (folder / "pyproject.toml").read_text())})
    if pinned != [f"ziglang=={ZIG_VERSION}"]:
        raise SystemExit(f"the packages' builds pin {pinned}, the noxfile's ZIG_VERSION is "
                         f"{ZIG_VERSION}: a Zig library of one version cannot serve another's "
                         "compiler; make them equal")
    folder = ROOT / ".nox" / f"ziglang-{ZIG_VERSION}"
    lib = folder / "ziglang" / "lib"
    if not (lib / "std").is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=".ziglang-", dir=folder.parent))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        str(staged), f"ziglang=={ZIG_VERSION}"], check=True)
        try:
            staged.rename(folder)
        except OSError:  # another nox run put it there first (and may be building with it)
            shutil.rmtree(staged, ignore_errors=True)
            if not (lib / "std").is_dir():
                raise
    return {**ZIG_CACHE_DIRS, "ZIG_LIB_DIR": str(lib)}


def _build_support() -> ModuleType:
    """packages/build_support.py, the packages' native build (for its settings and searches)."""
    if str(ROOT / "packages") not in sys.path:
        sys.path.insert(0, str(ROOT / "packages"))
    import build_support

    return build_support


def _release() -> ModuleType:
    """tools/release.py, which the `release` session runs: imported here for the settings of a
    release build (`release_env`), which every session's wheels use."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import release

    return release


# Wheels built in this nox run, by distribution folder, CPU, interpreter and system. zrecord's and loaderx's wheels
# are abi3 (CPython 3.10+), so one build serves every session and interpreter: the Zig core,
# zstd and the Cython extensions compile once per run instead of once per session. The
# `roundtrip` session still builds from the sdists on purpose, with the same settings.
_WHEELS: dict[tuple[Path, str, str | None, str], str] = {}
# And kept between runs, under a key of everything the build reads (`_source_key`), so the
# README's two commands (the demo, then the tests) and every rerun build each wheel once: a
# changed source file makes a new key, and so a new build; a stale wheel is never used.
WHEEL_CACHE = ROOT / ".nox" / "wheels"
# What a wheel's build reads besides its own folder: the native core and the build's settings.
BUILD_INPUTS = [ROOT / "zig", ROOT / "packages" / "build_support.py", ROOT / "tools" / "release.py"]


def _source_key(folder: Path, env: dict[str, str]) -> str | None:
    """A digest of the files a build of `folder` reads (tracked or new, not git-ignored: build
    outputs are ignored; its tests are not built) and of its settings `env`; None outside a
    git checkout."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard", "--", str(folder), *map(str, BUILD_INPUTS),
                                 f":(exclude){(folder / 'tests').relative_to(ROOT)}"],
                                cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    digest = hashlib.sha256(json.dumps(sorted(env.items())).encode())
    for name in sorted(set(listed.decode().split("\0")) - {""}):
        path = ROOT / name
        if path.is_file():  # a tracked file deleted in the working tree is listed too
            digest.update(f"\0{name}\0{path.stat().st_size}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def _pkg(session: nox.Session, folder: Path, *extras: str, arch: str = NATIVE_ARCH,
         python: str | None = None, system: str = "linux") -> str:
    """A requirement for the distribution in `folder`: its release wheel for `arch` on `system`
    (built from this source once: in this run, or in an earlier one, `WHEEL_CACHE`), with
    `extras`. Built by the session's interpreter (an abi3 wheel), or by `python`, another
    CPython whose wheels differ (a free-threaded one's are cp313t: `freethreaded`)."""
    if (folder, arch, python, system) not in _WHEELS:
        env = _release().release_env(arch, system)
        flavour = arch if system == "linux" else f"{system}-{arch}"
        if python is not None:
            flavour += "-" + session.run(python, "-c", "import sysconfig; print(sysconfig."
                                         "get_config_var('SOABI'))", silent=True,
                                         external=True).strip()
        key = _source_key(folder, {**env, "flavour": flavour} if python else env)
        kept = WHEEL_CACHE / f"{folder.name}-{flavour}-{key}"
        if key is not None and len(found := list(kept.glob("*.whl"))) == 1:
            session.log(f"{found[0].name}: built from this source before ({kept})")
        else:
            out = Path(tempfile.mkdtemp(prefix=f"nox-wheel-{folder.name}-"))
            atexit.register(shutil.rmtree, out, True)
            session.run(python or "python", "-m", "pip", "wheel", "--no-deps", "-q", "--wheel-dir",
                        str(out), str(folder), env={**env, **_zig_env()}, external=True)
            if key is not None:
                _keep_wheel(out, kept)
            kept = kept if key is not None else out
        (wheel,) = kept.glob("*.whl")
        _WHEELS[folder, arch, python, system] = str(wheel)
    return _WHEELS[folder, arch, python, system] + (f"[{','.join(extras)}]" if extras else "")


def _keep_wheel(built: Path, kept: Path) -> None:
    """Move the wheel folder `built` to `kept` in one rename (a run that stops midway leaves no
    half-written wheel there), and drop the same distribution's wheels of older sources."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    # Older sources' wheels of this flavour only: not another flavour's whose name this one's
    # begins ("zrecord-x86_64-cpython-313t-..." begins as "zrecord-x86_64-"), nor this
    # source's, which a session running beside this one may have kept and be installing.
    flavour = kept.name.rsplit("-", 1)[0]
    for old in kept.parent.glob(flavour + "-*"):
        if old != kept and old.name.rsplit("-", 1)[0] == flavour:
            shutil.rmtree(old, ignore_errors=True)
    staged = Path(tempfile.mkdtemp(prefix=".staged-", dir=kept.parent))
    for wheel in built.glob("*.whl"):
        shutil.copy2(wheel, staged)
    try:
        staged.rename(kept)
    except OSError:  # another run kept the same source's wheel first
        shutil.rmtree(staged, ignore_errors=True)


def _install_all(session: nox.Session, *extras: str) -> None:
    session.install(*(_pkg(session, folder, *extras) for folder in (ZRECORD, LOADERX, CONVERTER)))


def _drop_venv(session: nox.Session) -> None:
    """Under CI, remove a session's virtual environment once it has passed: those with torch
    hold 1-2 GB each, and CI machines can have only a few GB of disk free (one ran out
    mid-suite, and every later session failed to create its own); the suite runs two sessions
    at a time. Locally they stay, for `nox -r`; `docs` keeps its own, which holds the built
    site."""
    if os.environ.get("CI") and isinstance(session.virtualenv.location, str):
        shutil.rmtree(session.virtualenv.location, ignore_errors=True)


@nox.session(python=False)
def suite(session: nox.Session) -> None:
    """The full test suite, what `python -m nox` and CI run: `wheels`, then every session of
    SUITE, each in a nox process of its own, two at a time (one on a one-core machine; or
    LOADERX_SUITE_LANES), the longest first. Most of a session's time is one core's work (a
    test run, an install), so the two cores of a CI machine finish the suite sooner: in a
    fresh clone here, 712 s against 1,171 s one after another (2026-12-06).

    Each session's output is printed whole when it ends, with its result and seconds, and kept
    in this session's temporary folder (logs/); a table of them all ends the run. A failed
    session does not stop the others; the suite fails if any did. Sessions that install the
    Linux wheels start once `wheels` has built them (or found them built), the others at once."""
    asked = os.environ.get("LOADERX_SUITE_LANES", "")
    lanes = int(asked) if asked.isdigit() else min(2, os.cpu_count() or 1)
    if asked and (not asked.isdigit() or lanes < 1):
        session.error(f"LOADERX_SUITE_LANES is how many sessions run at a time, a whole number "
                      f"of at least 1; it is {asked!r}")
    logs = Path(session.create_tmp()).resolve() / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    _zig_env()  # installed here once, before any two sessions could both find it missing
    queue = _SuiteQueue(sorted(SUITE, key=SUITE.__getitem__, reverse=True), logs, session)
    threads = [threading.Thread(target=queue.lane, args=(number,), name=f"lane-{number}")
               for number in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    session.log("the suite, session by session (seconds; lanes: %d):", lanes)
    for name, (result, seconds) in queue.results.items():
        session.log(f"  {name:<14} {result:<10} {seconds:6.0f}")
    # A lane that stopped on an error of its own left sessions without a result: failures too.
    failed = [name for name in ("wheels", *SUITE) if queue.results.get(name, ("",))[0] != "passed"]
    if failed:
        session.error(f"failed or not run: {', '.join(failed)} (their output is above, and in {logs})")


class _SuiteQueue:
    """The sessions `suite` has yet to start, taken one at a time by its lanes; lane 0 builds
    the wheels first, and sessions that need them wait until it has."""

    def __init__(self, pending: list[str], logs: Path, session: nox.Session) -> None:
        self.pending, self.logs, self.session = pending, logs, session
        self.results: dict[str, tuple[str, float]] = {}
        self.wheels: bool | None = None  # built (True), failed (False), building (None)
        self.cond = threading.Condition()

    def lane(self, number: int) -> None:
        if number == 0:
            built = False
            try:
                built = self.run("wheels")
            finally:  # the other lanes wait for this, whatever happened to it
                with self.cond:
                    self.wheels = built
                    self.cond.notify_all()
        while (name := self.take()) is not None:
            if name in SUITE_WITHOUT_WHEELS or self.wheels:
                self.run(name)
            else:
                with self.cond:
                    self.results[name] = ("not run", 0.0)
                    self.session.log(f"{name}: not run, as the wheels it installs did not build")

    def take(self) -> str | None:
        with self.cond:
            while True:
                ready = [name for name in self.pending
                         if name in SUITE_WITHOUT_WHEELS or self.wheels is not None]
                if ready or not self.pending:
                    break
                self.cond.wait()
            if not ready:
                return None
            self.pending.remove(ready[0])
            return ready[0]

    def run(self, name: str) -> bool:
        """Run the session `name` in a nox process of its own; print its output when it ends."""
        log = self.logs / f"{name}.log"
        self.session.log(f"{name}: started")
        started = time.monotonic()
        with open(log, "wb") as out:
            code = subprocess.run([sys.executable, "-m", "nox", "--noxfile", str(ROOT / "noxfile.py"),
                                   "-s", name], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                  stdin=subprocess.DEVNULL).returncode
        seconds = time.monotonic() - started
        result = "passed" if code == 0 else f"failed ({code})"
        with self.cond:
            self.results[name] = (result, seconds)
            sys.stdout.write(f"\n===== {name}: {result} in {seconds:.0f} s =====\n")
            sys.stdout.write(log.read_text(errors="replace"))
            sys.stdout.write(f"===== end of {name} =====\n\n")
            sys.stdout.flush()
        return code == 0


@nox.session(python=DEFAULT_PYTHON)
def wheels(session: nox.Session) -> None:
    """This source's wheels of the four package folders for this machine, built (or found
    built) into .nox/wheels/, as every session that installs them would: the suite's first
    step, so that its sessions running side by side find them built instead of building the
    same ones at once."""
    for folder in (ZRECORD, LOADERX, CONVERTER, TESTKIT):
        session.log(_pkg(session, folder))


@nox.session(python=DEFAULT_PYTHON)
def zrecord(session: nox.Session) -> None:
    """zrecord's tests, alone: nothing from loaderx is installed. zrecord's `remote` tests run
    here only, against a moto_server they start (the test kit's fixtures and its s3 extra; the
    client from zrecord's test-remote extra); loaderx's (the DataLoader over URLs, an HTTP
    server in a thread) run in its own session. Then the test kit's own tests, here too (the
    arguments after `--` select zrecord's tests only: a `-k` of zrecord's would match none of
    the kit's, and pytest fails a run that selects nothing)."""
    session.install(_pkg(session, ZRECORD, "test", "test-remote"), _pkg(session, TESTKIT, "s3"))
    session.run("python", "-c", "import importlib.util as u; "
                "assert u.find_spec('loaderx') is None, 'loaderx must not be installed'")
    session.run("pytest", "-q", str(ZRECORD / "tests"), *session.posargs)
    session.run("pytest", "-q", str(TESTKIT / "tests"))


@nox.session(python=DEFAULT_PYTHON)
def loaderx(session: nox.Session) -> None:
    """loaderx's tests (with the seed's examples), zrecord installed beside it, then
    loaderx-converter's in the same environment (the `converter` session alone). The published
    loaderx 2.5.9 goes into a venv of its own, for the migration test (test_migrate_2x.py).

    torch is pinned to the CPU wheel this machine kind carries (an unpinned torch would pull a
    multi-GB CUDA build); jax installs its CPU build.
    """
    _install_all(session, "test")
    # The DataLoader over stores opened by URL (tests/test_remote.py) reads through obstore,
    # from the test kit's Range HTTP server; the converter's conversions to s3:// URLs
    # (tests/test_convert_url.py) publish to its moto_server (the kit's s3 extra).
    session.install(TORCH, "jax", _pkg(session, ZRECORD, "remote"), _pkg(session, TESTKIT, "s3"))
    # The migration of stores written by the published loaderx 2.x (docs/coming-from.md,
    # tests/test_migrate_2x.py) needs that loaderx, which shares our name, in its own venv.
    peer = Path(session.create_tmp()) / "peer-loaderx-2.5.9"
    session.run("python", "-m", "venv", "--clear", str(peer))
    session.run(str(peer / "bin" / "python"), "-m", "pip", "install", "-q", PEER_LOADERX,
                external=True)
    session.run("pytest", "-q", str(LOADERX / "tests"), *session.posargs,
                env={"LOADERX_PEER_PYTHON": str(peer / "bin" / "python")})
    session.run("pytest", "-q", str(CONVERTER / "tests"), *session.posargs)
    _drop_venv(session)


@nox.session(python=DEFAULT_PYTHON)
def converter(session: nox.Session) -> None:
    """loaderx-converter's tests alone (in the suite they run in the `loaderx` session)."""
    _install_all(session, "test")
    # Conversions to s3:// URLs publish to the test kit's moto_server, through obstore.
    session.install(_pkg(session, ZRECORD, "remote"), _pkg(session, TESTKIT, "s3"))
    session.run("pytest", "-q", str(CONVERTER / "tests"), *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
def distributed(session: nox.Session) -> None:
    """loaderx.ray on a local Ray instance (loaderx[ray] alone, plus torch), and the
    offline elastic-resume and store-identity tests with only that installed.

    The `loaderx` session skips test_ray.py, which needs Ray; here a missing Ray is an error.
    The gloo DDP example and the two-host torchrun recipe (test_ddp.py) run in `loaderx`.
    """
    session.install(_pkg(session, ZRECORD), _pkg(session, LOADERX, "test", "ray"))
    # The documented calls: iter_batches, and iter_torch_batches (which needs pydantic, from
    # the extra, and torch, which the user installs).
    session.install(TORCH)
    session.run("python", "-c", "import ray.data, pydantic")
    session.run("pytest", "-q", *(str(LOADERX / "tests" / name) for name in
                                  ("test_ray.py", "test_elastic.py", "test_digests.py")),
                *session.posargs)
    _drop_venv(session)


@nox.session(python=PYTHONS)
def pythons(session: nox.Session) -> None:
    """zrecord's tests on the other supported CPythons, with the one abi3 wheel of this run.

    The 8 GiB memory tests (`heavy`), the process-level ones (`slow`: kills, fuzz
    self-tests, concurrency) and those against a server process (`remote`) exercise the OS,
    the native core and the network, not the interpreter; they run once, in `zrecord`. The
    test kit (no dependencies) is installed for its thread helper, which test_concurrency.py
    imports when it is collected; none of its servers starts here."""
    session.install(_pkg(session, ZRECORD, "test"), _pkg(session, TESTKIT))
    session.run("pytest", "-q", "-m", "not heavy and not slow and not remote", str(ZRECORD / "tests"),
                *session.posargs)


def _freethreaded_venv(session: nox.Session, tmp: Path) -> Path:
    """A fresh virtual environment `tmp`/venv-313t of the free-threaded CPython 3.13 that
    tools/freethreaded.py builds once (or finds built)."""
    found = session.run(sys.executable, str(ROOT / "tools" / "freethreaded.py"), silent=True,
                        external=True)
    venv = tmp / "venv-313t"
    session.run(found.strip().splitlines()[-1], "-m", "venv", "--clear", str(venv), external=True)
    return venv


@nox.session(python=False)
def freethreaded(session: nox.Session) -> None:
    """zrecord's and loaderx's tests on a free-threaded CPython 3.13 (3.13t), with the GIL off.

    The interpreter is built once by tools/freethreaded.py (Debian 13's CPython source, root
    for apt-get; ~5 minutes on 2 cores) into a cache folder outside the checkout, and reused
    after. zrecord's and loaderx's cp313t wheels are built by it, then installed into a fresh
    environment as a user without a compiler would (binary wheels only, nothing but the
    environment on PATH). The tests run under tools/gil_guard.py, which fails the run if the
    GIL is on after importing every extension or at the end. Left out: the 8 GiB tests
    (`heavy`, as in `pythons`), and what needs a dependency with no cp313t wheel here
    (`FREETHREADED_LEFT_OUT`): the tests against servers (`remote`: obstore 0.12), and
    loaderx's tests of torch, jax and the converter (datasets, through hf-xet); Ray's skip
    themselves."""
    tmp = Path(session.create_tmp()).resolve()
    venv = _freethreaded_venv(session, tmp)
    vpython = str(venv / "bin" / "python")
    wheels = [_pkg(session, folder, python=vpython) for folder in (ZRECORD, LOADERX)]
    wheels.append(_pkg(session, TESTKIT))  # pure Python, no dependencies: the thread helper
    bare = ["env", "-i", f"PATH={venv / 'bin'}", f"HOME={tmp}"]
    session.run(*bare, vpython, "-m", "pip", "install", "-q", "--only-binary", ":all:", *wheels,
                external=True)
    # The test tools, as binary wheels where one exists for 3.13t (Pillow's newest has none, and
    # built from source it lacks the codecs the transform tests decode); zstandard (the
    # reference decoder of zrecord's codec tests) has none at all and compiles here.
    session.run(vpython, "-m", "pip", "install", "-q", "--prefer-binary", "pytest>=8",
                "zstandard>=0.22", "tqdm>=4.60", "pillow>=10", external=True)
    guard = {"PYTHONPATH": str(ROOT / "tools")}
    session.run(vpython, "-m", "pytest", "-q", "-p", "gil_guard", "-m", "not heavy and not remote",
                str(ZRECORD / "tests"), *session.posargs, env=guard, external=True)
    # Node IDs as pytest names them: relative to the repository's root, nox's folder.
    tests = (LOADERX / "tests").relative_to(ROOT)
    left_out = [f"--ignore={tests / name}" if name.endswith(".py") else f"--deselect={tests / name}"
                for name in FREETHREADED_LEFT_OUT]
    session.run(vpython, "-m", "pytest", "-q", "-p", "gil_guard", "-m", "not remote", *left_out,
                str(LOADERX / "tests"), *session.posargs, env=guard, external=True)


# loaderx's tests that `freethreaded` leaves out: they need torch or jax (test_torch.py, the
# seed's transfer examples) or loaderx-converter's datasets (the demo, the typing uses), none
# of which can be installed on 3.13t here (no cp313t wheel of torch 2.13, jax's jaxlib, or
# datasets' hf-xet, which needs Rust to build).
FREETHREADED_LEFT_OUT = ["test_torch.py", "test_typing_uses.py", "test_demo_log.py",
                         "test_import_paths.py::test_converter_import_with_the_distribution",
                         "test_seed_examples.py::test_cpu_to_gpu_transfer_with_torch",
                         "test_seed_examples.py::test_cpu_to_gpu_transfer_with_pinned_memory",
                         "test_seed_examples.py::test_jax_device_put"]


def _libzstd() -> Path:
    """The platform's libzstd.so.1, found as the packages' build finds it."""
    return Path(_build_support().find_libzstd(ROOT / "zig"))


@nox.session(python=False)
def zig(session: nox.Session) -> None:
    """The Zig core's own tests (Debug build, safety checks on)."""
    session.run(sys.executable, "-m", "pip", "install", "-q", f"ziglang=={ZIG_VERSION}",
                external=True)
    env = _zig_env()
    # The core's C files (the SIGBUS guard) are compiled beside the Zig root module, as in the
    # extension's build.
    session.run(sys.executable, "-m", "ziglang", "test", str(ROOT / "zig" / "src" / "root.zig"),
                *CORE_C_SOURCES, "-lc", str(_libzstd()), env=env, external=True)


@nox.session(python=DEFAULT_PYTHON)
def macos(session: nox.Session) -> None:
    """The core and both extensions built for macOS 11 on arm64 and x86-64, and checked: nothing
    here runs them (no macOS machine; docs/release.md's platform table says so).

    For each CPU: the Zig suite compiled and linked (`zig test --test-no-exec`, zstd compiled
    for the target and linked in); zrecord's and loaderx's release wheels
    (`cp310-abi3-macosx_11_0_<arm64|x86_64>`), whose extensions tools/macho.py checks: built
    for that CPU and macOS 11, loading libSystem only, exporting PyInit_<name> (and the core's
    zr_*) only, importing only Python's C API and the libSystem symbols of
    tools/macos_libsystem.txt. First the tests of that check."""
    session.install(f"ziglang=={ZIG_VERSION}", "pytest")
    session.run("pytest", "-q", str(ROOT / "tools" / "test_macho.py"))
    tmp = Path(session.create_tmp()).resolve()
    wheels = []
    for arch in _build_support().ARCHS:
        env = _release().release_env(arch, "macos")
        libzstd = session.run("python", str(ROOT / "packages" / "build_support.py"), "zstd", arch,
                              "macos", env={**env, **_zig_env()}, silent=True)
        assert isinstance(libzstd, str)
        session.run("python", "-m", "ziglang", "test", "-target",
                    _build_support().zig_target(arch, "macos"), "--test-no-exec",
                    f"-femit-bin={tmp / f'zig-tests-{arch}'}", str(ROOT / "zig" / "src" / "root.zig"),
                    *CORE_C_SOURCES, "-lc", libzstd.strip().splitlines()[-1], env=_zig_env())
        wheels += [_pkg(session, folder, arch=arch, system="macos") for folder in (ZRECORD, LOADERX)]
    session.run("python", str(ROOT / "tools" / "macho.py"), *wheels)
    _drop_venv(session)


@nox.session(python=DEFAULT_PYTHON)
def windows(session: nox.Session) -> None:
    """The Zig suite cross-compiled for Windows x86-64 (MinGW-w64, zstd compiled for it) and run
    under Wine: the core's Windows half (zig/src/sys_windows.zig) as far as a machine without
    Windows can test it. Wine is installed with apt-get the first time (tools/wine.py, root);
    its prefix is kept in build/wine-prefix. Then zrecord's and loaderx's `cp310-abi3-win_amd64`
    wheels, checked by tools/pe.py (after its own tests): exports, and imports from python3.dll,
    the UCRT and the system's DLLs only. No Python test runs on Windows (no Windows CPython
    reaches these machines)."""
    session.install(f"ziglang=={ZIG_VERSION}", "pytest")
    session.run("pytest", "-q", str(ROOT / "tools" / "test_pe.py"))
    prefix = ROOT / "build" / "wine-prefix"
    wine = session.run("python", str(ROOT / "tools" / "wine.py"), str(prefix), silent=True,
                       external=True)
    assert isinstance(wine, str)
    env = _release().release_env("x86_64", "windows")
    libzstd = session.run("python", str(ROOT / "packages" / "build_support.py"), "zstd", "x86_64",
                          "windows", env={**env, **_zig_env()}, silent=True)
    assert isinstance(libzstd, str)
    # Windows gives a program's main thread 1 MiB of stack unless the program asks; Linux 8.
    session.run("python", "-m", "ziglang", "test", "-target", "x86_64-windows-gnu", "--stack",
                str(16 << 20), str(ROOT / "zig" / "src" / "root.zig"), *CORE_C_SOURCES, "-lc",
                libzstd.strip().splitlines()[-1], "--test-cmd", wine.strip().splitlines()[-1],
                "--test-cmd-bin",
                env={**_zig_env(), "WINEDEBUG": "-all", "WINEPREFIX": str(prefix)})
    wheels = [_pkg(session, folder, arch="x86_64", system="windows") for folder in (ZRECORD, LOADERX)]
    session.run("python", str(ROOT / "tools" / "pe.py"), *wheels)
    _drop_venv(session)


@nox.session(python=DEFAULT_PYTHON)
def conformance(session: nox.Session) -> None:
    """The format as a public contract: every vector of conformance/v1 (format 1.0),
    conformance/v1.1 (format 1.1) and conformance/v1.2 (format 1.2, index parts) through the
    reference reader (v1.2 in both of its modes), the zrecord package and the Zig core (exact
    records, exact error codes; the cases v1.2 supersedes left out); every MUST of spec/ cited by
    a case or a test; the generator reproduces the committed bytes.

    Only zrecord is installed: the runners need nothing else, and installing the converter
    would pull `datasets` into a session that never uses it."""
    session.install(_pkg(session, ZRECORD, "test"))
    session.install("zstandard", "jsonschema", f"ziglang=={ZIG_VERSION}")
    conf = ROOT / "conformance"
    session.run("python", str(conf / "run_reference.py"))
    session.run("pytest", "-q", str(conf / "test_conformance.py"), *session.posargs)
    for folder in ("v1", "v1.1", "v1.2"):
        env = {**_zig_env(), "ZR_CONFORMANCE_DIR": str(conf / folder)}
        session.run("python", "-m", "ziglang", "test", str(ROOT / "zig" / "src" / "conformance_test.zig"),
                    *CORE_C_SOURCES, "-lc", str(_libzstd()), "--test-filter", "conformance v1",
                    env=env)
    session.run("python", str(conf / "must_coverage.py"))
    session.run("python", str(conf / "generate.py"), "--check")


@nox.session(python=DEFAULT_PYTHON)
def fuzz(session: nox.Session) -> None:
    """Fuzz the reader with mutated valid stores for ZRECORD_FUZZ_SECONDS (default 30: a smoke run
    that keeps CI under 15 minutes; long runs set it, e.g. 600).

    Crashes, hangs, overallocations and inconsistent reads fail the session; each finding's
    store and its replay command land in fuzz-findings/ under the session's temporary folder,
    or under ZRECORD_FUZZ_FINDINGS when set. ZRECORD_FUZZ_SEED picks another input sequence.
    """
    session.install(_pkg(session, ZRECORD, "test"), "xxhash")  # xxhash only speeds up the mutator
    seconds = os.environ.get("ZRECORD_FUZZ_SECONDS", "30")
    findings = os.environ.get("ZRECORD_FUZZ_FINDINGS",
                              os.path.join(session.create_tmp(), "fuzz-findings"))
    session.run("python", str(ZRECORD / "tests" / "fuzz" / "fuzz_store.py"), "--seconds", seconds,
                "--findings", findings, *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
def pins(session: nox.Session) -> None:
    """Cross-check: the versions each distribution pins are satisfied by the sibling packages."""
    session.install("packaging")
    session.run("python", str(ROOT / "tools" / "check_pins.py"))


def _build_requires() -> list[str]:
    """The union of the three distributions' [build-system] requirements."""
    import tomllib  # Python 3.11+: here only, so that nox itself still runs on 3.10

    return sorted({req for folder in (ZRECORD, LOADERX, CONVERTER) for req in
                   tomllib.loads((folder / "pyproject.toml").read_text())["build-system"]["requires"]})


@nox.session(python=DEFAULT_PYTHON)
def roundtrip(session: nox.Session) -> None:
    """Build each sdist, then a wheel from that sdist in a clean folder, install and import.

    The wheels are built as `release` builds them for this machine (tools/release.py
    release_env: zstd compiled in from the pinned sources), and each must carry the release's
    tag: cp310-abi3-manylinux_2_28_<cpu> for zrecord and loaderx, py3-none-any for the
    converter. A build from source with the default settings links the platform's libzstd and
    is tagged linux_<cpu> (what `pip install packages/zrecord` and an editable install build;
    docs/release.md).

    The builds run in this session's environment, with the union of the three pyproject.toml
    [build-system] requirements installed once (an isolated environment per build cost about
    a minute of CI); the test sessions' wheels are built in isolation and check those lists.
    """
    session.install("build==1.6.1", *_build_requires())
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        for pkg in (ZRECORD, LOADERX, CONVERTER):
            session.run("python", "-m", "build", "--no-isolation", "--sdist", "--outdir",
                        str(tmp_path / "sdist"), str(pkg))
        for sdist in sorted((tmp_path / "sdist").glob("*.tar.gz")):
            clean = tmp_path / "clean" / sdist.name
            clean.mkdir(parents=True)
            shutil.unpack_archive(str(sdist), str(clean))
            (src,) = list(clean.iterdir())
            native = (src / "hatch_build.py").is_file()
            session.run("python", "-m", "build", "--no-isolation", "--wheel", "--outdir",
                        str(tmp_path / "wheels"), str(src),
                        env={**_release().release_env(NATIVE_ARCH), **_zig_env()} if native else None)
        wheels = sorted(str(p) for p in (tmp_path / "wheels").glob("*.whl"))
        session.log("wheels: " + ", ".join(os.path.basename(w) for w in wheels))
        for wheel in wheels:
            # name-version-python-abi-platform.whl; the release's tags (docs/release.md).
            name, _, tags = os.path.basename(wheel).removesuffix(".whl").split("-", 2)
            want = ("py3-none-any" if name == "loaderx_converter"
                    else f"cp310-abi3-manylinux_2_28_{NATIVE_ARCH}")
            if tags != want:
                session.error(f"{os.path.basename(wheel)} is tagged {tags}; a release wheel of "
                              f"{name} is {want}")
        session.install(*wheels)
    session.run("python", "-c", ROUNDTRIP_CHECK)


ROUNDTRIP_CHECK = """
import os, tempfile, numpy as np
import zrecord, loaderx.zrecord
from zrecord import Dense
assert '_native.abi3' in zrecord._native.__file__ and 'site-packages' in zrecord._native.__file__
with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, 's')
    with Dense.create(p, np.float32, (3,), codec='raw') as w:
        w.append(np.arange(12, dtype=np.float32).reshape(4, 3))
    with loaderx.zrecord.Dense.open(p) as r:
        assert r[3].tolist() == [9.0, 10.0, 11.0]
import loaderx._sampler
from loaderx.sampler import Sampler
assert 'site-packages' in loaderx._sampler.__file__  # built from the sdist's _sampler_core.h
assert sorted(Sampler(8, 8, 'cyclic', seed=1).next().tolist()) == list(range(8))
print('sdist -> wheel round trip ok')
"""


@nox.session(python=DEFAULT_PYTHON)
def wheelhouse(session: nox.Session) -> None:
    """A new user's install from a wheelhouse, with no compiler, exactly as README.md says:
    this run's release wheels for this machine (zstd built in) in a folder `dist`, with the
    wheels of their third-party dependencies fetched by the release's own code
    (tools/release.py --deps-only); then the README's `pip install --no-index --find-links
    dist ...` line, read from README.md and run as written beside that folder in a fresh
    virtual environment, with an empty environment (`env -i`: PATH holds only the fresh
    environment's bin/, no pip configuration); then write, read, load and convert
    (tools/smoke_install.py).

    Before that, every other install line the users are shown (README.md, docs/, the packages'
    READMEs, and the `pip install` hints of the packages' messages and docstrings, collected
    by tools/install_lines.py) is resolved as written from the repository's root by `pip
    install --dry-run` in a fresh environment of its own (with this run's wheel of each
    package folder a line names, whose metadata it is), and fails where one of the
    project's packages would come from anywhere but this clone (the `loaderx` on PyPI is
    another project) or a dependency at a version the packages refuse; the wheelhouse's own
    lines resolve beside this folder `dist`. A real install of each from source would build
    the native code again for every line: the `roundtrip` session builds from source once, and
    the one real install here is the README's."""
    tmp = Path(session.create_tmp()).resolve()  # absolute: the install runs from inside it
    house, venv = tmp / "dist", tmp / "fresh-venv"
    for folder in (house, venv):
        shutil.rmtree(folder, ignore_errors=True)
    house.mkdir()
    for folder in (ZRECORD, LOADERX, CONVERTER):
        shutil.copy2(_pkg(session, folder), house)
    session.run("python", str(ROOT / "tools" / "release.py"), "--deps-only", "--dist", str(house))
    session.install("packaging")
    # pip reads a package folder's metadata only by building it: the lines get this run's
    # wheel of each folder they name instead (tools/install_lines.py says why).
    wheels = [f"--wheel={folder.relative_to(ROOT)}={_pkg(session, folder)}"
              for folder in (ZRECORD, LOADERX, CONVERTER, TESTKIT)]
    session.run("python", str(ROOT / "tools" / "install_lines.py"), "--venv",
                str(tmp / "lines-venv"), "--wheelhouse", str(tmp), *wheels)
    session.run("python", "-m", "venv", str(venv))
    # Nothing of this machine's environment (nox's PATH and VIRTUAL_ENV, pip's settings) reaches
    # the install; HOME is the session's folder, so no user configuration or cache is read.
    bare = ["env", "-i", f"PATH={venv / 'bin'}", f"HOME={tmp}", f"PIP_CONFIG_FILE={os.devnull}",
            "HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1"]
    line = _release().readme_install_line(ROOT / "README.md")
    program = shutil.which(line[0], path=str(venv / "bin"))
    if program is None:
        session.error(f"README.md's install line runs {line[0]!r}, which the fresh environment lacks")
    with session.chdir(tmp):
        session.run(*bare, program, *line[1:], external=True)
    session.run(*bare, str(venv / "bin" / "python"), str(ROOT / "tools" / "smoke_install.py"),
                _build_support().ZSTD_VERSION, external=True)
    _drop_venv(session)


@nox.session(python=DEFAULT_PYTHON)
def release(session: nox.Session) -> None:
    """The wheelhouse dist/ of a release, from a clean checkout of HEAD (docs/release.md).

    The three sdists are built from `git archive HEAD`, so nothing uncommitted or built in the
    working tree reaches them; every wheel is built from its unpacked sdist: zrecord and
    loaderx as cp310-abi3 manylinux_2_28 wheels for x86-64 and ARM64 (cross-compiled by Zig,
    zstd built in), and as cp313t wheels for both, built by a free-threaded CPython 3.13
    (tools/freethreaded.py builds one once, ~5 minutes, root for apt-get); loaderx-converter as
    a pure wheel. Then `twine check --strict` on all of
    them and `auditwheel show` on each binary wheel (tools/release.py). Takes ~10 minutes on 2
    cores, cold.

    Then the wheels of every third-party dependency (loaderx's converter extra included) for
    this session's CPython and this machine's CPU are fetched into dist/ too, so that the
    README's `pip install --no-index --find-links dist 'loaderx[converter]'` works as written,
    and that line is resolved from dist/ alone. `nox -s release -- --deps-python python3.12`
    (repeatable) adds another CPython's."""
    session.install(*_build_requires(), "build==1.6.1", "twine==7.0.0", "auditwheel==6.8.2")
    # The cp313t wheels' builder: a free-threaded CPython (tools/freethreaded.py builds it once)
    # in an environment of its own with the same build requirements.
    tmp = Path(session.create_tmp()).resolve()
    venv = _freethreaded_venv(session, tmp)
    session.run(str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *_build_requires(),
                "build==1.6.1", external=True)
    session.run("python", str(ROOT / "tools" / "release.py"), "--work", str(tmp),
                "--free-threaded", str(venv / "bin" / "python"), *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
def arm64(session: nox.Session) -> None:
    """zrecord's and loaderx's tests on this run's aarch64 release wheels, under qemu-user.

    Not in the default list: it needs root on Debian (apt-get, binfmt_misc, chroot) and takes
    ~15 minutes the first time. The wheels are cross-compiled by Zig on this machine exactly as
    `release` builds them; Debian's arm64 python3 runs them in a chroot, with NumPy, pytest and
    zstandard wheels for aarch64 fetched here by pip (tools/arm64.py). By default the tests
    marked `heavy`, `slow` or `remote` are left out; `nox -s arm64 -- -m "not heavy and not remote"` runs the full suite
    of `zrecord` (docs/release.md has the figures)."""
    tool = str(ROOT / "tools" / "arm64.py")
    session.run("python", tool, "root")
    wheels = [_pkg(session, folder, arch="aarch64") for folder in (ZRECORD, LOADERX)]
    session.run("python", tool, "test", *wheels, "--", *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
def lint(session: nox.Session) -> None:
    """The house rules (tools/tidy.py: function length, Zig line length and format, unused
    externs, stale references to Zig code); ruff on everything; mypy --strict on the
    pure-Python code of the three packages and of the test kit, and on the typing snippets of
    zrecord's public API (packages/zrecord/tests/typing); the compiled modules' stubs checked
    against the built extension by mypy.stubtest; the Linux extensions' Python symbols against
    the Windows build's import list (tools/elf.py).

    loaderx is type-checked without its optional frameworks' types being required (Ray is
    not installed here; torch is, as its types are what loaderx.torch is written against).
    stubtest imports the real extensions, so zrecord and loaderx are installed from this run's
    wheels; the names Cython adds to every module (pickling helpers, doctest table) are
    allowlisted in each package's stubtest-allowlist.txt.
    """
    session.install("ruff==0.17.6", "mypy==2.4.1", "numpy", "nox", "pytest", TORCH,
                    f"ziglang=={ZIG_VERSION}")
    # The house rules (tools/tidy.py), after the tests that show each rule catches a
    # deliberate violation; the tests of the collector of the docs' install lines, which
    # the `wheelhouse` session resolves (tools/install_lines.py), of the ELF check, of the
    # lock that keeps the tools' apt-get calls one at a time (tools/apt_lock.py), and of the
    # zstd builds that sessions side by side share (tools/test_build_support.py).
    session.run("pytest", "-q", str(ROOT / "tools" / "test_tidy.py"),
                str(ROOT / "tools" / "test_install_lines.py"), str(ROOT / "tools" / "test_elf.py"),
                str(ROOT / "tools" / "test_apt_lock.py"),
                str(ROOT / "tools" / "test_build_support.py"))
    session.run("python", str(ROOT / "tools" / "tidy.py"))
    wheels = [_pkg(session, ZRECORD), _pkg(session, LOADERX)]
    session.install(*wheels)
    # Every Python C-API name the Linux extensions use is in the Windows build's import list
    # (tools/elf.py): a name missing there would fail only the `windows` session's link, late.
    session.run("python", str(ROOT / "tools" / "elf.py"), *wheels)
    session.run("ruff", "check", "noxfile.py", "packages", "benchmarks", "tools")
    session.run("mypy", "--ignore-missing-imports", "--strict",
                str(ZRECORD / "src" / "zrecord"), env={"MYPYPATH": str(ZRECORD / "src")})
    session.run("mypy", "--ignore-missing-imports", "--strict",
                str(LOADERX / "src" / "loaderx"),
                env={"MYPYPATH": f"{LOADERX / 'src'}:{ZRECORD / 'src'}"})
    session.run("mypy", "--ignore-missing-imports", "--strict",
                str(CONVERTER / "src" / "loaderx_converter"),
                env={"MYPYPATH": f"{CONVERTER / 'src'}:{ZRECORD / 'src'}"})
    # The test kit imports nothing of the packages (pytest only, for its fixtures).
    session.run("mypy", "--ignore-missing-imports", "--strict",
                str(TESTKIT / "src" / "zrecord_testkit"), env={"MYPYPATH": str(TESTKIT / "src")})
    # What users' code sees of zrecord's types: uses that must type-check, and uses each of
    # which must be rejected with its own error (readers have no append, writers no indexing).
    session.run("python", str(ZRECORD / "tests" / "typing" / "check_types.py"),
                env={"MYPYPATH": str(ZRECORD / "src")})
    # The same for loaderx's (the DataLoader's batches, the Sampler's and the converter's
    # words); mypy reads the converter from its source, as `loaderx.converter` imports it.
    session.run("python", str(ZRECORD / "tests" / "typing" / "check_types.py"),
                str(LOADERX / "tests" / "typing"),
                env={"MYPYPATH": f"{LOADERX / 'src'}:{ZRECORD / 'src'}:{CONVERTER / 'src'}"})
    # From a folder outside the checkout, so the installed wheel (not src/) is imported.
    with session.chdir(session.create_tmp()):
        session.run("python", "-m", "mypy.stubtest", "loaderx._sampler", "--allowlist",
                    str(LOADERX / "stubtest-allowlist.txt"))
        session.run("python", "-m", "mypy.stubtest", "zrecord._native", "--allowlist",
                    str(ZRECORD / "stubtest-allowlist.txt"))
    _drop_venv(session)


@nox.session(python=DEFAULT_PYTHON)
def docs(session: nox.Session) -> None:
    """The documentation site, built strictly; its reference and its code blocks checked.

    - docs/check_docstrings.py: every public function, class, method and property has one.
    - docs/tools/build_site.py: stages the published pages (docs/ without its tools and
      examples, spec/, the conformance README, the changelogs; not the code, tests or vectors),
      writes the command-line reference from the installed programs' --help, runs
      `mkdocs build --strict` (a broken link or anchor fails) and checks that every public
      name has an entry in the API reference (docs/tools/check_reference.py).
    - docs/tools/run_snippets.py: runs every Python code block of the pages and READMEs, as
      printed, with the data each page defines in hidden setup comments.

    The site lands in the session's temporary folder (the last line says where). torch, jax
    and numba are installed because the pages' examples use them.
    """
    _install_all(session, "test")
    # ruff formats the reference's signatures.
    session.install("mkdocs==1.6.1", "mkdocstrings==1.0.8", "mkdocstrings-python==2.0.11",
                    "ruff==0.17.6", TORCH, "jax", "numba==0.68.1")
    session.run("python", str(ROOT / "docs" / "check_docstrings.py"))
    work = Path(session.create_tmp()) / "docs"
    session.run("python", str(ROOT / "docs" / "tools" / "build_site.py"), str(work))
    session.run("python", str(ROOT / "docs" / "tools" / "run_snippets.py"), *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
def demo(session: nox.Session) -> None:
    """The main job: convert real data shipped by a package, train from it, print throughput."""
    _install_all(session)
    session.install("scikit-learn")
    session.run("python", str(ROOT / "benchmarks" / "demo.py"), *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
def bench(session: nox.Session) -> None:
    """Store and loader benchmarks on real data made by benchmarks/prepare_data.py (benchmarks/README.md).

    Set LOADERX_BENCH_DATA to the prepared data folder (default ../data) and, to measure the
    published loaderx side by side, LOADERX_PEER_PYTHON to the python of its own venv.

    Stores are written under LOADERX_BENCH_TMP, by default the system's temporary folder,
    which must be on a real disk: write figures are durable writes beside the device's own
    sequential write ceiling, measured in the same folder in the same run ([P1]); on a tmpfs
    the tables say that the figures are page-cache figures; bench_cold.py, whose figures are
    reads from that disk with the page cache evicted, refuses a tmpfs. fio (apt-get install
    fio) measures the ceilings; without it, a probe of benchmarks/common/device.py does.
    """
    _install_all(session)
    out = ROOT / "docs" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    peer = os.environ.get("LOADERX_PEER_PYTHON")
    tmp = os.environ.get("LOADERX_BENCH_TMP")
    session.log(f"stores under {tmp or 'the system temporary folder'}")
    session.install(TORCH)
    # The other stores and loaders of bench_matrix.py / bench_loaders.py (benchmarks/README.md).
    session.install("lmdb==2.3.0", "h5py==3.16.0", "array_record==0.8.6", "grain==0.2.18",
                    "numba==0.68.1", "pyarrow==26.0.1")
    # Pillow for loaderx.transforms.DecodeImages (bench_decode.py): the loaderx[images] extra.
    session.install(_pkg(session, LOADERX, "images"))
    for script in ("stores/bench_dense.py", "stores/bench_ragged.py", "loader/bench.py",
                   "stores/bench_convert.py", "loader/bench_decode.py", "stores/bench_matrix.py",
                   "loader/bench_loaders.py", "cold/bench_cold.py"):
        name = Path(script).name
        json_name = {"bench_matrix.py": "matrix.json", "bench_loaders.py": "loaders.json"}
        args = ["--json", str(out / json_name.get(name, name.replace(".py", ".json")))]
        if peer:
            args += ["--peer", peer]
        if tmp:
            args += ["--tmp", tmp]
        session.run("python", str(ROOT / "benchmarks" / script), *args, *session.posargs)
    session.install("matplotlib")
    session.run("python", str(ROOT / "benchmarks" / "report.py"), "--dir", str(out))
