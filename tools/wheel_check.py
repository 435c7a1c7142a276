"""What the checks of the wheels' extensions share (tools/macho.py, pe.py, elf.py): reading
each extension file of a wheel, and the command line that runs a check over wheels."""

from __future__ import annotations

import argparse
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

_T = TypeVar("_T")


def each_extension(wheel: Path, suffix: str, read: Callable[[bytes], _T],
                   judge: Callable[[str, _T], list[str]], describe: Callable[[_T], str]) -> list[str]:
    """The problems that `judge(name, parsed)` finds in each file of `wheel` whose name ends in
    `suffix`, as `read` parses it (its ValueError is that file's problem), each prefixed by
    the wheel's and the file's names; one problem when the wheel holds no such file. Prints
    `describe(parsed)` of each file that parsed on stderr."""
    out = []
    with zipfile.ZipFile(wheel) as z:
        libs = [n for n in z.namelist() if n.endswith(suffix)]
        if not libs:
            return [f"{wheel.name}: holds no extension"]
        for name in libs:
            try:
                parsed = read(z.read(name))
            except ValueError as exc:
                out.append(f"{wheel.name}/{name}: {exc}")
                continue
            out += [f"{wheel.name}/{name}: {x}" for x in judge(name, parsed)]
            print(f"{wheel.name}/{name}: {describe(parsed)}", file=sys.stderr)
    return out


def module_of(name: str) -> str:
    """The module name of an extension file's path in a wheel (``zrecord/_native.abi3.so``:
    ``_native``)."""
    return Path(name).name.split(".", 1)[0]


def main(doc: str, tag: str, check_wheel: Callable[[Path], list[str]],
         argv: list[str] | None = None) -> int:
    """The command line of a check: `check_wheel` over the wheels given, each problem printed
    after `tag`; exit status 1 when any was found."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("wheels", nargs="+", type=Path)
    args = ap.parse_args(argv)
    found = [x for wheel in args.wheels for x in check_wheel(wheel)]
    for x in found:
        print(f"{tag}: {x}", file=sys.stderr)
    return 1 if found else 0
