"""Fail when a public name of the three packages has no entry in the built API reference, or
when a reference page shows a Sphinx role as text.

    python docs/tools/check_reference.py SITE_DIR      # after mkdocs build (build_site.py)

Public means what docs/check_docstrings.py means: exported by the ``__all__`` of a package or
of a public module (a module whose name does not start with an underscore), or, in a module
without ``__all__``, defined there under a name without a leading underscore; and for a class,
every method, property and documented attribute whose name has no leading underscore,
inherited ones included. A name re-exported under several paths (``loaderx.zrecord.Dense`` is
``zrecord.Dense``) needs one entry. The entries are read from the ``objects.inv`` inventory
that mkdocstrings writes beside the site, which lists every rendered heading.
"""

from __future__ import annotations

import re
import sys
import zlib
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "zrecord": ROOT / "packages" / "zrecord" / "src",
    "loaderx": ROOT / "packages" / "loaderx" / "src",
    "loaderx_converter": ROOT / "packages" / "loaderx-converter" / "src",
}
# Sphinx cross-reference roles that would reach the page as literal text.
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|mod|data|obj|const|ref):`")


def inventory(site: Path) -> set[str]:
    """The object names listed in the site's Sphinx-format inventory (objects.inv)."""
    data = (site / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):  # four plain-text header lines, then zlib
        header_end = data.index(b"\n", header_end) + 1
    lines = zlib.decompress(data[header_end:]).decode().splitlines()
    return {line.split(" ", 1)[0] for line in lines if line}


def _public_names(module: griffe.Module) -> list[str]:
    if module.exports is not None:
        return [str(n) for n in module.exports]
    return [n for n, m in module.members.items() if not n.startswith("_") and not m.is_alias]


def _target(obj: griffe.Object | griffe.Alias) -> griffe.Object | None:
    try:
        return obj.final_target if obj.is_alias else obj  # type: ignore[return-value]
    except griffe.AliasResolutionError:
        return None  # a re-export from another distribution: required where it is defined


def _documented(obj: griffe.Object) -> bool:
    return bool(obj.docstring and obj.docstring.value.strip())


def public_api(loader: griffe.GriffeLoader) -> dict[str, set[str]]:
    """{key: public paths}, the key being an object's canonical path (for a class member:
    the canonical path of the class it was reached through, a dot and the member's name)."""
    found: dict[str, set[str]] = {}

    def add(key: str, path: str) -> None:
        found.setdefault(key, set()).add(path)

    def walk(module: griffe.Module) -> None:
        for name in _public_names(module):
            if name.startswith("__") or name not in module.members:
                continue
            target = _target(module.members[name])
            if target is None or target.is_module:
                continue
            if target.is_attribute and module.exports is None and not _documented(target):
                continue  # a module constant that is neither exported nor documented
            path = f"{module.path}.{name}"
            add(target.path, path)
            if target.is_class:
                for member_name, member in target.all_members.items():
                    if member_name.startswith("_"):
                        continue
                    m = _target(member)
                    if m is None:
                        continue
                    if m.is_attribute and not _documented(m) and "property" not in m.labels:
                        continue  # an undocumented attribute: check_docstrings' business
                    add(f"{target.path}.{member_name}", f"{path}.{member_name}")
        for name, sub in module.members.items():
            # Submodules only: an imported module (``import zrecord``) is an alias, walked
            # from its own package.
            if not name.startswith("_") and not sub.is_alias and sub.is_module:
                walk(sub)

    for package in PACKAGES:
        module = loader.load(package)
        assert isinstance(module, griffe.Module)
        walk(module)
    return found


def roles_shown(site: Path) -> list[str]:
    shown = []
    for page in sorted((site / "api").rglob("*.html")):
        text = re.sub(r"<[^>]+>", "", page.read_text())
        for match in ROLE.finditer(text):
            shown.append(f"{page.relative_to(site)}: ...{text[match.start():match.start() + 40]}")
    return shown


def main(site: Path) -> int:
    loader = griffe.GriffeLoader(search_paths=[str(p) for p in PACKAGES.values()])
    api = public_api(loader)
    loader.resolve_aliases(external=False)
    listed = inventory(site)
    missing = sorted(min(paths, key=lambda p: (len(p), p)) for paths in api.values()
                     if not paths & listed)
    problems = 0
    if missing:
        print("public names without an entry in the API reference (docs/api/*.md):",
              *missing, sep="\n  ", file=sys.stderr)
        problems += 1
    shown = roles_shown(site)
    if shown:
        print("Sphinx roles shown as text in the API reference:", *shown, sep="\n  ",
              file=sys.stderr)
        problems += 1
    if problems:
        return 1
    print(f"API reference: every one of {len(api)} public names has an entry; no Sphinx role "
          "is shown as text")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
