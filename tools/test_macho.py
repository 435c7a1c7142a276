"""tools/macho.py: what it reads from a Mach-O file and each thing it refuses, on small Mach-O
images made here (the `macos` session runs it on the real wheels)."""

from __future__ import annotations

import struct
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import macho  # noqa: E402

ARM64 = 0x0100000C


def image(exports: list[str], imports: list[str], dylibs: list[str] | None = None,
          minos: tuple[int, int] = (11, 0), cpu: int = ARM64) -> bytes:
    """A Mach-O library header with LC_BUILD_VERSION, one LC_LOAD_DYLIB per dylib and an
    LC_SYMTAB of defined (N_SECT | N_EXT) and undefined (N_EXT) symbols."""
    dylibs = [macho.LIBSYSTEM] if dylibs is None else dylibs
    cmds = [struct.pack("<IIIIII", macho.LC_BUILD_VERSION, 24, 1,
                        (minos[0] << 16) | (minos[1] << 8), 0, 0)]
    for lib in dylibs:
        name = lib.encode() + b"\0"
        size = (24 + len(name) + 7) // 8 * 8
        cmds.append(struct.pack("<IIIIII", 0xC, size, 24, 0, 0, 0) + name.ljust(size - 24, b"\0"))
    names = [(s, 0x0F) for s in exports] + [(s, 0x01) for s in imports]
    header_size = 32 + sum(map(len, cmds)) + 24
    symoff = header_size
    stroff = symoff + 16 * len(names)
    strings, table = b"\0", b""
    for name, ntype in names:
        table += struct.pack("<IBBHQ", len(strings), ntype, 1 if ntype & 0x0E else 0, 0, 0)
        strings += name.encode() + b"\0"
    cmds.append(struct.pack("<IIIIII", macho.LC_SYMTAB, 24, symoff, len(names), stroff, len(strings)))
    body = b"".join(cmds)
    head = struct.pack("<IiiIIIII", macho.MH_MAGIC_64, cpu, 0, macho.MH_DYLIB, len(cmds), len(body), 0, 0)
    return head + body + table + strings


GOOD = image(["_PyInit__native", "_zr_reader_open", "___dso_handle"], ["_PyList_New", "_malloc"])


def test_reads_what_the_linker_wrote() -> None:
    m = macho.read(GOOD)
    assert (m.cpu, m.filetype, m.minos) == ("aarch64", macho.MH_DYLIB, (11, 0))
    assert m.dylibs == [macho.LIBSYSTEM]
    assert m.exports == ["_PyInit__native", "___dso_handle", "_zr_reader_open"]
    assert m.imports == ["_PyList_New", "_malloc"]
    assert macho.problems(m, "_native", "aarch64", {"_malloc"}) == []


@pytest.mark.parametrize(("data", "arch", "expected"), [
    (GOOD, "x86_64", "built for aarch64"),
    (image(["_PyInit__native"], [], minos=(12, 3)), "aarch64", "needs macOS (12, 3)"),
    (image(["_PyInit__native"], [], dylibs=[macho.LIBSYSTEM, "/opt/lib/libzstd.1.dylib"]),
     "aarch64", "loads"),
    (image(["_PyInit_other"], []), "aarch64", "does not export _PyInit__native"),
    (image(["_PyInit__native", "_ZSTD_compress"], []), "aarch64", "exports 1 symbols beyond"),
    (image(["_PyInit__native"], ["_malloc", "_os_sync_wait_on_address"]), "aarch64",
     "imports 1 symbols not in macos_libsystem.txt: _os_sync_wait_on_address"),
])
def test_refuses(data: bytes, arch: str, expected: str) -> None:
    found = macho.problems(macho.read(data), "_native", arch, {"_malloc"})
    assert found and expected in found[0], found


def test_wheels(tmp_path: Path) -> None:
    good = tmp_path / "zrecord-0.1.0-cp310-abi3-macosx_11_0_arm64.whl"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("zrecord/_native.abi3.so", GOOD)
    assert macho.check_wheel(good, {"_malloc"}) == []
    assert "_malloc" in macho.check_wheel(good, set())[0]
    linux = tmp_path / "zrecord-0.1.0-cp310-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(linux, "w") as z:
        z.writestr("zrecord/_native.abi3.so", b"\x7fELF")
    assert "not a macOS wheel" in macho.check_wheel(linux, set())[0]
    with pytest.raises(ValueError, match="not a 64-bit Mach-O"):
        macho.read(b"\x7fELF" + bytes(40))


def test_the_allowlist_names_each_symbol_once() -> None:
    lines = [line.strip() for line in macho.ALLOWED_FILE.read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(lines) == len(set(lines)) == len(macho.allowed_imports())
