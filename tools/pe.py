"""Check the Windows extensions of wheels: what each PE file exports and imports.

    python tools/pe.py WHEEL [WHEEL ...]

No Windows CPython reaches these machines, so nothing here can import a Windows extension;
this check is what stands between the build and its users. For every ``.pyd`` in each
``*-win_amd64.whl``:

- it is a 64-bit DLL (PE32+) for x86-64;
- it exports ``PyInit_<module>`` and nothing else;
- it imports only from python3.dll (the stable ABI's DLL: no version-specific pythonXY.dll),
  the Universal C Runtime (``api-ms-win-crt-*.dll``), KERNEL32.dll, ntdll.dll (sleeping on a
  word) and ADVAPI32.dll (random bytes), and from python3.dll only the names of
  build_support.PYTHON3_IMPORTS.

Reads PE with the standard library only (the export and import directories). Exits non-zero,
naming each problem, when any file fails.
"""

from __future__ import annotations

import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "packages"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_support  # noqa: E402
import wheel_check  # noqa: E402

AMD64 = 0x8664
PE32_PLUS = 0x20B
IMAGE_FILE_DLL = 0x2000
ALLOWED_DLLS = re.compile(r"(?i)^(python3|kernel32|ntdll|advapi32|api-ms-win-crt-[a-z0-9-]+)\.dll$")


@dataclass
class PE:
    machine: int
    is_dll: bool
    exports: list[str]
    imports: dict[str, list[str]]


def _cstr(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode()


def read(data: bytes) -> PE:
    """The parts of a PE32+ image that the check needs."""
    if data[:2] != b"MZ":
        raise ValueError("not a PE file (no MZ header)")
    pe = struct.unpack_from("<I", data, 0x3C)[0]
    if data[pe:pe + 4] != b"PE\0\0":
        raise ValueError("not a PE file (no PE signature)")
    machine, nsections, _, _, _, opt_size, chars = struct.unpack_from("<HHIIIHH", data, pe + 4)
    opt = pe + 24
    if struct.unpack_from("<H", data, opt)[0] != PE32_PLUS:
        raise ValueError("not a 64-bit (PE32+) image")
    dirs = opt + 112
    sections = [struct.unpack_from("<8sIIII", data, opt + opt_size + 40 * i) for i in range(nsections)]

    def offset(rva: int) -> int:
        for _, vsize, vaddr, rawsize, rawptr in sections:
            if vaddr <= rva < vaddr + max(vsize, rawsize):
                return int(rva - vaddr + rawptr)
        raise ValueError(f"RVA {rva:#x} is in no section")

    exports: list[str] = []
    export_rva, export_size = struct.unpack_from("<II", data, dirs)
    if export_size:
        at = offset(export_rva)
        count, names_rva = struct.unpack_from("<I", data, at + 24)[0], struct.unpack_from("<I", data, at + 32)[0]
        for i in range(count):
            exports.append(_cstr(data, offset(struct.unpack_from("<I", data, offset(names_rva) + 4 * i)[0])))
    imports: dict[str, list[str]] = {}
    import_rva, import_size = struct.unpack_from("<II", data, dirs + 8)
    at = offset(import_rva) if import_size else -1
    while at >= 0:
        lookup, _, _, name_rva, thunk = struct.unpack_from("<IIIII", data, at)
        if name_rva == 0:
            break
        names = imports.setdefault(_cstr(data, offset(name_rva)), [])
        entry = offset(lookup or thunk)
        while (value := struct.unpack_from("<Q", data, entry)[0]) != 0:
            names.append(f"#{value & 0xFFFF}" if value >> 63 else _cstr(data, offset(value & 0x7FFFFFFF) + 2))
            entry += 8
        at += 20
    return PE(machine, bool(chars & IMAGE_FILE_DLL), sorted(exports), imports)


def problems(p: PE, module: str) -> list[str]:
    """What is wrong with extension `module` (its PyInit name)."""
    found = []
    if p.machine != AMD64 or not p.is_dll:
        found.append(f"machine {p.machine:#x}, DLL {p.is_dll}: not an x86-64 DLL")
    if p.exports != [f"PyInit_{module}"]:
        found.append(f"exports {p.exports[:12]}, not only PyInit_{module}")
    foreign = sorted(d for d in p.imports if not ALLOWED_DLLS.match(d))
    if foreign:
        found.append(f"imports from {', '.join(foreign)}")
    python = next((names for d, names in p.imports.items() if d.lower() == "python3.dll"), [])
    unknown = sorted(set(python) - set(build_support.PYTHON3_IMPORTS))
    if unknown:
        found.append(f"imports from python3.dll what PYTHON3_IMPORTS lacks: {', '.join(unknown)}")
    return found


def check_wheel(wheel: Path) -> list[str]:
    """Every problem of every extension in a Windows wheel, each prefixed by the file's name."""
    if not wheel.name.endswith("-win_amd64.whl"):
        return [f"{wheel.name}: not a win_amd64 wheel"]
    return wheel_check.each_extension(
        wheel, ".pyd", read, lambda name, p: problems(p, wheel_check.module_of(name)),
        lambda p: f"exports {p.exports}, imports from "
                  f"{', '.join(f'{d} ({len(n)})' for d, n in sorted(p.imports.items()))}")


def main(argv: list[str] | None = None) -> int:
    return wheel_check.main(__doc__ or "", "pe", check_wheel, argv)


if __name__ == "__main__":
    sys.exit(main())
