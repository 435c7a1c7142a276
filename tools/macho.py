"""Check the macOS extensions of wheels: what each Mach-O file exports, imports and needs.

    python tools/macho.py WHEEL [WHEEL ...]

No macOS machine runs these files here, so this check is what stands between a macOS build and
its users. For every ``.so`` in each ``*-macosx_11_0_<arm64|x86_64>.whl``:

- it is a 64-bit Mach-O library for the wheel's CPU, built for macOS 11.0 or older
  (LC_BUILD_VERSION);
- it loads nothing but ``/usr/lib/libSystem.B.dylib`` (zstd is compiled in; Python's symbols
  resolve when the interpreter loads the module);
- it exports ``PyInit_<module>``, the core's C ABI (``zr_*``) and the two symbols the linker
  adds to every library, nothing else (no zstd or Cython symbol that could clash);
- every symbol it imports is Python's C API (``Py*``, ``_Py*``) or one of the libSystem symbols
  in ``tools/macos_libsystem.txt``, each available since macOS 11 or earlier: a new import
  fails here until someone checks its availability and adds it there.

Reads Mach-O with the standard library only (the LC_SYMTAB, LC_LOAD_DYLIB and LC_BUILD_VERSION
load commands). Exits non-zero, naming each problem, when any file fails.
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wheel_check  # noqa: E402

MH_MAGIC_64 = 0xFEEDFACF
CPU = {0x01000007: "x86_64", 0x0100000C: "aarch64"}
MH_DYLIB, MH_BUNDLE = 6, 8
LC_SYMTAB, LC_BUILD_VERSION = 0x2, 0x32
# LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_REEXPORT_DYLIB
LC_DYLIBS = (0xC, 0x80000018, 0x8000001F)
N_EXT, N_TYPE = 0x01, 0x0E
LIBSYSTEM = "/usr/lib/libSystem.B.dylib"
MACOS_MIN = (11, 0)
# What the linker puts in every library it makes.
LINKER_EXPORTS = {"___dso_handle", "__mh_dylib_header"}
ALLOWED_FILE = Path(__file__).with_name("macos_libsystem.txt")


@dataclass
class MachO:
    cpu: str
    filetype: int
    minos: tuple[int, int] | None
    dylibs: list[str]
    exports: list[str]
    imports: list[str]


def _cstr(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode()


def read(data: bytes) -> MachO:
    """The parts of a 64-bit little-endian Mach-O file that the check needs."""
    if len(data) < 32 or struct.unpack_from("<I", data)[0] != MH_MAGIC_64:
        raise ValueError("not a 64-bit Mach-O file")
    _, cputype, _, filetype, ncmds, _, _, _ = struct.unpack_from("<IiiIIIII", data, 0)
    off = 32
    dylibs: list[str] = []
    exports: list[str] = []
    imports: list[str] = []
    minos: tuple[int, int] | None = None
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, off)
        if cmd == LC_SYMTAB:
            symoff, nsyms, stroff, _ = struct.unpack_from("<IIII", data, off + 8)
            for i in range(nsyms):
                strx, ntype, _, _, _ = struct.unpack_from("<IBBHQ", data, symoff + 16 * i)
                if not ntype & N_EXT:
                    continue
                name = _cstr(data, stroff + strx)
                (imports if ntype & N_TYPE == 0 else exports).append(name)
        elif cmd in LC_DYLIBS:
            dylibs.append(_cstr(data, off + struct.unpack_from("<I", data, off + 8)[0]))
        elif cmd == LC_BUILD_VERSION:
            packed = struct.unpack_from("<I", data, off + 12)[0]
            minos = (packed >> 16, (packed >> 8) & 0xFF)
        off += size
    return MachO(CPU.get(cputype, hex(cputype)), filetype, minos, dylibs, sorted(exports),
                 sorted(imports))


def allowed_imports(path: Path = ALLOWED_FILE) -> set[str]:
    """The libSystem symbols an extension may import (one per line, `#` comments)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def problems(m: MachO, module: str, arch: str, allowed: set[str]) -> list[str]:
    """What is wrong with extension `module` (its PyInit name) built for `arch`."""
    found = []
    if m.cpu != arch:
        found.append(f"built for {m.cpu}, the wheel says {arch}")
    if m.filetype not in (MH_DYLIB, MH_BUNDLE):
        found.append(f"Mach-O file type {m.filetype}, not a library or bundle")
    if m.minos is None or m.minos > MACOS_MIN:
        found.append(f"needs macOS {m.minos}, not {MACOS_MIN} or older")
    if m.dylibs != [LIBSYSTEM]:
        found.append(f"loads {m.dylibs}, not only {LIBSYSTEM}")
    init = f"_PyInit_{module}"
    if init not in m.exports:
        found.append(f"does not export {init}")
    extra = [s for s in m.exports if s != init and s not in LINKER_EXPORTS and not s.startswith("_zr_")]
    if extra:
        found.append(f"exports {len(extra)} symbols beyond {init} and zr_*: {', '.join(extra[:12])}")
    unknown = [s for s in m.imports
               if not (s.startswith(("_Py", "__Py")) or s in allowed)]
    if unknown:
        found.append(f"imports {len(unknown)} symbols not in {ALLOWED_FILE.name}: {', '.join(unknown)}")
    return found


def check_wheel(wheel: Path, allowed: set[str]) -> list[str]:
    """Every problem of every extension in a macOS wheel, each prefixed by the file's name."""
    tag = wheel.name.removesuffix(".whl").split("-")[-1]  # macosx_11_0_arm64
    if not tag.startswith("macosx_"):
        return [f"{wheel.name}: not a macOS wheel (platform tag {tag})"]
    arch = {"arm64": "aarch64"}.get(tag.split("_", 3)[3], tag.split("_", 3)[3])
    return wheel_check.each_extension(
        wheel, ".so", read, lambda name, m: problems(m, wheel_check.module_of(name), arch, allowed),
        lambda m: f"{m.cpu}, macOS {m.minos}, {len(m.exports)} exports, {len(m.imports)} imports")


def main(argv: list[str] | None = None) -> int:
    allowed = allowed_imports()
    return wheel_check.main(__doc__ or "", "macho", lambda wheel: check_wheel(wheel, allowed), argv)


if __name__ == "__main__":
    sys.exit(main())
