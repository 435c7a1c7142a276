"""Check that every sibling-distribution pin in the monorepo is satisfied by the sibling itself,
and that each distribution's changelog opens with its version.

loaderx pins zrecord, loaderx-converter pins zrecord, loaderx's extra pins loaderx-converter:
a release that bumps one version without the pins that name it fails here, not on a user's
machine. A version is written once, as ``__version__`` in the package's ``__init__.py``, which
pyproject.toml's ``[tool.hatch.version]`` reads; the first ``## `` heading of CHANGELOG.md must
name that version, so a bump without its changelog entry fails too. A development-only
distribution (classifier ``Private :: Do Not Upload``, as zrecord-testkit) is never released, and
a released distribution must not require it, not even in an extra: users could not install that.
Exits non-zero with one line per problem.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
# The classifier that package indexes refuse on upload: it marks a distribution never released.
UNRELEASED = "Private :: Do Not Upload"


def read_version(pyproject: Path) -> str:
    """The distribution's version: the ``__version__`` line of the file that hatch reads."""
    data = tomllib.loads(pyproject.read_text())
    if "version" in data["project"]:
        return str(data["project"]["version"])
    source = pyproject.parent / data["tool"]["hatch"]["version"]["path"]
    found = re.search(r'^__version__ = "([^"]+)"$', source.read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"{source}: no __version__ line")
    return found.group(1)


def main() -> int:
    projects = {}
    failures = []
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        meta = tomllib.loads(pyproject.read_text())["project"]
        meta["version"] = read_version(pyproject)
        projects[meta["name"]] = meta
        meta["released"] = UNRELEASED not in meta.get("classifiers", [])
        heading = re.search(r"^## (\S+)", (pyproject.parent / "CHANGELOG.md").read_text(), re.MULTILINE)
        if heading is None or heading.group(1) != meta["version"]:
            failures.append(f"{meta['name']} is {meta['version']}, but its CHANGELOG.md opens with "
                            f"{heading.group(1) if heading else 'no version heading'}")
    checked = 0
    for name, meta in projects.items():
        reqs = list(meta.get("dependencies", []))
        for extra in meta.get("optional-dependencies", {}).values():
            reqs.extend(extra)
        for text in reqs:
            req = Requirement(text)
            if req.name not in projects:
                continue
            checked += 1
            if meta["released"] and not projects[req.name]["released"]:
                failures.append(f"{name} requires {text}, but {req.name} is never released "
                                f"(classifier {UNRELEASED!r})")
            version = Version(projects[req.name]["version"])
            if not req.specifier.contains(version, prereleases=True):
                failures.append(f"{name} requires {text}, but {req.name} is {version}")
    for line in failures:
        print("broken:", line)
    print(f"{checked} sibling pins and {len(projects)} changelogs checked, {len(failures)} broken")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
