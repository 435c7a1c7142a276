"""Griffe extensions (docs/mkdocs.yml, mkdocstrings ``extensions``) that shape what the API
reference shows.

``ExportsOnly``: a module that defines ``__all__`` shows only the names it exports (helpers
such as ``zrecord.errors.from_status``, which serve the binding, stay out of the reference),
the rule docs/tools/check_reference.py uses to decide what must be in it.

``SphinxRoles``: Sphinx roles in docstrings become Markdown.

The packages' docstrings are plain text with a few Sphinx roles (``:class:`Dense```,
``:meth:`~zrecord.Dense.create```), which Markdown would show literally. Each role becomes a
code span that links to the named object when the name resolves from the docstring's module
(``Dense.create`` in zrecord._reader is zrecord._reader.Dense.create), and a plain code span
otherwise. A leading ``~`` shows only the last component, as in Sphinx.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|mod|data|obj|const):`(~?)([\w.]+)`")


def _resolve(obj: griffe.Object, name: str) -> str | None:
    """The canonical path of `name` seen from `obj`'s module, or None."""
    module = obj.module
    head, _, rest = name.partition(".")
    start: Any = None
    if head in module.members:
        start = module.members[head]
    else:
        try:
            start = module.modules_collection[head]
        except KeyError:
            return None
    try:
        target = start.final_target if start.is_alias else start
        for part in filter(None, rest.split(".")):
            target = target.all_members[part] if target.is_class else target.members[part]
            target = target.final_target if target.is_alias else target
    except (KeyError, griffe.AliasResolutionError):
        return None
    return str(target.path)


def convert(obj: griffe.Object, text: str) -> str:
    def repl(match: re.Match[str]) -> str:
        short, name = match.group(1), match.group(2)
        shown = name.rsplit(".", 1)[-1] if short else name
        path = _resolve(obj, name)
        return f"[`{shown}`][{path}]" if path else f"`{shown}`"

    return _ROLE.sub(repl, text)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        seen: set[int] = set()

        def visit(obj: griffe.Object) -> None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if obj.docstring is not None and ":`" in obj.docstring.value:
                obj.docstring.value = convert(obj, obj.docstring.value)
            for member in obj.members.values():
                if not member.is_alias:
                    visit(member)

        visit(pkg)


class ExportsOnly(griffe.Extension):
    """Drop the members a public module with ``__all__`` does not export (submodules
    stay)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        def visit(module: griffe.Module) -> None:
            # Private modules keep their imports: public classes inherit from what they import.
            if module.exports is not None and not module.name.startswith("_"):
                exported = {str(name) for name in module.exports}
                for name, member in list(module.members.items()):
                    is_submodule = not member.is_alias and member.is_module
                    if not is_submodule and name not in exported and not name.startswith("__"):
                        del module.members[name]
            for sub in module.modules.values():
                visit(sub)

        visit(pkg)
