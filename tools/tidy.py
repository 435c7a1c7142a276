"""The house rules that review used to keep by hand, checked on every run of `nox -s lint`
(after TigerBeetle's tidy.zig).

    python tools/tidy.py [--root DIR]

Each rule reports `path:line: rule: what` for every violation; the exit status is 1 when
there is any. The rules (docs/development.md, "The house rules"):

- function-length: a function has at most 70 lines, from its `fn`/`def` line to its last
  line (Zig `fn`, Python `def`, Cython `def`/`cdef`/`cpdef`). Short functions are read whole.
- zig-line-length: a line of Zig has at most 120 columns.
- zig-fmt: `zig fmt --check` accepts zig/ (skipped with --no-fmt, for the rule's own tests).
- zig-extern: every function the Zig core declares `extern` is called somewhere in zig/src:
  a declaration left behind hides which symbols the core really needs.
- stale-reference: a name of a Zig file (`gather.zig`) in any source, header or page names a
  file of zig/; a `module.decl` in a Zig or C comment, where `module` is a Zig file of
  zig/src, names something that file declares. Comments that point at code that moved mislead
  the next reader more than no comment.

- top-level-file: the only files at the top of the checkout are the house's own
  (`TOP_LEVEL_FILES`): a command's output or a scratch script saved there by mistake is
  committed with the next `git add -A` (err.txt, in 48e984d).

The files are the ones git tracks or would track (untracked files that are not ignored);
outside a git checkout, every file under the root.
"""

from __future__ import annotations

import argparse
import ast
import collections
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

FUNCTION_LINES_MAX = 70
ZIG_COLUMNS_MAX = 120
# Folders never read: environments, caches and build output.
SKIPPED_PARTS = {".git", ".venv", ".nox", "__pycache__", ".zig-cache", "zig-out", "build", "dist",
                 "node_modules"}


# The files the top of the checkout holds (the user fixed its folders; these are the house's).
TOP_LEVEL_FILES = {"README.md", "noxfile.py", "pyproject.toml", ".gitignore"}


class Problem(NamedTuple):
    path: str
    line: int
    rule: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.what}"


def repo_files(root: Path) -> list[Path]:
    """The files of the checkout at `root`: tracked, and untracked but not ignored."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
        files = [root / n for n in names]
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in root.rglob("*") if p.is_file()]
    return sorted(p for p in files if p.is_file()
                  and not SKIPPED_PARTS.intersection(p.relative_to(root).parts))


# ---- function length ----------------------------------------------------------------------

ZIG_FN = re.compile(r"^(\s*)(?:pub\s+)?(?:export\s+)?(?:inline\s+)?fn\s+(\w+)\s*\(")


def zig_functions(text: str) -> Iterator[tuple[str, int, int]]:
    """(name, first line, line count) of every Zig function with a body. A body ends at the
    first line, after the signature, that closes a brace at the signature's indentation."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = ZIG_FN.match(line)
        if m is None:
            continue
        indent = m.group(1)
        j = i
        # The signature may span lines; a declaration without a body ends with ';'.
        while j < len(lines) and not lines[j].rstrip().endswith("{"):
            if lines[j].rstrip().endswith(";"):
                break
            j += 1
        if j >= len(lines) or lines[j].rstrip().endswith(";"):
            continue
        k = j + 1
        while k < len(lines) and not re.match(rf"^{re.escape(indent)}\}}", lines[k]):
            k += 1
        yield m.group(2), i + 1, k - i + 1


def python_functions(text: str) -> Iterator[tuple[str, int, int]]:
    """(name, first line, line count) of every Python function (the `def` line to the last)."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


CYTHON_DEF = re.compile(r"^(\s*)(?:async\s+)?(?:def|cpdef|cdef)\b(?!\s+(?:class|extern|struct|enum|union|packed|public\s+class|readonly)\b)")


def cython_functions(text: str) -> Iterator[tuple[str, int, int]]:
    """(name, first line, line count) of every Cython function: a `def`, `cdef` or `cpdef`
    statement with parentheses that ends with ':', to its last indented line."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = CYTHON_DEF.match(line)
        if m is None or "(" not in line:
            continue
        depth, j = 0, i
        while j < len(lines):  # the statement, across lines, to its balancing ')'
            depth += lines[j].count("(") - lines[j].count(")")
            if depth <= 0:
                break
            j += 1
        if j >= len(lines) or not lines[j].split("#")[0].rstrip().endswith(":"):
            continue  # a declaration (`cdef int f(int x)`), not a definition
        indent, last = len(m.group(1)), j
        for k in range(j + 1, len(lines)):
            body = lines[k]
            if body.strip() and len(body) - len(body.lstrip()) <= indent:
                break
            if body.strip():
                last = k
        name = re.search(r"(\w+)\s*\(", line)
        yield (name.group(1) if name else "?"), i + 1, last - i + 1


def check_function_length(root: Path, files: list[Path]) -> list[Problem]:
    problems = []
    readers = {".zig": zig_functions, ".py": python_functions, ".pyx": cython_functions,
               ".pxi": cython_functions}
    for path in files:
        reader = readers.get(path.suffix)
        if reader is None:
            continue
        try:
            found = list(reader(path.read_text(encoding="utf-8")))
        except SyntaxError as exc:
            problems.append(Problem(rel(root, path), exc.lineno or 1, "function-length",
                                    f"cannot parse: {exc.msg}"))
            continue
        for name, line, count in found:
            if count > FUNCTION_LINES_MAX:
                problems.append(Problem(rel(root, path), line, "function-length",
                                        f"{name} has {count} lines (at most {FUNCTION_LINES_MAX})"))
    return problems


# ---- Zig lines, format and externs --------------------------------------------------------

def zig_files(files: list[Path]) -> list[Path]:
    return [p for p in files if p.suffix == ".zig"]


def zig_core(root: Path, files: list[Path]) -> list[Path]:
    """The Zig files of the core, zig/src (of the checkout's files: nothing ignored)."""
    return [p for p in zig_files(files) if p.parent.relative_to(root).parts == ("zig", "src")]


def check_zig_line_length(root: Path, files: list[Path]) -> list[Problem]:
    problems = []
    for path in zig_files(files):
        for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
            if len(line) > ZIG_COLUMNS_MAX:
                problems.append(Problem(rel(root, path), n, "zig-line-length",
                                        f"{len(line)} columns (at most {ZIG_COLUMNS_MAX})"))
    return problems


def check_zig_fmt(root: Path, files: list[Path]) -> list[Problem]:
    paths = [str(p) for p in zig_files(files)]
    if not paths:
        return []
    run = subprocess.run([sys.executable, "-m", "ziglang", "fmt", "--check", *paths],
                         capture_output=True, text=True)
    if run.returncode == 0:
        return []
    listed = [line for line in run.stdout.splitlines() if line.strip()]
    if not listed:
        return [Problem("zig", 1, "zig-fmt", (run.stderr.strip() or "zig fmt failed")[:400])]
    return [Problem(rel(root, Path(p)), 1, "zig-fmt", "not formatted as `zig fmt` formats it")
            for p in listed]


ZIG_EXTERN = re.compile(r'^\s*(pub\s+)?extern\s+(?:"c"\s+)?fn\s+(\w+)\s*\(', re.M)


def check_zig_externs(root: Path, files: list[Path]) -> list[Problem]:
    """A declaration is visible in its own file (through its container's name, as `c.open(`,
    or bare); a `pub` one also from other files, through a module (`sys.c.open(`)."""
    sources = {p: p.read_text(encoding="utf-8") for p in zig_core(root, files)}
    problems = []
    for path, text in sources.items():
        for m in ZIG_EXTERN.finditer(text):
            public, name = m.group(1), m.group(2)
            calls = re.compile(rf"\b{re.escape(name)}\s*\(")
            used = len(calls.findall(text)) - 1  # less the declaration
            if public:
                used += sum(len(calls.findall(t)) for p, t in sources.items() if p != path)
            if used <= 0:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(Problem(rel(root, path), line, "zig-extern",
                                        f"{name} is declared extern and never called"))
    return problems


# ---- stale references ---------------------------------------------------------------------

# A Zig file's name, maybe after a path: `gather.zig`, `zig/src/gather.zig`.
ZIG_NAME = re.compile(r"(?<![\w.*:-])((?:[\w.-]+/)*)([a-z_][a-z0-9_]*)\.zig\b")
MODULE_DECL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\.([A-Za-z_]\w*)")
# A declaration, a field (`name: T`) or an enum's value (`name,` or `name = 3,`).
ZIG_DECL = r"(?:fn|const|var)\s+{name}\b|^\s*(?:pub\s+)?{name}\s*[:,=]|enum(?:\(\w+\))?\s*\{{[^}}]*\b{name}\b"


def comment_text(path: Path, text: str) -> list[tuple[int, str]]:
    """(line, text) of the comments of a Zig, C or header file."""
    out = []
    in_block = False
    for n, line in enumerate(text.split("\n"), 1):
        if path.suffix == ".zig":
            at = line.find("//")
            if at >= 0:
                out.append((n, line[at:]))
            continue
        if in_block or "/*" in line or "//" in line:
            out.append((n, line))
        if "/*" in line:
            in_block = "*/" not in line[line.find("/*"):]
        elif "*/" in line:
            in_block = False
    return out


def check_stale_references(root: Path, files: list[Path]) -> list[Problem]:
    zig_names = {p.name for p in zig_files(files) if p.relative_to(root).parts[0] == "zig"}
    modules = {p.stem: p.read_text(encoding="utf-8") for p in zig_core(root, files)}
    # Types declared once in zig/src (`pub const Reader = struct`): `Reader.decl` in a comment
    # must name something of the file that declares the type.
    types: dict[str, str] = {}
    for text in modules.values():
        for m in re.finditer(r"^(?:pub\s+)?const\s+([A-Z]\w*)\s*=\s*(?:extern\s+|packed\s+)?(?:struct|union|enum)\b", text, re.M):
            types[m.group(1)] = "" if m.group(1) in types else text
    scopes = {**{t: text for t, text in types.items() if text}, **modules}
    problems = []
    readable = {".zig", ".c", ".h", ".py", ".pyx", ".pxd", ".pxi", ".md", ".toml", ".txt"}
    for path in files:
        if path.suffix not in readable or path.name in ("tidy.py", "test_tidy.py") or "conformance/v1" in path.as_posix():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.split("\n"), 1):
            for m in ZIG_NAME.finditer(line):
                folder, name = m.group(1), f"{m.group(2)}.zig"
                if folder.startswith("zig/"):
                    missing = not (root / folder / name).is_file()
                else:  # a bare name; a path elsewhere (another project's file) is not ours
                    missing = not folder and name not in zig_names
                if missing:
                    problems.append(Problem(rel(root, path), n, "stale-reference",
                                            f"{folder}{name} is no file of zig/"))
        if path.suffix not in (".zig", ".c", ".h"):
            continue
        for n, comment in comment_text(path, text):
            for m in MODULE_DECL.finditer(comment):
                scope, decl = m.group(1), m.group(2)
                if scope not in scopes or decl == "zig":
                    continue
                pattern = ZIG_DECL.format(name=re.escape(decl))
                if not re.search(pattern, scopes[scope], re.M):
                    where = f"{scope}.zig" if scope in modules else f"the file of {scope}"
                    problems.append(Problem(rel(root, path), n, "stale-reference",
                                            f"{scope}.{decl}: {where} declares no {decl}"))
    return problems


# ---- the run ------------------------------------------------------------------------------

def check_top_level_files(root: Path, files: list[Path]) -> list[Problem]:
    problems = []
    for path in files:
        name = rel(root, path)
        if "/" not in name and name not in TOP_LEVEL_FILES:
            problems.append(Problem(name, 1, "top-level-file",
                                    f"a file at the top of the checkout that is none of "
                                    f"{', '.join(sorted(TOP_LEVEL_FILES))}: move it into the "
                                    "folder it belongs to, or delete it if it was saved by mistake"))
    return problems


def rel(root: Path, path: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


RULES = {"function-length": check_function_length, "zig-line-length": check_zig_line_length,
         "zig-fmt": check_zig_fmt, "zig-extern": check_zig_externs,
         "stale-reference": check_stale_references, "top-level-file": check_top_level_files}


def run(root: Path, *, fmt: bool = True) -> list[Problem]:
    """Every rule's problems in the checkout at `root`."""
    files = repo_files(root)
    problems: list[Problem] = []
    for name, rule in RULES.items():
        if name == "zig-fmt" and not fmt:
            continue
        problems += rule(root, files)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout to check (default: this one)")
    parser.add_argument("--no-fmt", action="store_true", help="skip zig fmt (no ziglang here)")
    args = parser.parse_args()
    problems = run(args.root, fmt=not args.no_fmt)
    for p in problems:
        print(p)
    counts = collections.Counter(p.rule for p in problems)
    summary = ", ".join(f"{n} {rule}" for rule, n in sorted(counts.items())) or "no problems"
    print(f"tidy: {summary}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
