"""The index cache folder: where readers keep the compact indexes they build, so that the next
open of the same store on this host maps one instead of validating index.zri again.

Invariants of this module:
- The folder is chosen in one place (`folder_for`): an explicit path, else the environment
  (``ZRECORD_INDEX_CACHE``: a path, or ``off``), else ``$XDG_CACHE_HOME/zrecord/index`` (or
  ``~/.cache/zrecord/index``). The native core creates it, writes files there under temporary
  names and renames them into place complete; it never fails an open because of the folder.
- The folder is bounded (`prune`): after a reader writes a file, the oldest files beyond
  ``ZRECORD_INDEX_CACHE_BYTES`` (default 16 GiB) are removed, never the newest. A reader that
  mapped a removed file keeps its mapping; the next open builds the index again.
"""

from __future__ import annotations

import os
import time
from typing import Any

from zrecord._paths import fspath

# What `index_cache=` takes besides a path: "auto" (the environment's folder, or the user's
# cache folder) and None (keep compact indexes in memory only).
AUTO = "auto"
OFF_WORDS = ("", "off", "none", "0")
DEFAULT_BUDGET_BYTES = 16 << 30
# Temporary files of a writer that died are removed once they are this old.
STALE_TEMP_SECONDS = 24 * 3600


def folder_for(index_cache: Any) -> str | None:
    """The folder that `index_cache` (as given to ``open``) names, or None for none."""
    if index_cache is None:
        return None
    if isinstance(index_cache, str) and index_cache == AUTO:
        env = os.environ.get("ZRECORD_INDEX_CACHE")
        if env is not None:
            return None if env.strip().lower() in OFF_WORDS else os.path.abspath(env)
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "zrecord", "index")
    try:
        return os.path.abspath(fspath(index_cache))
    except TypeError:
        raise TypeError(f"index_cache must be a folder path, 'auto' or None; got {index_cache!r}") from None


def budget_bytes() -> int:
    """The folder's size bound: ``ZRECORD_INDEX_CACHE_BYTES`` (bytes), else 16 GiB."""
    text = os.environ.get("ZRECORD_INDEX_CACHE_BYTES")
    if not text:
        return DEFAULT_BUDGET_BYTES
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"ZRECORD_INDEX_CACHE_BYTES must be a number of bytes; got {text!r}") from None
    if value < 0:
        raise ValueError(f"ZRECORD_INDEX_CACHE_BYTES must not be negative; got {value}")
    return value


def prune(folder: str, budget: int) -> list[str]:
    """Removes the oldest compact index files of `folder` until the rest fit in `budget` bytes
    (the newest file always stays), and temporary files older than a day; returns the names
    removed. Files that vanish meanwhile (another process pruning) are skipped."""
    files: list[tuple[float, int, str]] = []
    removed: list[str] = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if ".zrx.tmp-" in entry.name:
            if now - st.st_mtime > STALE_TEMP_SECONDS and _unlink(entry.path):
                removed.append(entry.name)
        elif entry.name.endswith(".zrx") and entry.is_file(follow_symlinks=False):
            files.append((st.st_mtime, st.st_size, entry.name))
    files.sort()
    total = sum(size for _, size, _ in files)
    for _, size, name in files[:-1]:
        if total <= budget:
            break
        if _unlink(os.path.join(folder, name)):
            removed.append(name)
            total -= size
    return removed


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
