"""Check that every sibling-distribution pin in the monorepo is satisfied by the sibling itself.

loaderx pins zrecord, loaderx-converter pins zrecord, loaderx's extra pins loaderx-converter:
a release that bumps one version without the pins that name it fails here, not on a user's
machine. Exits non-zero with one line per broken pin.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    projects = {}
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        meta = tomllib.loads(pyproject.read_text())["project"]
        projects[meta["name"]] = meta
    failures = []
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
            version = Version(projects[req.name]["version"])
            if not req.specifier.contains(version, prereleases=True):
                failures.append(f"{name} requires {text}, but {req.name} is {version}")
    for line in failures:
        print("broken pin:", line)
    print(f"{checked} sibling pins checked, {len(failures)} broken")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
