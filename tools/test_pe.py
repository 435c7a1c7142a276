"""tools/pe.py: what it reads from a PE image and each thing it refuses, on small images made
here (the `windows` session runs it on the real wheels)."""

from __future__ import annotations

import struct
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pe  # noqa: E402

SECTION_RVA, SECTION_AT = 0x1000, 0x400


def image(exports: list[str], imports: dict[str, list[str]], machine: int = pe.AMD64,
          dll: bool = True) -> bytes:
    """A PE32+ image with one section holding an export directory of `exports` and an import
    directory of `imports` (by name)."""
    sec = bytearray()

    def put(blob: bytes) -> int:
        rva = SECTION_RVA + len(sec)
        sec.extend(blob)
        sec.extend(bytes(-len(sec) % 8))
        return rva

    name_rvas = [put(n.encode() + b"\0") for n in exports]
    names_table = put(b"".join(struct.pack("<I", r) for r in name_rvas)) if exports else 0
    export_dir = put(struct.pack("<IIHHIIIIIII", 0, 0, 0, 0, 0, 1, len(exports), len(exports), 0,
                                 names_table, 0))
    descriptors = []
    for dll_name, names in imports.items():
        hints = [put(b"\0\0" + n.encode() + b"\0") for n in names]
        lookup = put(b"".join(struct.pack("<Q", h) for h in hints) + bytes(8))
        descriptors.append(struct.pack("<IIIII", lookup, 0, 0, put(dll_name.encode() + b"\0"), lookup))
    import_dir = put(b"".join(descriptors) + bytes(20))
    dirs = bytearray(16 * 8)
    struct.pack_into("<II", dirs, 0, export_dir, 40)
    struct.pack_into("<II", dirs, 8, import_dir, 20 * (len(descriptors) + 1))
    optional = struct.pack("<H", pe.PE32_PLUS) + bytes(110) + bytes(dirs)
    coff = struct.pack("<HHIIIHH", machine, 1, 0, 0, 0, len(optional), pe.IMAGE_FILE_DLL if dll else 0)
    section = struct.pack("<8sIIII", b".data", len(sec), SECTION_RVA, len(sec), SECTION_AT) + bytes(16)
    head = bytearray(b"MZ" + bytes(0x3A) + struct.pack("<I", 0x40) + b"PE\0\0" + coff + optional + section)
    return bytes(head.ljust(SECTION_AT, b"\0") + sec)


CRT = "api-ms-win-crt-runtime-l1-1-0.dll"
GOOD = image(["PyInit__native"], {"python3.dll": ["PyList_New"], "KERNEL32.dll": ["CreateFileW"],
                                  CRT: ["_initterm"]})


def test_reads_what_the_linker_wrote() -> None:
    p = pe.read(GOOD)
    assert (p.machine, p.is_dll, p.exports) == (pe.AMD64, True, ["PyInit__native"])
    assert p.imports == {"python3.dll": ["PyList_New"], "KERNEL32.dll": ["CreateFileW"],
                         CRT: ["_initterm"]}
    assert pe.problems(p, "_native") == []


@pytest.mark.parametrize(("data", "expected"), [
    (image(["PyInit__native"], {}, machine=0xAA64), "not an x86-64 DLL"),
    (image(["PyInit__native"], {}, dll=False), "not an x86-64 DLL"),
    (image(["PyInit__native", "zr_reader_open"], {}), "not only PyInit__native"),
    (image(["PyInit__native"], {"python311.dll": ["PyList_New"]}), "imports from python311.dll"),
    (image(["PyInit__native"], {"python3.dll": ["PyList_New", "_PyObject_Internal"]}),
     "what PYTHON3_IMPORTS lacks: _PyObject_Internal"),
])
def test_refuses(data: bytes, expected: str) -> None:
    found = pe.problems(pe.read(data), "_native")
    assert found and expected in found[0], found


def test_wheels(tmp_path: Path) -> None:
    good = tmp_path / "zrecord-0.1.0-cp310-abi3-win_amd64.whl"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("zrecord/_native.pyd", GOOD)
    assert pe.check_wheel(good) == []
    bad = tmp_path / "zrecord-0.1.0-cp310-abi3-win_amd64.whl"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("zrecord/_native.pyd", b"\x7fELF" + bytes(64))
    assert "not a PE file" in pe.check_wheel(bad)[0]
    assert "not a win_amd64 wheel" in pe.check_wheel(tmp_path / "x-1-cp310-abi3-macosx_11_0_arm64.whl")[0]
