"""Build the documentation site: stage the published pages, generate the command-line
reference, run ``mkdocs build --strict`` and check the API reference's coverage.

    python docs/tools/build_site.py WORKDIR        # WORKDIR/stage (pages), WORKDIR/site (HTML)

Only what a reader of the documentation needs is published: the pages under docs/ (not its
tools, examples or mkdocs.yml), the specification, the conformance README and the three
changelogs. They are staged with their repository paths, so relative links written for the
repository are checked by the strict build; docs/tools/mkdocs_hooks.py gives them their site
addresses and sends links to other repository files to the repository host. The API reference
is read from the package sources by mkdocstrings (nothing is imported); the command-line
reference is the installed programs' ``--help`` (docs/tools/cli_reference.py), so the
packages must be installed. ``nox -s docs`` runs this script.

Pages speak to their readers: a staged page other than a changelog or a decision record
(docs/decisions/, which are history) that names a work item of the project's tracker
(``[F6]``, ``[V1] item 2``) or calls loaderx 2.5.9 "the peer" fails the build.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIG = ROOT / "docs" / "mkdocs.yml"
CLI_PAGE = "docs/api/cli.md"
# A tracker tag is one capital letter and a number in brackets, as in "[S1]" or "[V1] item 2";
# the specification's requirement IDs ("[ZR-HDR-004]") are not.
_TRACKER_WORDS = re.compile(r"\[[A-Z][0-9]+\]|\[[A-Z][0-9]+ item|(?i:\bthe peer\b)")

sys.path.insert(0, str(HERE))


def published(rel: str) -> bool:
    """Whether the repository file `rel` belongs on the site."""
    parts = rel.split("/")
    if parts[0] == "docs":
        if len(parts) > 1 and parts[1] in ("tools", "examples"):
            return False
        return rel != "docs/mkdocs.yml" and not rel.endswith(".py")
    if parts[0] == "spec":
        return rel.endswith(".md")
    if rel == "conformance/README.md":
        return True
    return len(parts) == 3 and parts[0] == "packages" and parts[2] == "CHANGELOG.md"


def repository_files() -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, text=True, check=True)
    return [rel for rel in out.stdout.splitlines() if (ROOT / rel).is_file()]


def stage(dest: Path) -> list[str]:
    import cli_reference

    shutil.rmtree(dest, ignore_errors=True)
    staged = []
    for rel in repository_files():
        if published(rel):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
            staged.append(rel)
    (dest / CLI_PAGE).write_text(cli_reference.render((ROOT / CLI_PAGE).read_text()))
    return staged


def tracker_words(pages: Path, staged: list[str]) -> list[str]:
    """``path:line: text`` for every tracker tag or "the peer" on a staged page that readers
    read as documentation (not the changelogs, not the decision records)."""
    found = []
    for rel in staged:  # the command-line page as generated, with the programs' --help
        if not rel.endswith(".md") or rel.endswith("CHANGELOG.md") or \
                rel.startswith("docs/decisions/"):
            continue
        for number, line in enumerate((pages / rel).read_text().splitlines(), 1):
            if _TRACKER_WORDS.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    return found


def main() -> int:
    import check_reference  # griffe: imported here, so that published() needs nothing

    work = Path(sys.argv[1]).resolve()
    pages = work / "stage"
    site = work / "site"
    staged = stage(pages)
    print(f"staged {len(staged)} files into {pages}")
    found = tracker_words(pages, staged)
    if found:
        print("pages name work items of the tracker (say what the section is about) or call "
              "loaderx 2.5.9 'the peer':\n  " + "\n  ".join(found), file=sys.stderr)
        return 1
    env = {**os.environ, "LOADERX_DOCS_STAGE": str(pages)}
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                    str(CONFIG), "--site-dir", str(site)], env=env, check=True)
    if check_reference.main(site) != 0:
        return 1
    print(f"site: {site / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
