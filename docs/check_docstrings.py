"""Fail when a public function, class, method or property of the three packages has no docstring.

Reads the source statically with griffe (the library the API reference is generated with), so
it needs none of the packages' optional dependencies. Public means: exported by a package's or
a public module's ``__all__`` (or, without ``__all__``, not starting with an underscore), in a
module whose name does not start with an underscore; for classes, every public method and
property, inherited ones included. Run by ``nox -s docs``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "zrecord": ROOT / "packages" / "zrecord" / "src",
    "loaderx": ROOT / "packages" / "loaderx" / "src",
    "loaderx_converter": ROOT / "packages" / "loaderx-converter" / "src",
}


def _public_names(module: griffe.Module) -> list[str]:
    if module.exports is not None:
        return [str(n) for n in module.exports]
    return [n for n, m in module.members.items() if not n.startswith("_") and not m.is_alias]


def _check_object(obj: griffe.Object, missing: list[str], seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.is_function or obj.is_class:
        if not obj.docstring or not obj.docstring.value.strip():
            missing.append(f"{obj.path} ({obj.relative_filepath}:{obj.lineno})")
    if obj.is_class:
        for name, member in obj.all_members.items():
            if name.startswith("_"):
                continue
            target = member.final_target if member.is_alias else member
            is_property = "property" in getattr(target, "labels", set())
            if target.is_function or is_property:
                if not target.docstring or not target.docstring.value.strip():
                    missing.append(f"{obj.path}.{name} ({target.relative_filepath}:{target.lineno})")


def _walk(module: griffe.Module, missing: list[str], seen: set[str]) -> None:
    for name in _public_names(module):
        if name not in module.members:
            continue
        member = module.members[name]
        try:
            target = member.final_target if member.is_alias else member
        except griffe.AliasResolutionError:
            continue  # a re-export from another distribution, checked there
        if target.is_module:
            continue
        _check_object(target, missing, seen)
    for name, sub in module.modules.items():
        if not name.startswith("_"):
            _walk(sub, missing, seen)


def main() -> int:
    loader = griffe.GriffeLoader(search_paths=[str(p) for p in PACKAGES.values()])
    missing: list[str] = []
    seen: set[str] = set()
    for package in PACKAGES:
        module = loader.load(package)
        assert isinstance(module, griffe.Module)
        if not module.docstring:
            missing.append(f"{package} (module docstring)")
        _walk(module, missing, seen)
    loader.resolve_aliases(external=False)
    if missing:
        print("public objects without a docstring:", *missing, sep="\n  ", file=sys.stderr)
        return 1
    print(f"every public function, class, method and property of {', '.join(PACKAGES)} has a "
          f"docstring ({len(seen)} objects checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
