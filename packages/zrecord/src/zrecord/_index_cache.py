"""The index cache folder: where readers keep the compact indexes they build, so that the next
open of the same store on this host, by the same user, maps one instead of validating
index.zri again (spec §9.5).

Invariants of this module:
- The folder is chosen in one place (`folder_for`): an explicit path, else the environment
  (``ZRECORD_INDEX_CACHE``: a path, or ``off``), else ``$XDG_CACHE_HOME/zrecord/index`` (or
  ``~/.cache/zrecord/index``).
- Everything else about the folder belongs to the native core (index_cache.zig): which files
  it trusts (only this user's), which indexes it writes (``ZRECORD_INDEX_CACHE_RECORDS_MIN``
  records or more, default 65,536), and how it bounds the folder (``ZRECORD_INDEX_CACHE_BYTES``,
  default 16 GiB: files of stores that are gone are removed, then the least recently used).
  This module only reads those settings from the environment (`policy`) and hands them over.
"""

from __future__ import annotations

import os
from typing import Any

from zrecord import _native
from zrecord._paths import fspath, native_path

# What `index_cache=` takes besides a path: "auto" (the environment's folder, or the user's
# cache folder) and None (keep compact indexes in memory only).
AUTO = "auto"
OFF_WORDS = ("", "off", "none", "0")


def folder_for(index_cache: Any) -> str | None:
    """The folder that `index_cache` (as given to ``open``) names, or None for none (None, or
    an empty string, as for the environment variable)."""
    if index_cache is None:
        return None
    if isinstance(index_cache, str) and index_cache == AUTO:
        env = os.environ.get("ZRECORD_INDEX_CACHE")
        if env is not None:
            return None if env.strip().lower() in OFF_WORDS else os.path.abspath(env)
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "zrecord", "index")
    try:
        path = fspath(index_cache)
        if isinstance(path, str) and path.strip() == "":
            # Off, as ZRECORD_INDEX_CACHE="" is (os.environ.get("X", "") passed through):
            # taken as a path, it wrote the cache into the working folder.
            return None
        return os.path.abspath(path)
    except TypeError:
        raise TypeError(f"index_cache must be a folder path, 'auto' or None; got {index_cache!r}") from None


def _env_count(name: str) -> int | None:
    text = os.environ.get(name)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number; got {text!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be at least 0; got {value}")
    return value


def policy() -> tuple[int, int]:
    """(records_min, budget_bytes) for the native open, from ``ZRECORD_INDEX_CACHE_RECORDS_MIN``
    and ``ZRECORD_INDEX_CACHE_BYTES``; 0 leaves the core's default. A budget of 0 bytes keeps
    only the newest file, as a budget of 1 does."""
    records = _env_count("ZRECORD_INDEX_CACHE_RECORDS_MIN")
    budget = _env_count("ZRECORD_INDEX_CACHE_BYTES")
    return (0 if records is None else max(records, 1)), (0 if budget is None else max(budget, 1))


def records_min(records: int) -> int:
    """The fewest records an index must have to be written to the folder, for the
    `records_min` of a `policy()` (0: the core's default)."""
    return records or int(_native.CONSTANTS["ZR_INDEX_CACHE_RECORDS_MIN_DEFAULT"])


def prune(folder: str, budget: int) -> dict[str, int]:
    """Prune `folder` now to `budget` bytes of this user's files (what an open does when
    pruning is due): the files of stores that are gone or changed, of older versions and stale
    temporaries first, then the least recently used; the newest stays. What was kept and
    removed, by count and bytes."""
    return _native.prune_index_cache(native_path(folder), max(int(budget), 1))
