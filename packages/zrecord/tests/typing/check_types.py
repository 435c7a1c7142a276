"""Check a package's public types with mypy --strict (run by ``nox -s lint``), from the two
snippets in FOLDER (this folder, zrecord's, by default; loaderx has its own):

- accepted.py, uses that must type-check, must get no error at all;
- rejected.py, uses that must not, must get on each line marked ``# E: CODE`` or
  ``# E: CODE: TEXT`` an error of that code whose message holds TEXT, and no error on any
  other line.

It cannot pass vacuously: every marker must be matched, accepted.py's ``assert_type`` calls
fail if anything there is ``Any`` (zrecord not found included), and an error anywhere else
(in zrecord's own sources, which mypy follows from the snippets) fails too.

    MYPYPATH=packages/zrecord/src python packages/zrecord/tests/typing/check_types.py [FOLDER]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent).resolve()
ACCEPTED = HERE / "accepted.py"
REJECTED = HERE / "rejected.py"
MARKER = re.compile(r"#\s*E:\s*(?P<code>[a-z-]+)(?::\s*(?P<text>.*?))?\s*$")
# mypy's error lines: "PATH:LINE: error: MESSAGE  [CODE]" (notes and the summary are not).
ERROR = re.compile(r"^(?P<path>.+?):(?P<line>[0-9]+): error: (?P<message>.*)  \[(?P<code>[a-z-]+)\]$")


def markers(path: Path) -> dict[int, tuple[str, str]]:
    """{line number: (code, text)} of the ``# E:`` markers in `path`."""
    found = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = MARKER.search(line)
        if match:
            found[number] = (match["code"], match["text"] or "")
    return found


def mypy_errors() -> list[tuple[Path, int, str, str]]:
    """(file, line, code, message) of every error mypy --strict reports for both snippets."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports",
                           "--no-pretty", "--show-error-codes", "--hide-error-context",
                           str(ACCEPTED), str(REJECTED)],
                          capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):  # 2: mypy itself failed (a crash, a bad option)
        sys.exit(f"mypy failed (status {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    errors = []
    for line in proc.stdout.splitlines():
        match = ERROR.match(line)
        if match:
            errors.append((Path(match["path"]).resolve(), int(match["line"]), match["code"],
                           match["message"]))
        elif ": error: " in line:
            sys.exit(f"cannot read mypy's error line: {line!r}")
    return errors


def problems(errors: list[tuple[Path, int, str, str]],
             expected: dict[int, tuple[str, str]]) -> list[str]:
    """What differs between mypy's `errors` and the `expected` errors of rejected.py."""
    found = []
    matched: set[int] = set()
    for path, line, code, message in errors:
        want = expected.get(line) if path == REJECTED else None
        if want is not None and want[0] == code and want[1] in message:
            matched.add(line)
        else:
            where = path.relative_to(HERE) if path.is_relative_to(HERE) else path
            found.append(f"unexpected error {where}:{line}: {message}  [{code}]")
    for line in sorted(set(expected) - matched):
        code, text = expected[line]
        found.append(f"rejected.py:{line}: expected an error [{code}] {text!r}; mypy reported "
                     "none that matches")
    return found


def main() -> int:
    expected = markers(REJECTED)
    if not expected or markers(ACCEPTED):
        sys.exit("rejected.py must hold # E: markers, and accepted.py none")
    found = problems(mypy_errors(), expected)
    for problem in found:
        print(problem, file=sys.stderr)
    if found:
        return 1
    print(f"types: accepted.py type-checks; rejected.py gets each of its {len(expected)} "
          "expected errors and no other")
    return 0


if __name__ == "__main__":
    sys.exit(main())
