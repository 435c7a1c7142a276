"""Every `pip install` line that the project shows its users, resolved as written from the
repository's root: run by the `wheelhouse` nox session.

    python tools/install_lines.py --venv FOLDER --wheel packages/zrecord=WHEEL ... \
        [--wheelhouse FOLDER] [--list]

The lines are collected, never listed by hand, so that a new one is covered:

- README.md, docs/**/*.md and packages/*/README.md: each command of a shell code block that
  runs `pip install` (a `\\` continuation joined, a `&&` chain cut into its commands, comments
  dropped), and each inline code span that holds one (a span may wrap over lines);
- packages/*/src/**/*.py: every string constant (docstrings, error messages) that says
  `pip install ...`, up to the end of the command (a comma, semicolon, parenthesis or
  backquote outside quotes).

The CHANGELOGs are left out: they record what was true at each release. A span that names
`pip install` with options only (say, `pip install --dry-run`) mentions the command and is
not an install line.

Each distinct line is resolved by `pip install --dry-run --report` with the python of a fresh
virtual environment `--venv`, from the repository's root, with pip's configuration and index
as the user has them; a dry run installs nothing, so one environment serves every line. Where a
line names one of the project's package folders (`./packages/loaderx[ray]`, or editable), pip
is handed the wheel built from that folder in this run instead (`--wheel`), with the same
extras: its metadata is the folder's, and pip could read the folder's only by building it
(hatchling offers pip no metadata without a build), which would compile the native code for
each line and, for an editable line, write the extension into the clone's src/. Lines that
install from the wheelhouse (`--find-links dist`) resolve beside `--wheelhouse`'s `dist` folder
with no pip configuration and no index, as on a machine that has only that folder.

Then, from pip's report, a line fails when:

- one of the project's distributions would come from anywhere but this clone's packages/
  folder: the `loaderx` on PyPI is another project, and zrecord and loaderx-converter are not
  published. Allowed only where the line asks for a version that is not ours (the benchmarks'
  peer, `loaderx==2.5.9`), or is the docs' warning `pip install loaderx` itself, which must
  then indeed install that other project;
- it asks one of the project's packages for an extra that the package does not have (pip
  only warns);
- a third-party distribution that the packages' pyproject.toml files require would be installed
  at a version those files refuse (a message that names an extra's requirement, such as
  obstore for zrecord's `remote` extra, keeps the extra's pins).

Exits non-zero with one paragraph per failing line, naming the files and lines that show it.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import tomllib
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_pins import read_version  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*(```|~~~)\s*(\S*)")
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
# pip's options that take a value; what follows any other option is a requirement or a path.
VALUE_OPTIONS = {"-f", "--find-links", "-i", "--index-url", "--extra-index-url", "-c",
                 "--constraint", "-t", "--target", "--report", "--python-version", "--platform",
                 "--root", "--prefix", "--src", "--progress-bar"}
# The docs warn that this line installs the other project: checked to stay true.
WARNING_LINE = ("loaderx",)
# Resolutions at once: each is mostly waiting on the index.
PARALLEL_RESOLUTIONS = 4


@dataclass
class Line:
    """One distinct install line: pip's arguments after `install`, and where it is shown."""

    args: tuple[str, ...]
    places: list[str] = field(default_factory=list)
    seconds: float = 0.0  # how long pip took to resolve it

    def shown(self) -> str:
        return "pip install " + shlex.join(self.args)


def pip_args(command: str) -> list[list[str]]:
    """The arguments after `install` of each `pip install` in a shell `command` (several for a
    `&&` chain); none where the text does not parse as shell words."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return []
    found, current = [], []
    for word in words + [";"]:
        if word and set(word) <= set(";&|()"):
            while current and re.match(r"[A-Za-z_][A-Za-z0-9_]*=", current[0]):
                current = current[1:]  # an environment assignment before the program
            program = current
            if len(program) > 1 and Path(program[0]).name in ("pip", "pip3") \
                    and program[1] == "install":
                found.append(program[2:])
            elif len(program) > 3 and Path(program[0]).name.startswith("python") \
                    and program[1:4] == ["-m", "pip", "install"]:
                found.append(program[4:])
            current = []
        else:
            current.append(word)
    return found


def has_target(args: list[str]) -> bool:
    """Whether `args` name something to install (not only options: a mention of the command)."""
    skip = False
    for word in args:
        if skip:
            skip = False
        elif word in VALUE_OPTIONS:
            skip = True
        elif not word.startswith("-") or word in ("-e", "--editable", "-r", "--requirement"):
            return True
    return False


def markdown_commands(text: str) -> list[tuple[int, str]]:
    """(line number, shell text) of every command in `text`'s shell code blocks, and of every
    inline code span outside code blocks that mentions `pip install`."""
    found, prose = [], []
    fence, pending, start = None, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if opened and fence is None:
            fence = opened.group(2).lower()
            prose.append("")
            continue
        if opened:
            fence = None
            prose.append("")
            continue
        if fence is None:
            prose.append(line)
            continue
        prose.append("")
        if fence in SHELL_FENCES:
            start = start or number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            found.append((start, pending + line))
            pending, start = "", 0
    # Spans: a run of backquotes, text without a blank line, the same run (CommonMark).
    body = "\n".join(prose)
    for span in re.finditer(r"(`+)((?:(?!\n\s*\n).)+?)\1", body, re.DOTALL):
        if "pip install" in span.group(2):
            number = body.count("\n", 0, span.start()) + 1
            found.append((number, " ".join(span.group(2).split())))
    return found


def cut_command(text: str) -> str:
    """The shell command at the start of `text` (prose that quotes one), up to the first comma,
    semicolon, parenthesis or backquote outside quotes; a sentence's last full stop dropped."""
    quote = None
    for i, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in ",;()`":
            text = text[:i]
            break
    text = text.rstrip()
    return text[:-1] if text.endswith(".") and not text.endswith(("./", " .", "..")) else text


def python_commands(source: str) -> list[tuple[int, str]]:
    """(line number, command) of every `pip install` that a string constant of `source` says."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = " ".join(node.value.split())
            for at in re.finditer(r"pip install", text):
                found.append((node.lineno, cut_command(text[at.start():])))
    return found


def collect(root: Path) -> list[Line]:
    """Every distinct install line of the docs, the READMEs and the packages' sources."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md")),
             *sorted((root / "packages").glob("*/README.md"))]
    found: list[tuple[str, str]] = []
    for page in pages:
        found += [(f"{page.relative_to(root)}:{n}", text)
                  for n, text in markdown_commands(page.read_text())]
    for source in sorted((root / "packages").glob("*/src/**/*.py")):
        found += [(f"{source.relative_to(root)}:{n}", text)
                  for n, text in python_commands(source.read_text())]
    lines: dict[tuple[str, ...], Line] = {}
    for place, text in found:
        for args in pip_args(text):
            if has_target(args):
                lines.setdefault(tuple(args), Line(tuple(args))).places.append(place)
    return list(lines.values())


@dataclass
class Ours:
    """The project's distributions (name -> folder and version) and the third-party
    requirements their pyproject.toml files declare (name -> requirements)."""

    folders: dict[str, Path]
    versions: dict[str, Version]
    declared: dict[str, list[Requirement]]

    @classmethod
    def read(cls, root: Path) -> Ours:
        folders, versions, declared = {}, {}, {}
        projects = sorted((root / "packages").glob("*/pyproject.toml"))
        for pyproject in projects:
            name = canonicalize_name(tomllib.loads(pyproject.read_text())["project"]["name"])
            folders[name], versions[name] = pyproject.parent, Version(read_version(pyproject))
        for pyproject in projects:
            meta = tomllib.loads(pyproject.read_text())["project"]
            texts = list(meta.get("dependencies", []))
            texts += [t for extra in meta.get("optional-dependencies", {}).values() for t in extra]
            for req in map(Requirement, texts):
                if canonicalize_name(req.name) not in folders:
                    declared.setdefault(canonicalize_name(req.name), []).append(req)
        return cls(folders, versions, declared)

    def not_ours(self, args: tuple[str, ...]) -> set[str]:
        """Our names that the line asks for at a version that is not ours, on purpose."""
        names = set()
        for word in args:
            try:
                req = Requirement(word)
            except InvalidRequirement:
                continue  # a path, an option or its value
            name = canonicalize_name(req.name)
            if name in self.versions and req.specifier and \
                    not req.specifier.contains(self.versions[name], prereleases=True):
                names.add(name)
        return names


def from_wheelhouse(args: tuple[str, ...]) -> bool:
    """Whether the line installs from the release's wheelhouse folder `dist` (README.md)."""
    return "--no-index" in args or any(
        a in ("-f", "--find-links") and b in ("dist", "dist/") for a, b in zip(args, args[1:]))


def swap_folders(args: tuple[str, ...],
                 wheels: dict[Path, Path]) -> tuple[list[str], dict[str, set[str]]]:
    """`args` with each of the project's package folders (`./packages/loaderx[ray]`, an
    editable `-e packages/zrecord`) replaced by the wheel built from it (`wheels`: folder ->
    wheel), extras kept; and the wheels used (as `file:` URLs, as pip's report gives them)
    with the extras asked of each."""
    out: list[str] = []
    used: dict[str, set[str]] = {}
    for word in args:
        path, bracket, extras = word.partition("[")
        folder = (ROOT / path).resolve() if path and not path.startswith("-") else None
        if folder is not None and folder in wheels:
            if out and out[-1] in ("-e", "--editable"):
                out.pop()  # the metadata of an editable install is the wheel's
            out.append(f"{wheels[folder]}{bracket}{extras}")
            asked = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}
            used.setdefault(wheels[folder].resolve().as_uri(), set()).update(asked)
        else:
            out.append(word)
    return out, used


def resolve(line: Line, python: Path, wheels: dict[Path, Path],
            wheelhouse: Path | None) -> tuple[dict | None, dict[str, set[str]], str]:
    """pip's installation report for `line` resolved from the repository's root (or, for a line
    of the wheelhouse, beside its `dist`), the wheels that stood for the clone's folders, and
    pip's last words (the report None) when pip fails."""
    env, cwd = dict(os.environ), ROOT
    args, used = swap_folders(line.args, wheels)
    if from_wheelhouse(line.args):
        if wheelhouse is None:
            return None, used, "a line of the wheelhouse, and no --wheelhouse was given"
        # As on a machine that has only the folder: no pip configuration, no index.
        env = {k: v for k, v in env.items() if not k.startswith("PIP_")}
        env["PIP_CONFIG_FILE"], cwd = os.devnull, wheelhouse
    env.pop("VIRTUAL_ENV", None)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run([str(python), "-m", "pip", "install", "--dry-run", "--quiet",
                               "--report", str(report), *args], cwd=cwd, env=env,
                              capture_output=True, text=True)
        if done.returncode != 0:
            said = [s for s in (done.stdout + done.stderr).splitlines()
                    if s.strip() and "is ignored: it is neither a file" not in s]
            return None, used, "\n".join(said[-12:])
        line.seconds = time.monotonic() - started
        return json.loads(report.read_text()), used, ""


def problems(line: Line, report: dict, used: dict[str, set[str]], ours: Ours,
             wheelhouse: Path | None) -> list[str]:
    """What is wrong with what `line` would install (`report`, pip's installation report;
    `used`, the wheels that stood for the clone's folders)."""
    found, deliberate = [], ours.not_ours(line.args)
    house = wheelhouse / "dist" if wheelhouse is not None and from_wheelhouse(line.args) else None
    for item in report["install"]:
        name = canonicalize_name(item["metadata"]["name"])
        version = Version(item["metadata"]["version"])
        url = item["download_info"]["url"]
        local = url in used or (house is not None and url.startswith("file://")
                                and Path(url.removeprefix("file://")).parent == house.resolve())
        if line.args == WARNING_LINE and name == "loaderx":
            if local or version == ours.versions[name]:
                found.append(f"the docs warn that it installs the other project on PyPI, but it "
                             f"installs loaderx {version} from {url}: reword the warning")
        elif name in ours.folders and name not in deliberate and not local:
            folder = ours.folders[name].relative_to(ROOT)
            found.append(f"installs {name} {version} from {url}, not this clone's {folder}: "
                         f"from a clone, name the folder (`./{folder}`, with its extras in "
                         f"quotes) and each of the project's packages that it requires")
        refused = sorted({str(req) for req in ours.declared.get(name, [])
                          if (req.marker is None or req.marker.evaluate({"extra": ""}))
                          and not req.specifier.contains(version, prereleases=True)})
        if refused:
            found.append(f"installs {name} {version}, which the packages refuse "
                         f"({', '.join(refused)})")
    if line.args == WARNING_LINE and not any(
            canonicalize_name(i["metadata"]["name"]) == "loaderx" for i in report["install"]):
        found.append("the docs warn that it installs the other loaderx, but it installs none")
    return found


def unknown_extras(report: dict, used: dict[str, set[str]]) -> list[str]:
    """The extras that a line asks of the clone's packages (`used`) and that they do not have
    (pip only warns about those)."""
    return [f"{item['metadata']['name']} has no extra {extra!r}"
            for item in report["install"] if item["download_info"]["url"] in used
            for extra in sorted(used[item["download_info"]["url"]]
                                - set(item["metadata"].get("provides_extra") or []))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, help="folder for the fresh virtual environment")
    ap.add_argument("--wheel", action="append", default=[], metavar="FOLDER=WHEEL",
                    help="the wheel built from one of the project's package folders (repeat)")
    ap.add_argument("--wheelhouse", type=Path,
                    help="the folder that holds the wheelhouse `dist` (the wheelhouse session's)")
    ap.add_argument("--list", action="store_true", help="print the lines and where; resolve none")
    args = ap.parse_args(argv)
    lines = collect(ROOT)
    if args.list or args.venv is None:
        for line in lines:
            print(f"{line.shown()}\n    " + "\n    ".join(line.places))
        return 0
    wheels = {(ROOT / f).resolve(): Path(w).resolve()
              for f, _, w in (pair.partition("=") for pair in args.wheel)}
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(args.venv)], check=True)
    python, ours = args.venv / "bin" / "python", Ours.read(ROOT)
    with ThreadPoolExecutor(PARALLEL_RESOLUTIONS) as pool:
        results = list(pool.map(lambda line: resolve(line, python, wheels, args.wheelhouse),
                                lines))
    failed = 0
    for line, (report, used, said) in zip(lines, results):
        wrong = ([f"pip failed:\n{said}"] if report is None else
                 problems(line, report, used, ours, args.wheelhouse)
                 + unknown_extras(report, used))
        if wrong:
            failed += 1
            print(f"FAIL {line.shown()}\n  shown at " + ", ".join(line.places) + "\n  "
                  + "\n  ".join(wrong), file=sys.stderr)
    slowest = max(lines, key=lambda line: line.seconds)
    print(f"install lines: {len(lines) - failed} of {len(lines)} resolve as documented (the "
          f"slowest in {slowest.seconds:.0f} s: {slowest.shown()})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
