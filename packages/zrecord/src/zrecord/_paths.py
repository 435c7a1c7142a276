"""Store paths: what a caller may pass as a path, and where published stores lie.

Invariants of this module:
- A path handed to the native core is a byte string without NUL: the C ABI takes
  NUL-terminated strings, so an embedded NUL would silently cut the path short (and open or
  create another store than the one named). It is refused with ``ValueError``, as ``os``
  refuses it.
- A published store is immutable, and that includes its directory: nothing may be created
  inside one. ``enclosing_store`` finds the store a path would fall inside, so that writers
  (and the converter, through the public API) refuse such paths before writing anything.
- Every place that takes a store's location (open, create, publish, the command lines, the
  converter) judges it by :func:`store_location` alone: a URL of a scheme zrecord reads
  (``_objects.SCHEMES``) is a URL, a string of any other ``scheme://`` form is refused (never
  taken for a local folder named ``gs:``), and everything else is a local path, with which
  ``storage_options`` (settings of object storage) are refused rather than ignored.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zrecord._objects import SCHEMES, redact

if TYPE_CHECKING:
    from zrecord._types import PathLike

# The file whose presence makes a directory a published store (spec §2, [ZR-PUB-003]).
HEADER_NAME = "header.zrh"
# A URL's scheme and its "://" (RFC 3986: a letter, then letters, digits, "+", "-" or "."). Two
# characters at least, so that a drive letter ("C://data") is never taken for one.
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")
# A URL whose "//" a pathlib.Path (or a typo) made one "/": `s3:/bucket/x` would otherwise be
# a local folder named `s3:`. Two letters at least, so that `C:/` stays a Windows drive.
_MANGLED = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")


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


def store_location(path: Any, storage_options: Mapping[str, Any] | None = None, *,
                   role: str = "the store") -> str:
    """Where `path` says a store lies: a URL of a scheme zrecord reads (``s3://``, ``http://``,
    ``https://``), returned as given, or a local path (as ``os.fspath`` gives it, decoded as the OS does).

    ``ValueError`` naming `path` (a URL without its secret parts) for a string of any
    other ``scheme://`` form (``gs://``, ``az://``, ``S3://``: one would otherwise become a
    local folder named ``gs:``), for a URL given as bytes, and for non-empty
    `storage_options` with a local path (they configure object storage, so they would be
    ignored there, silently). `role` names the argument in messages (``"the source"``).
    """
    if isinstance(path, bytes) and os.fsdecode(path).startswith(SCHEMES):
        raise ValueError(f"{role}: the URL {redact(os.fsdecode(path))!r} was given as bytes; give "
                         "a URL as a str")
    text = path if isinstance(path, str) else None
    found = _SCHEME.match(text) if text is not None else None
    if text is not None and found is not None:
        if text.startswith(SCHEMES):
            return text
        scheme = found.group(0)
        shown = scheme + redact(text)[len(scheme):]  # redact writes the scheme in lower case
        hint = (f" (schemes are written in lower case: {scheme.lower()})"
                if text.lower().startswith(SCHEMES) else " (copy the store there first)")
        raise ValueError(f"{role}: {shown!r} is a URL of a scheme zrecord does not read "
                         f"({scheme}); a store lies at a local path or at an "
                         f"{', '.join(SCHEMES)} URL{hint}")
    local = fspath(path)
    mangled = _MANGLED.match(local)
    if mangled is not None:
        scheme = mangled.group(1)
        url = f"{scheme}://{local[len(scheme) + 2:]}"
        shown = redact(url) if url.startswith(SCHEMES) else url
        raise ValueError(f"{role}: the path given ({scheme}:/...) is the URL {shown!r} with "
                         "its '//' made '/' (a pathlib.Path writes 's3://b/x' as 's3:/b/x'), not "
                         f"a local path, and no local folder named '{scheme}:' is made: give "
                         "the URL as a str")
    if storage_options:
        raise ValueError(f"{role}: storage_options were given with the local path {local!r}; "
                         "they configure object storage (s3://, http(s):// URLs) and "
                         "mean nothing for a local path: leave them out, or give a URL")
    return local


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
