"""Hatchling build hook: hands hatchling the repository's one native build, build_support.py.

In the repository it lives in packages/; an sdist carries a copy beside this file
(force-included by pyproject.toml), so the sdist builds without the monorepo around it. What
this package builds is declared in pyproject.toml's [tool.hatch.build.hooks.custom] table.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def get_build_hook() -> type:
    here = Path(__file__).resolve().parent
    for path in (here / "build_support.py", here.parent / "build_support.py"):
        if path.is_file():
            spec = importlib.util.spec_from_file_location("build_support", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            hook: type = module.get_build_hook()
            return hook
    raise RuntimeError(f"build_support.py is neither in {here} nor in {here.parent}")
