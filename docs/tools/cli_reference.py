"""Write the command-line reference from the programs' own ``--help``.

The page docs/api/cli.md holds the prose and, per program, a marker line
``<!-- cli: PROGRAM -->``. This script replaces each marker with the ``--help`` output of the
program and of every subcommand, as the installed program prints it (so the reference cannot
drift from argparse). Subcommands are read from the program's argparse parser.

    python docs/tools/cli_reference.py docs/api/cli.md OUT.md
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# The programs and the function that builds each one's argparse parser.
PROGRAMS = {
    "zrecord": "zrecord.cli",
    "loaderx-convert": "loaderx_converter.cli",
}
WIDTH = "92"  # argparse wraps to $COLUMNS: fixed, so the page is the same on every machine


def _subcommands(module: str) -> list[str]:
    """The subcommand names of the parser built by `module`'s ``_parser()``, in help order."""
    mod = __import__(module, fromlist=["_parser"])
    parser = mod._parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def _help(program: str, *args: str) -> str:
    exe = shutil.which(program)
    if exe is None:
        raise SystemExit(f"cli_reference: {program} is not installed (pip install the packages "
                         "first: the reference is their --help)")
    env = {**os.environ, "COLUMNS": WIDTH, "NO_COLOR": "1"}
    done = subprocess.run([exe, *args, "--help"], capture_output=True, text=True, env=env,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"cli_reference: `{program} {' '.join(args)} --help` exited "
                         f"{done.returncode}: {done.stderr.strip()}")
    return done.stdout.rstrip() + "\n"


def section(program: str) -> str:
    out = [f"## `{program}`\n", "```text", _help(program).rstrip(), "```\n"]
    for sub in _subcommands(PROGRAMS[program]):
        out += [f"### `{program} {sub}`\n", "```text", _help(program, sub).rstrip(), "```\n"]
    return "\n".join(out)


def render(page: str) -> str:
    def fill(match: re.Match[str]) -> str:
        program = match.group(1)
        if program not in PROGRAMS:
            raise SystemExit(f"cli_reference: unknown program {program!r} in a marker")
        return section(program)

    text, count = re.subn(r"^<!-- cli: (\S+) -->$", fill, page, flags=re.M)
    if count != len(PROGRAMS):
        raise SystemExit(f"cli_reference: expected one marker per program {list(PROGRAMS)}, "
                         f"found {count}")
    return text


def main() -> int:
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.write_text(render(src.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
