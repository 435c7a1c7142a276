"""tools/elf.py: what it reads from an ELF file and what it refuses, on small files made here
(the `lint` session runs it on the real Linux wheels)."""

from __future__ import annotations

import struct
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import elf  # noqa: E402

SHT_STRTAB = 3


def image(symbols: list[tuple[str, bool]]) -> bytes:
    """An ELF64 little-endian file with a dynamic symbol table of `symbols` (name, defined)
    and its string table, as a linker lays them out: a null symbol first, then the others."""
    strings = bytearray(b"\0")
    table = bytearray(elf.SYMBOL_BYTES)  # the null symbol
    for name, defined in symbols:
        table += struct.pack("<IBBHQQ", len(strings), 0x12, 0, 7 if defined else 0, 0, 0)
        strings += name.encode() + b"\0"
    head = 64
    strings_at, table_at = head, head + len(strings) + (-len(strings) % 8)
    shoff = table_at + len(table)
    sections = [bytes(64),
                struct.pack("<IIQQQQIIQQ", 0, SHT_STRTAB, 0, 0, strings_at, len(strings), 0, 0, 1, 0),
                struct.pack("<IIQQQQIIQQ", 0, elf.SHT_DYNSYM, 0, 0, table_at, len(table), 1, 1, 8,
                            elf.SYMBOL_BYTES)]
    header = bytearray(b"\x7fELF" + bytes([2, 1, 1]) + bytes(9))
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(sections), 0)
    body = bytes(header) + bytes(strings).ljust(table_at - strings_at, b"\0") + bytes(table)
    return body + b"".join(sections)


GOOD = image([("PyInit__native", True), ("PyList_New", False), ("memcpy", False),
              ("_Py_Dealloc", False)])


def test_reads_the_undefined_symbols() -> None:
    assert elf.undefined(GOOD) == ["PyList_New", "memcpy", "_Py_Dealloc"]
    assert elf.problems(elf.undefined(GOOD)) == []


def test_a_python_symbol_outside_the_windows_import_list_is_refused() -> None:
    names = elf.undefined(image([("PySequence_Fictional", False), ("PyList_New", False)]))
    (problem,) = elf.problems(names)
    assert "PySequence_Fictional" in problem and "PyList_New" not in problem


def test_what_is_not_a_64_bit_little_endian_elf_is_refused() -> None:
    with pytest.raises(ValueError, match="not an ELF"):
        elf.undefined(b"MZ" + bytes(100))
    with pytest.raises(ValueError, match="64-bit"):
        elf.undefined(b"\x7fELF" + bytes([1, 1]) + bytes(100))
    with pytest.raises(ValueError, match="truncated"):
        elf.undefined(GOOD[:100])


def test_wheels(tmp_path: Path) -> None:
    def wheel(name: str, files: dict[str, bytes]) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as z:
            for n, data in files.items():
                z.writestr(n, data)
        return path
    tag = "x-0.1-cp310-abi3-manylinux_2_28_x86_64.whl"
    assert elf.check_wheel(wheel(tag, {"x/_native.abi3.so": GOOD})) == []
    bad = image([("PyFictional_Call", False)])
    (problem,) = elf.check_wheel(wheel("b" + tag, {"x/_native.abi3.so": bad}))
    assert problem.startswith("b" + tag + "/x/_native.abi3.so: ") and "PyFictional_Call" in problem
    assert elf.check_wheel(wheel("c" + tag, {"x/__init__.py": b""})) == [f"c{tag}: holds no extension"]
    assert "not a Linux wheel" in elf.check_wheel(wheel("x-0.1-cp310-abi3-win_amd64.whl", {}))[0]
    free = wheel("x-0.1-cp313-cp313t-manylinux_2_28_x86_64.whl", {"x/_native.so": GOOD})
    assert "not an abi3 wheel" in elf.check_wheel(free)[0]
    assert elf.main([str(tmp_path / tag)]) == 0
    assert elf.main([str(tmp_path / ("b" + tag))]) == 1
