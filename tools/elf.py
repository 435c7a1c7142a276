"""Check the Linux extensions of wheels against the Windows build's import list.

    python tools/elf.py WHEEL [WHEEL ...]

The Windows extensions are linked against an import library of python3.dll made from
build_support.PYTHON3_IMPORTS, so a Python C-API function that the Cython code starts to use
and that list lacks fails only the Windows link, late in CI (the `windows` session). The
Linux extensions are compiled from the same C under the same Limited API: every Python symbol
a Linux ``.so`` of an abi3 wheel leaves undefined (``Py*``, ``_Py*``) must be in that list.
This check runs on the Linux wheels in the first session (`lint`).

Reads ELF64 little-endian files with the standard library only (the dynamic symbol table).
Exits non-zero, naming each problem, when any file fails.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "packages"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_support  # noqa: E402
import wheel_check  # noqa: E402

SHT_DYNSYM = 11
SYMBOL_BYTES = 24  # Elf64_Sym


def undefined(data: bytes) -> list[str]:
    """The names of the symbols that an ELF64 little-endian file's dynamic symbol table leaves
    undefined (to be found in other objects at load time), in table order; ValueError for
    what is not such a file, or is cut short."""
    try:
        return _undefined(data)
    except (struct.error, IndexError) as exc:
        raise ValueError(f"a damaged or truncated ELF file ({exc})") from None


def _undefined(data: bytes) -> list[str]:
    if data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]
    out: list[str] = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != SHT_DYNSYM:
            continue
        strings = sections[link][4]  # the linked string table's offset
        for at in range(offset, offset + size, entsize or SYMBOL_BYTES):
            name_at, _, _, shndx = struct.unpack_from("<IBBH", data, at)
            if shndx == 0 and name_at:
                start = strings + name_at
                out.append(data[start:data.index(b"\0", start)].decode())
    return out


def problems(names: list[str]) -> list[str]:
    """What is wrong with an extension whose undefined symbols are `names`."""
    python = {n.split("@", 1)[0] for n in names if n.startswith(("Py", "_Py"))}
    unknown = sorted(python - set(build_support.PYTHON3_IMPORTS))
    if unknown:
        return [f"uses what PYTHON3_IMPORTS (build_support.py) lacks, so the Windows build's link "
                f"would fail: {', '.join(unknown)}"]
    return []


def check_wheel(wheel: Path) -> list[str]:
    """Every problem of every extension in a Linux abi3 wheel, each prefixed by the file's
    name."""
    if "-manylinux" not in wheel.name and "-linux_" not in wheel.name:
        return [f"{wheel.name}: not a Linux wheel"]
    if "-abi3-" not in wheel.name:  # a free-threaded build's (cp313t) has no Windows twin
        return [f"{wheel.name}: not an abi3 wheel (the Windows build is abi3 only)"]
    return wheel_check.each_extension(
        wheel, ".so", undefined, lambda name, names: problems(names),
        lambda names: f"{sum(n.startswith(('Py', '_Py')) for n in names)} Python symbols")


def main(argv: list[str] | None = None) -> int:
    return wheel_check.main(__doc__ or "", "elf", check_wheel, argv)


if __name__ == "__main__":
    sys.exit(main())
