"""The native build of zrecord and loaderx: one implementation for both packages.

Each package's ``hatch_build.py`` only loads this file: from beside itself in an sdist (each
package's pyproject.toml force-includes it there, so an sdist builds without the monorepo
around it) or from ``packages/`` in the repository. What differs between the packages is
declared in their pyproject.toml, in the ``[tool.hatch.build.hooks.custom]`` table:

- ``module``: the extension, e.g. ``zrecord._native``: ``src/zrecord/_native.pyx`` is
  cythonized and compiled into ``zrecord/_native.abi3.so``; the package folder is on the
  include path of Cython and of the C compiler (``.pxd``, ``.pxi`` and ``.h`` files beside
  the ``.pyx``).
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
  A free-threaded interpreter (``Py_GIL_DISABLED``, CPython 3.13t) has no Limited API: built
  there, the extension is for that interpreter's version only (its ``EXT_SUFFIX``, a wheel
  tagged ``cp313-cp313t``), in a build folder of its own.
- A linker version script that exports the module's ``PyInit_`` function only.
- The C of the extension (Cython's output, the SIGBUS guard) is compiled without the
  undefined-behaviour sanitizer that Zig's safe modes add to C: Cython's glue gains nothing
  from it, and its plain C loops (a dataset's batch plan) ran up to 2.3x slower with it. The Zig
  core keeps the safety checks of its release mode.

Settings, from the environment (docs/decisions/0004-zstd-in-wheels.md says why zstd has two
ways in):

- ``NATIVE_BUILD_ARCH``: ``x86_64`` or ``aarch64``, the CPU to build for; default this
  machine's. Zig cross-compiles. The building interpreter's Python headers serve both CPUs:
  under the Limited API only object layouts and type sizes reach the extension, and they are
  the same on both (64-bit, little-endian, LP64).
- ``NATIVE_BUILD_OS``: ``linux``, ``macos`` or ``windows``, the system to build for; default
  this machine's (a build on Windows itself is not supported: Windows builds are
  cross-compiled). macOS and Windows builds link zstd in (``ZRECORD_ZSTD=static``: neither has a
  system libzstd). A macOS build targets macOS 11 and later (``macosx_11_0_<arm64|x86_64>``
  wheels), leaves the Python C API's symbols to be resolved when the interpreter loads the
  module (as every macOS extension does), and hides every C symbol but ``PyInit_<name>`` (Mach-O
  has no version script; the Zig core's ``zr_*`` functions stay exported, private to the
  module under macOS's two-level namespace). A Windows build (x86-64 only, ``win_amd64``
  wheels, a ``.pyd``) compiles against a copy of the headers whose ``pyconfig.h`` is
  WINDOWS_PYCONFIG (LLP64: a long is 4 bytes there), imports the C API from python3.dll (the
  stable ABI's DLL) through an import library made from PYTHON3_IMPORTS, and exports
  ``PyInit_<name>`` only.
- ``ZRECORD_ZSTD``: ``system`` (default) links the platform's ``libzstd.so.1`` dynamically,
  found in the folders listed in ``zig/libzstd-dirs.txt`` (the list ``zig/build.zig`` reads
  too) or at ``ZRECORD_LIBZSTD``; ``static`` compiles the pinned zstd release below for the
  target and links it in, so the wheel needs no zstd on the user's machine.
- ``ZRECORD_ZSTD_SDIST``: the pinned zstd source archive, or a folder holding it, so a static
  build needs no network; otherwise the build fetches it with ``pip download``.
- ``ZRECORD_ZSTD_BUILD``: a folder where a static build keeps the compiled library, shared by
  builds from several source trees (default: ``build/`` beside the package).

A wheel's platform tag says what it needs: ``manylinux_2_28_<arch>`` when it links nothing but
glibc (Zig links against its own glibc 2.28 symbol lists), ``linux_<arch>`` when it links the
platform's libzstd, which is outside the manylinux policy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

LIMITED_API = "0x030A0000"


def free_threaded() -> bool:
    """Whether the building interpreter is a free-threaded build (no GIL, no Limited API)."""
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _abi(arch: str, system: str = "linux") -> tuple[str, str, list[str]]:
    """(extension file suffix, wheel tag's python-abi part, C flags) of the building
    interpreter for CPU `arch`: the Limited API's (a Windows module is a .pyd), or a
    free-threaded interpreter's own (its suffix names its CPU: a cross build names the
    target's)."""
    if not free_threaded():
        suffix = ".pyd" if system == "windows" else ".abi3.so"
        return suffix, "cp310-abi3", [f"-DPy_LIMITED_API={LIMITED_API}"]
    version = f"cp{sys.version_info.major}{sys.version_info.minor}"
    suffix = str(sysconfig.get_config_var("EXT_SUFFIX"))
    if arch != platform.machine():
        suffix = suffix.replace(f"-{platform.machine()}-", f"-{arch}-")
    return suffix, f"{version}-{version}t", []
GLIBC = "2.28"
ARCHS = ("x86_64", "aarch64")
SYSTEMS = ("linux", "macos", "windows")
# The oldest macOS a macOS build runs on: pwritev(2) came with macOS 11.
MACOS_MIN = "11.0"
# What a macOS build adds to the C flags of everything it compiles (zstd, Cython's C, the
# core's C): every symbol hidden but those marked otherwise (PyInit_<name>, by Python's
# PyMODINIT_FUNC), zstd's public API included (its *_VISIBLE macros emptied).
# The Python C API that zrecord's and loaderx's extensions import from python3.dll on Windows
# (the stable ABI's DLL): the import library is made from this list (`_python3_import_lib`), and
# a name the extensions need that is missing here fails their link. Data (types, exceptions,
# None/True/False) is marked as such in the import library. Cython 3.3.2 and later call
# Py_IncRef/_Py_IncRef (and the DecRefs) for every reference count under the limited API
# below 3.12, where 3.3.1 changed the count inline: all four are python3.dll's since 3.10.
PYTHON3_IMPORTS = """
    PyArg_ValidateKeywordArguments PyBaseObject_Type PyByteArray_AsString PyByteArray_Size
    PyByteArray_Type PyBytes_AsString PyBytes_AsStringAndSize PyBytes_FromString
    PyBytes_FromStringAndSize PyBytes_Size PyBytes_Type PyCFunction_GetFunction
    PyCFunction_GetSelf PyCFunction_Type PyCMethod_New PyCallable_Check PyCapsule_GetPointer
    PyCapsule_New PyDict_Contains PyDict_DelItem PyDict_GetItem PyDict_GetItemString
    PyDict_GetItemWithError PyDict_New PyDict_Next PyDict_SetItem PyDict_SetItemString
    PyDict_Size PyDict_Type PyErr_Clear PyErr_ExceptionMatches PyErr_Fetch PyErr_Format
    PyErr_GetExcInfo PyErr_GivenExceptionMatches PyErr_NoMemory PyErr_NormalizeException
    PyErr_Occurred PyErr_Restore PyErr_SetExcInfo PyErr_SetNone PyErr_SetObject
    PyErr_SetString PyErr_WarnEx PyErr_WarnFormat PyErr_WriteUnraisable PyEval_EvalCode
    PyEval_GetBuiltins PyEval_RestoreThread PyEval_SaveThread PyExc_AttributeError
    PyExc_DeprecationWarning PyExc_Exception PyExc_GeneratorExit PyExc_ImportError
    PyExc_KeyError PyExc_MemoryError PyExc_NameError PyExc_NotImplementedError
    PyExc_OverflowError PyExc_RuntimeError PyExc_RuntimeWarning PyExc_StopIteration
    PyExc_SystemError PyExc_TypeError PyExc_ValueError PyException_SetCause
    PyException_SetTraceback PyFloat_AsDouble PyFloat_Type PyImport_AddModule
    PyImport_GetModule PyImport_GetModuleDict PyImport_ImportModule
    PyImport_ImportModuleLevelObject PyInterpreterState_Get PyInterpreterState_GetID
    PyIter_Check PyIter_Next PyList_Append PyList_GetItem PyList_New PyList_SetItem
    PyList_Size PyList_Type PyLong_AsLong PyLong_AsLongAndOverflow PyLong_AsLongLong
    PyLong_AsLongLongAndOverflow PyLong_AsSsize_t PyLong_AsUnsignedLong
    PyLong_AsUnsignedLongLong PyLong_FromLong PyLong_FromLongLong PyLong_FromSsize_t
    PyLong_FromUnsignedLong PyLong_FromUnsignedLongLong PyLong_Type PyMapping_Check
    PyMem_Free PyMem_Malloc PyMem_Realloc PyModuleDef_Init PyModule_GetDict PyModule_GetName
    PyModule_NewObject PyNumber_Index PyNumber_Long PyOS_snprintf PyObject_Call
    PyObject_CallFunctionObjArgs PyObject_CallMethodObjArgs PyObject_ClearWeakRefs
    PyObject_GC_Del PyObject_GC_Track PyObject_GC_UnTrack PyObject_GenericGetAttr
    PyObject_GenericGetDict PyObject_GenericSetDict PyObject_GetAttr PyObject_GetAttrString
    PyObject_GetItem PyObject_HasAttr PyObject_Hash PyObject_Init PyObject_IsInstance
    PyObject_IsSubclass PyObject_IsTrue PyObject_RichCompare PyObject_RichCompareBool
    PyObject_SelfIter PyObject_SetAttr PyObject_SetAttrString PyObject_Size
    PySequence_GetItem PySequence_List PySequence_Repeat PySequence_Tuple PySlice_New
    PySys_GetObject
    PyThreadState_Get PyTraceBack_Here PyTraceBack_Type PyTuple_GetItem PyTuple_GetSlice
    PyTuple_New PyTuple_Pack PyTuple_SetItem PyTuple_Size PyTuple_Type
    PyType_FromModuleAndSpec PyType_GetFlags PyType_GetSlot PyType_IsSubtype PyType_Modified
    PyType_Type PyUnicode_AsEncodedString PyUnicode_Compare PyUnicode_CompareWithASCIIString
    PyUnicode_Concat PyUnicode_DecodeASCII PyUnicode_DecodeUTF8 PyUnicode_FindChar
    PyUnicode_FromFormat PyUnicode_FromOrdinal PyUnicode_FromString
    PyUnicode_FromStringAndSize PyUnicode_GetLength PyUnicode_InternFromString
    PyUnicode_InternInPlace PyUnicode_Join PyUnicode_ReadChar PyUnicode_Substring
    PyUnicode_Type Py_CompileString Py_DecRef Py_EnterRecursiveCall Py_GetVersion
    Py_IncRef Py_LeaveRecursiveCall _PyObject_CallFunction_SizeT _PyObject_GC_New _Py_DecRef
    _Py_Dealloc _Py_FalseStruct _Py_IncRef _Py_NoneStruct _Py_TrueStruct
""".split()
# What CPython's own PC/pyconfig.h says that the Limited API's headers read, for 64-bit Windows
# built by MinGW-w64 (zig cc): a shared Python whose API is imported with __declspec(dllimport),
# LLP64 sizes (a long is 4 bytes). Written over the building interpreter's pyconfig.h in a copy
# of its headers (`_windows_python_include`).
WINDOWS_PYCONFIG = """\
#ifndef Py_CONFIG_H
#define Py_CONFIG_H
/* Written by zrecord's build_support.py: 64-bit Windows, MinGW-w64, Limited API only. */
#define MS_WIN32
#define MS_WIN64
#define MS_WINDOWS
#define NT_THREADS
#define WITH_THREAD
#define Py_ENABLE_SHARED 1
#define HAVE_DECLSPEC_DLL
#define PLATFORM "win32"
#define SIZEOF_SHORT 2
#define SIZEOF_INT 4
#define SIZEOF_LONG 4
#define SIZEOF_LONG_LONG 8
#define SIZEOF_FLOAT 4
#define SIZEOF_DOUBLE 8
#define SIZEOF_VOID_P 8
#define SIZEOF_SIZE_T 8
#define SIZEOF_TIME_T 8
#define SIZEOF_WCHAR_T 2
#define SIZEOF__BOOL 1
#define SIZEOF_OFF_T 4
#define SIZEOF_FPOS_T 8
#define ALIGNOF_SIZE_T 8
#define ALIGNOF_LONG 4
#define HAVE_LONG_LONG 1
#define PY_LONG_LONG long long
#define HAVE_WCHAR_H 1
#define HAVE_STDDEF_H 1
#define Py_WIN_WIDE_FILENAMES
#define DOUBLE_IS_LITTLE_ENDIAN_IEEE754 1
#endif
"""
MACOS_HIDDEN_CFLAGS = ["-fvisibility=hidden", "-DZSTDLIB_VISIBLE=", "-DZSTDERRORLIB_VISIBLE=",
                       "-DZDICTLIB_VISIBLE="]

# The zstd of static builds: zstd's own library sources as the `backports.zstd` sdist on PyPI
# ships them (src/c/zstd/lib, unmodified). They are fetched into the build folder at build time,
# never kept in this repository; the hash pins the archive. Bump the five together.
ZSTD_VERSION = "1.5.7"
ZSTD_SDIST_REQUIREMENT = "backports.zstd==1.8.0"
ZSTD_SDIST_FILE = "backports_zstd-1.8.0.tar.gz"
ZSTD_SDIST_SHA256 = "9dae4f4c481716e3db473d667457b4f508ff7459c0931b567a5c9677fb3db316"
ZSTD_LIB_IN_SDIST = "src/c/zstd/lib"
# The parts of zstd's lib/ that zrecord uses: frames, dictionaries, the dictionary trainer.
# Not `legacy` (pre-1.0 frame formats, which no store holds) nor `deprecated`.
ZSTD_LIB_PARTS = ("common", "compress", "decompress", "dictBuilder")
ZSTD_CFLAGS = [
    "-O3",
    # zstd's library defaults, made explicit where they matter here: xxhash under zstd's own
    # names, no legacy formats, no tracing hooks (weak symbols), no debug logging. Not
    # ZSTD_MULTITHREAD: the core runs its own threads with one context per worker.
    "-DXXH_NAMESPACE=ZSTD_", "-DZSTD_LEGACY_SUPPORT=0", "-DZSTD_TRACE=0", "-DDEBUGLEVEL=0",
    # zig cc keeps frame pointers by default; zstd's decoding loops want the register back
    # (2-3% faster decompression here).
    "-fomit-frame-pointer",
]

Log = Callable[[str], None]


def zig_target(arch: str, system: str = "linux") -> str:
    """Zig's name of the target: glibc 2.28 on Linux, macOS 11 on macOS, MinGW-w64 on Windows."""
    if system == "macos":
        return f"{arch}-macos.{MACOS_MIN}"
    if system == "windows":
        return f"{arch}-windows-gnu"
    return f"{arch}-linux-gnu.{GLIBC}"


def host_system() -> str | None:
    """This machine's system in SYSTEMS' terms, None where it is none of them."""
    return {"linux": "linux", "darwin": "macos"}.get(sys.platform)


def host_arch() -> str:
    """This machine's CPU in ARCHS' terms (macOS says arm64 where Linux says aarch64)."""
    machine = platform.machine()
    return "aarch64" if machine == "arm64" else machine


def target_system() -> str:
    """The system to build for: NATIVE_BUILD_OS, else this machine's."""
    system = os.environ.get("NATIVE_BUILD_OS") or host_system()
    if system not in SYSTEMS:
        raise RuntimeError(f"native build: unsupported system {system or sys.platform!r} "
                           f"(NATIVE_BUILD_OS or this machine's); supported: {', '.join(SYSTEMS)}")
    return system


def platform_tag(arch: str, system: str, external_zstd: bool) -> str:
    """A wheel's platform tag: ``manylinux_2_28_<arch>`` when it links nothing but glibc,
    ``linux_<arch>`` when it links the platform's libzstd, ``macosx_11_0_<arm64|x86_64>``,
    ``win_amd64``."""
    if system == "macos":
        return f"macosx_{MACOS_MIN.replace('.', '_')}_{'arm64' if arch == 'aarch64' else arch}"
    if system == "windows":
        return "win_amd64"
    return f"{'linux' if external_zstd else 'manylinux_2_28'}_{arch}"


def target_arch() -> str:
    """The CPU to build for: NATIVE_BUILD_ARCH, else this machine's."""
    arch = os.environ.get("NATIVE_BUILD_ARCH") or host_arch()
    if arch not in ARCHS:
        raise RuntimeError(f"native build: unsupported CPU architecture {arch!r} (NATIVE_BUILD_ARCH "
                           f"or this machine's); supported: {', '.join(ARCHS)}")
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
        "`dnf install libzstd`, Alpine `apk add zstd-libs`; set ZRECORD_LIBZSTD to its path; "
        "or build zstd in with ZRECORD_ZSTD=static."
    )


# --- the pinned zstd release (static builds) ------------------------------------------------

def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _zstd_sdist(cache: Path, log: Log) -> Path:
    """The pinned source archive: ZRECORD_ZSTD_SDIST, else the cache, else `pip download`."""
    given = os.environ.get("ZRECORD_ZSTD_SDIST")
    if given:
        path = Path(given)
        if path.is_dir():
            path = path / ZSTD_SDIST_FILE
        if not path.is_file():
            raise RuntimeError(f"zrecord build: ZRECORD_ZSTD_SDIST={given} holds no {ZSTD_SDIST_FILE}")
    else:
        path = cache / ZSTD_SDIST_FILE
        if not path.is_file():
            log(f"fetching the zstd {ZSTD_VERSION} sources: pip download {ZSTD_SDIST_REQUIREMENT}")
            cache.mkdir(parents=True, exist_ok=True)
            # --ignore-requires-python: only the C sources are used, whatever the interpreter.
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--ignore-requires-python", "--dest", str(cache), ZSTD_SDIST_REQUIREMENT]
            try:
                subprocess.run(cmd, check=True)
            except (OSError, subprocess.CalledProcessError) as exc:
                raise RuntimeError(
                    f"zrecord build: could not fetch {ZSTD_SDIST_REQUIREMENT} ({exc}); download "
                    f"{ZSTD_SDIST_FILE} (`pip download --no-deps --no-binary :all: "
                    f"{ZSTD_SDIST_REQUIREMENT}`) and set ZRECORD_ZSTD_SDIST to it"
                ) from exc
    found = _sha256(path)
    if found != ZSTD_SDIST_SHA256:
        raise RuntimeError(f"zrecord build: {path} has sha256 {found}, expected "
                           f"{ZSTD_SDIST_SHA256} ({ZSTD_SDIST_REQUIREMENT})")
    return path


def _zstd_sources(cache: Path, log: Log) -> Path:
    """zstd's lib/ folder and its LICENSE, unpacked from the pinned archive under `cache`."""
    lib = cache / f"zstd-{ZSTD_VERSION}" / "lib"
    done = lib / ".unpacked"
    if done.is_file() and done.read_text() == ZSTD_SDIST_SHA256:
        return lib
    archive = _zstd_sdist(cache, log)
    shutil.rmtree(lib.parent, ignore_errors=True)
    lib.mkdir(parents=True)
    zstd_dir = ZSTD_LIB_IN_SDIST.rpartition("/")[0] + "/"
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            # Regular files only, each written to a path made here from known names: nothing
            # in the archive decides where a file lands.
            rest = member.name.partition("/")[2]
            if not member.isfile() or not rest.startswith(zstd_dir):
                continue
            rel = rest[len(zstd_dir):].split("/")
            wanted = (rel == ["LICENSE"] or (len(rel) == 2 and rel[0] == "lib")
                      or (len(rel) == 3 and rel[0] == "lib" and rel[1] in ZSTD_LIB_PARTS))
            if not wanted or any(part in ("", ".", "..") for part in rel):
                continue
            target = lib.parent.joinpath(*rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
    header = (lib / "zstd.h").read_text()
    version = ".".join(header.split(f"#define ZSTD_VERSION_{part} ")[1].split()[0]
                       for part in ("MAJOR", "MINOR", "RELEASE"))
    if version != ZSTD_VERSION or not (lib.parent / "LICENSE").is_file():
        raise RuntimeError(f"zrecord build: {archive.name} holds zstd {version} (expected "
                           f"{ZSTD_VERSION}) or lacks its LICENSE")
    done.write_text(ZSTD_SDIST_SHA256)
    return lib


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the exclusive lock of `folder` (its `.lock` file) while the block runs. Builds
    running at once share the zstd folder (the suite's `wheels` and `windows` sessions start
    side by side in a fresh clone): unlocked, one build's unpacking removed the sources that the
    other was compiling, and both failed. A Windows build runs on Linux or macOS
    (cross-compiled), so flock serves every host that builds."""
    import fcntl  # POSIX only: imported here, so that the module still loads elsewhere

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_static_zstd(build: Path, arch: str, env: dict[str, str], log: Log,
                      system: str = "linux") -> Path:
    """libzstd.a of the pinned release for `arch` on `system`, compiled by zig cc; reused once
    built. Builds side by side wait for one another: the sources are unpacked under the zstd
    folder's lock (once unpacked, nothing removes them), each target's library is compiled
    under its own folder's lock, so two targets compile at once and a second build of one
    target reuses the first's."""
    cache = build / "zstd"
    with _locked(cache):
        lib = _zstd_sources(cache, log)
    name = f"zstd-{ZSTD_VERSION}-{arch}" if system == "linux" else f"zstd-{ZSTD_VERSION}-{system}-{arch}"
    out = cache / name / "libzstd.a"
    files = sorted(str(f) for part in ZSTD_LIB_PARTS for f in (lib / part).glob("*.c"))
    if arch == "x86_64":
        # The hand-written Huffman decoding loop, as in zstd's own x86-64 builds.
        files.append(str(lib / "decompress" / "huf_decompress_amd64.S"))
    tmp = out.with_suffix(".tmp.a")
    cmd = [sys.executable, "-m", "ziglang", "build-lib", "-static", "--name", "zstd",
           "-target", zig_target(arch, system), "-mcpu=baseline", "-OReleaseFast", "-fPIC", "-lc",
           "-cflags", *ZSTD_CFLAGS, *(MACOS_HIDDEN_CFLAGS if system == "macos" else []),
           "--", *files, f"-femit-bin={tmp}"]
    stamp = out.with_suffix(".cmd")
    with _locked(out.parent):
        if out.is_file() and stamp.is_file() and stamp.read_text() == json.dumps(cmd[1:]):
            return out
        log(f"compiling zstd {ZSTD_VERSION} for {arch}-{system} ({len(files)} files)")
        subprocess.run(cmd, check=True, cwd=out.parent, env=env)
        os.replace(tmp, out)
        stamp.write_text(json.dumps(cmd[1:]))
    return out


# --- the extension ----------------------------------------------------------------------------

def _newer(out: Path, inputs: list[Path]) -> bool:
    return out.exists() and out.stat().st_mtime >= max(p.stat().st_mtime for p in inputs)


def _log(message: str) -> None:
    print(f"native build: {message}", file=sys.stderr)


def _target() -> tuple[str, str]:
    """(CPU, system) to build for; a macOS build is abi3, so not from a free-threaded CPython."""
    arch, system = target_arch(), target_system()
    if system != "linux" and free_threaded():
        raise RuntimeError(f"native build: a {system} build is abi3 only; build it with a CPython "
                           "that has the GIL")
    if system == "windows" and arch != "x86_64":
        raise RuntimeError(f"native build: Windows builds are for x86_64 only, not {arch}")
    return arch, system


def build_extension(root: Path, config: dict[str, Any], log: Log = _log) -> dict[str, Any]:
    """Build the extension that `config` describes for the target (`_target`); return what to
    ship.

    The result holds `files` (built file -> its path in the wheel), `licenses` (license of
    what the extension carries -> its name in the wheel's metadata folder), `tag` (the wheel's
    platform tag) and `native` (whether it was built for this machine). Everything is built under
    build/native/<arch>[-zstd-<linkage>]/ beside the package, so builds for several targets
    never overwrite each other; an extension whose inputs and command are unchanged is reused.
    """
    arch, system = _target()
    package, _, name = str(config["module"]).rpartition(".")
    pkg = root / "src" / package
    # Everything the extension is made of, the Cython sources first: the module, its .pxd
    # declarations and the .pxi files it includes (compiled into it as if written there).
    cython_inputs = [*sorted(pkg.glob("*.pyx")), *sorted(pkg.glob("*.pxd")),
                     *sorted(pkg.glob("*.pxi"))]
    inputs = [*cython_inputs, *sorted(pkg.glob("*.h")), Path(__file__).resolve()]
    env = dict(os.environ)
    # Keep Zig's cache inside the build folder unless the caller chose one: a user's pip run
    # must not depend on a writable home directory.
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(root / "build" / "zig-global-cache"))
    env.setdefault("ZIG_LOCAL_CACHE_DIR", str(root / "build" / "zig-local-cache"))

    include = ["-I", str(pkg)]
    core: list[str] = []
    # The core's own C files (today the SIGBUS guard, zig/src/sigbus_guard.c, which needs
    # sigsetjmp), compiled with the Cython file; every `zig test` of zig/src names them too.
    core_c: list[str] = []
    info: dict[str, str] | None = None
    licenses: dict[Path, str] = {}
    flavour = arch
    if config.get("zig-core"):
        zig = zig_dir(root)
        inputs += sorted((zig / "src").rglob("*.zig")) + sorted((zig / "include").glob("*.h"))
        core_c = [str(p) for p in sorted((zig / "src").glob("*.c"))]
        inputs += [Path(p) for p in core_c]
        inputs.append(zig / "libzstd-dirs.txt")
        include += ["-I", str(zig / "include")]
        libzstd, info, licenses = _core_zstd(root, zig, arch, system, env, log)
        linkage = info["zstd_linkage"]
        if linkage == "static":
            # A static library is compiled into the extension: a new build of it is a new input.
            inputs.append(libzstd)
        core = [str(zig / "src" / "root.zig"), str(libzstd)]
        info["target"] = zig_target(arch, system)
        flavour = f"{arch}-zstd-{linkage}"
    flavour = flavour if system == "linux" else f"{system}-{flavour}"
    suffix, abi_tag, _ = _abi(arch, system)
    if free_threaded():
        flavour += f"-{abi_tag.split('-')[1]}"

    build = root / "build" / "native" / flavour
    build.mkdir(parents=True, exist_ok=True)
    c_file = build / f"{name}.c"
    if not _newer(c_file, cython_inputs):
        subprocess.run([sys.executable, "-m", "cython", "-3", "--fast-fail", *include,
                        str(pkg / f"{name}.pyx"), "-o", str(c_file)], check=True)
    out = _link(build, name, (arch, system), config.get("optimize", "ReleaseSafe"), core, include,
                [str(c_file), *core_c], [*inputs, c_file], env, log)

    files = {out: f"{package}/{out.name}"}
    if info is not None:
        # What zrecord.__zstd_version__ reads (zrecord/_build_info.py).
        (build / "_build.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
        files[build / "_build.json"] = f"{package}/_build.json"
    external = info is not None and info["zstd_linkage"] == "system"
    tag = f"{abi_tag}-{platform_tag(arch, system, external)}"
    native = arch == host_arch() and system == host_system()
    return {"files": files, "licenses": licenses, "tag": tag, "native": native}


def _core_zstd(root: Path, zig: Path, arch: str, system: str, env: dict[str, str],
               log: Log) -> tuple[Path, dict[str, str], dict[Path, str]]:
    """The zstd library the Zig core links, as ZRECORD_ZSTD says: the pinned release compiled
    for `arch` and `system` (static; a macOS build's default and only choice) or the
    platform's libzstd.so.1 (system). Returns the library, the build information that names
    the linkage (zrecord/_build.json) and the licenses the extension must then carry (license
    file -> its name in the wheel's metadata folder)."""
    linkage = os.environ.get("ZRECORD_ZSTD") or ("system" if system == "linux" else "static")
    if linkage == "system" and system != "linux":
        raise RuntimeError(f"zrecord build: a {system} build links zstd in; set ZRECORD_ZSTD=static "
                           "(or leave it unset), not 'system'")
    if linkage == "static":
        # ZRECORD_ZSTD_BUILD: a folder that builds share for the compiled library (the
        # release's builds of one run, sdists unpacked elsewhere included).
        shared = os.environ.get("ZRECORD_ZSTD_BUILD")
        libzstd = build_static_zstd(Path(shared) if shared else root / "build", arch, env, log,
                                    system)
        # zstd's BSD license asks binary redistributions to carry its notice.
        licenses = {libzstd.parent.parent / f"zstd-{ZSTD_VERSION}" / "LICENSE": "zstd-LICENSE"}
        info = {"zstd_linkage": "static", "zstd_version": ZSTD_VERSION,
                "zstd_source": f"{ZSTD_SDIST_REQUIREMENT} sdist, sha256 {ZSTD_SDIST_SHA256}"}
        return libzstd, info, licenses
    if linkage == "system":
        return find_libzstd(zig, arch), {"zstd_linkage": "system"}, {}
    raise RuntimeError(f"zrecord build: ZRECORD_ZSTD must be 'system' or 'static', "
                       f"not {linkage!r}")


def _link(build: Path, name: str, target: tuple[str, str], optimize: str, core: list[str],
          include: list[str], sources: list[str], inputs: list[Path], env: dict[str, str],
          log: Log) -> Path:
    """Compiles the C `sources` (the Cython-generated file first) with the Zig `core` into
    build/<name>.abi3.so (on a free-threaded interpreter, <name><EXT_SUFFIX>) in one `zig
    build-lib` call for `target` (arch, system), exporting PyInit_<name> only (on macOS, the
    core's zr_* too: see NATIVE_BUILD_OS). An extension newer than every file of `inputs` and
    built by the same command is reused."""
    arch, system = target
    python_include = sysconfig.get_paths()["include"]
    if system == "linux":
        exports = build / "exports.map"
        exports.write_text(f"{{ global: PyInit_{name}; local: *; }};\n")
        hide = ["--version-script", str(exports)]
        system_flags: list[str] = []
    elif system == "macos":
        # Python's symbols resolve when the interpreter loads the module.
        hide = ["-fallow-shlib-undefined"]
        system_flags = MACOS_HIDDEN_CFLAGS
    else:
        # A DLL exports what is marked dllexport (PyInit_<name>), not the core's zr_*; it
        # imports Python's API from python3.dll through an import library made here.
        hide = ["-fno-dll-export-fns", str(_python3_import_lib(build, env))]
        system_flags = []
        python_include = str(_windows_python_include(build))
    suffix, _, abi_flags = _abi(arch, system)
    out = build / f"{name}{suffix}"
    tmp_out = build / f"{name}.tmp.so"
    cmd = [sys.executable, "-m", "ziglang", "build-lib", "-dynamic",
           "-target", zig_target(arch, system), "-mcpu=baseline", f"-O{optimize}",
           "-fPIC", "-lc", "-fstrip", *core,
           "-cflags", *abi_flags, "-O2", "-fno-strict-aliasing", "-fno-sanitize=undefined",
           *system_flags, *include, "-I", python_include, "--", *sources,
           *hide, f"-femit-bin={tmp_out}"]
    stamp = build / f"{out.name}.cmd"
    # The command without the interpreter, which differs between isolated build environments.
    if not (_newer(out, inputs) and stamp.is_file()
            and stamp.read_text() == json.dumps(cmd[1:])):
        log(" ".join(cmd))
        subprocess.run(cmd, check=True, cwd=build, env=env)
        os.replace(tmp_out, out)
        stamp.write_text(json.dumps(cmd[1:]))
    return out


def _windows_python_include(build: Path) -> Path:
    """A copy of the building interpreter's headers with WINDOWS_PYCONFIG as pyconfig.h (the
    headers include it by a quoted name, so it must sit beside them)."""
    out = build / "python-include"
    source = Path(sysconfig.get_paths()["include"])
    if not (out / "Python.h").is_file():
        tmp = build / "python-include.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    if not (out / "pyconfig.h").is_file() or (out / "pyconfig.h").read_text() != WINDOWS_PYCONFIG:
        (out / "pyconfig.h").write_text(WINDOWS_PYCONFIG)
    return out


def _python3_import_lib(build: Path, env: dict[str, str]) -> Path:
    """libpython3.a, the import library of python3.dll for PYTHON3_IMPORTS, by zig dlltool."""
    data = ("_Type", "_Struct")
    lines = ["LIBRARY python3.dll", "EXPORTS"]
    lines += [f"    {n}{' DATA' if n.endswith(data) or n.startswith('PyExc_') else ''}"
              for n in PYTHON3_IMPORTS]
    definition = build / "python3.def"
    lib = build / "libpython3.a"
    text = "\n".join(lines) + "\n"
    if not lib.is_file() or not definition.is_file() or definition.read_text() != text:
        definition.write_text(text)
        subprocess.run([sys.executable, "-m", "ziglang", "dlltool", "-d", str(definition), "-l",
                        str(lib), "-m", "i386:x86-64"], check=True, cwd=build, env=env)
    return lib


def get_build_hook() -> type:
    """The hatchling hook class; each package's hatch_build.py hands it to hatchling."""
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface

    class NativeBuildHook(BuildHookInterface):  # type: ignore[type-arg]
        """Builds the extension named in the package's hook table into its wheel."""

        PLUGIN_NAME = "custom"

        def dependencies(self) -> list[str]:
            # A static zstd build fetches zstd's sources with `python -m pip download`, and an
            # isolated build environment need not have pip.
            fetch = (self.config.get("zig-core") and os.environ.get("ZRECORD_ZSTD") == "static"
                     and not os.environ.get("ZRECORD_ZSTD_SDIST"))
            return ["pip"] if fetch else []

        def initialize(self, version: str, build_data: dict[str, Any]) -> None:
            if self.target_name != "wheel":
                return
            root = Path(self.root)
            built = build_extension(root, self.config)
            build_data["pure_python"] = False
            build_data["tag"] = built["tag"]
            if version == "editable":
                # An editable install imports from src/, so the built files go there (they are
                # git-ignored); only a build for this machine can be imported here.
                if not built["native"]:
                    raise RuntimeError("native build: an editable install must be built for this "
                                       "machine; unset NATIVE_BUILD_ARCH and NATIVE_BUILD_OS")
                for path, dest in built["files"].items():
                    # Copied beside and renamed over the old file, never written into it: a
                    # process that has the old extension loaded keeps its mapping of the old
                    # inode, where copying into it in place can crash that process.
                    final = root / "src" / dest
                    partial = final.with_name(f".{final.name}.{os.getpid()}.tmp")
                    shutil.copy2(path, partial)
                    os.replace(partial, final)
            else:
                # The built files are outside the package's sources, so each is named here.
                for path, dest in built["files"].items():
                    build_data["force_include"][str(path)] = dest
                for path, dest in built["licenses"].items():
                    build_data["extra_metadata"][str(path)] = dest

    return NativeBuildHook


if __name__ == "__main__":
    # `python packages/build_support.py zstd ARCH SYSTEM`: the pinned zstd compiled for a
    # target into ZRECORD_ZSTD_BUILD (or build/ here), its path printed: what a `zig test` of
    # the core for that target links (the `macos` and `windows` nox sessions).
    if len(sys.argv) != 4 or sys.argv[1] != "zstd" or sys.argv[2] not in ARCHS \
            or sys.argv[3] not in SYSTEMS:
        sys.exit(f"usage: {sys.argv[0]} zstd {{{','.join(ARCHS)}}} {{{','.join(SYSTEMS)}}}")
    folder = Path(os.environ.get("ZRECORD_ZSTD_BUILD") or Path(__file__).parent / "build")
    print(build_static_zstd(folder, sys.argv[2], dict(os.environ), _log, sys.argv[3]))
