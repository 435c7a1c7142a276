"""Store paths: what a caller may pass as a path, and where published stores lie.

Invariants of this module:
- A path handed to the native core is a byte string without NUL: the C ABI takes
  NUL-terminated strings, so an embedded NUL would silently cut the path short (and open or
  create another store than the one named). It is refused with ``ValueError``, as ``os``
  refuses it.
- A published store is immutable, and that includes its directory: nothing may be created
  inside one. ``enclosing_store`` finds the store a path would fall inside, so that writers
  (and the converter, through the public API) refuse such paths before writing anything.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zrecord._types import PathLike

# The file whose presence makes a directory a published store (spec §2, [ZR-PUB-003]).
HEADER_NAME = "header.zrh"


def fspath(path: Any) -> str:
    """`path` as a str; ``TypeError`` for non-paths, ``ValueError`` for an embedded NUL."""
    try:
        text: str | bytes = os.fspath(path)
    except TypeError as exc:
        raise TypeError(f"path must be a str or os.PathLike; got {type(path).__name__}") from exc
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\0" in text:
        raise ValueError(f"path contains an embedded null byte: {text!r} (a path ends at the "
                         "first NUL for the operating system, so it would name another file)")
    return text


def native_path(path: Any) -> bytes:
    """`path` encoded for the native core (see :func:`fspath`)."""
    return os.fsencode(fspath(path))


def _is_store_dir(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(os.path.join(path, HEADER_NAME), follow_symlinks=False).st_mode)
    except (OSError, ValueError):
        return False


def enclosing_store(path: PathLike) -> str | None:
    """The published store that `path` is, or lies inside, else None.

    Walks from `path` (which need not exist) up to the filesystem root, returning the first
    directory that holds a regular ``header.zrh``. Symbolic links in `path` are resolved first,
    so a link into a store counts as inside it.
    """
    here = os.path.realpath(fspath(path))
    while True:
        if _is_store_dir(here):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
