"""The paths a conversion writes: which names may become folders under ``root``, and where
``root`` itself may lie.

Invariants:
- Every split and column name becomes exactly one path component (``root/split/column``).
  A name that a path join would read as more than one component, or as none (``/abs``,
  ``a/b``, ``..``, ``.``, the empty name), would put a store outside ``root`` and outside the
  atomic publish, so it is refused before anything is written, as are names the file system
  cannot hold.
- Names starting with ``.`` are refused too: the writers' temporary folders are dot-named
  siblings (``.NAME.zr-tmp-RAND`` and its ``.lock``, for stores and dataset roots alike), and
  a column named
  like one could be taken for a dead writer's leftovers and removed.
- ``root`` never lies inside a published zrecord store: a published store is immutable,
  its directory included.
"""

from __future__ import annotations

import os
from pathlib import Path

import zrecord
from loaderx_converter.errors import UnsafePathError

# Writers add this much to a name for their temporary siblings: zrecord's lock file
# ".NAME.zr-tmp-16HEX.lock" adds 30 bytes (for stores and dataset roots alike); 40 leaves a
# margin.
NAME_ROOM_BYTES = 40
# The longest name inside a store folder ("data-000.zrd"), with a margin.
STORE_FILE_ROOM_BYTES = 16
# Used when the file system does not say (POSIX NAME_MAX and Linux PATH_MAX).
NAME_BYTES_MAX_DEFAULT = 255
PATH_BYTES_MAX_DEFAULT = 4096
# Written beside the split folders; a split of this name would collide with it.
PROVENANCE_FILE = "provenance.json"


def _pathconf(folder: Path, name: str, default: int) -> int:
    try:
        value = os.pathconf(folder, name)
    except (OSError, ValueError, AttributeError):
        return default
    return value if value > 0 else default


def name_problem(name: object, name_bytes_max: int) -> str | None:
    """Why `name` cannot be one folder name written by the converter, or None if it can."""
    if not isinstance(name, str):
        return f"is of type {type(name).__name__}, not a string"
    if name == "":
        return "is empty"
    if "\0" in name:
        return "holds a NUL byte, where the operating system ends a path"
    separators = [s for s in (os.sep, os.altsep) if s and s in name]
    if separators:
        return (f"holds {separators[0]!r}, a path separator: it would name a folder elsewhere "
                "than under root")
    if name in (".", ".."):
        return f"is {name!r}, which names a folder that already exists (this one or its parent)"
    if name.startswith("."):
        return ("starts with '.': such names are reserved for the writers' temporary folders "
                "(and hidden from listings)")
    try:
        encoded = os.fsencode(name)
    except UnicodeEncodeError as exc:
        return f"cannot be encoded as a file name ({exc.reason})"
    limit = name_bytes_max - NAME_ROOM_BYTES
    if len(encoded) > limit:
        return (f"is {len(encoded)} bytes long as a file name; the file system holds names of "
                f"at most {name_bytes_max} bytes and the writers add up to {NAME_ROOM_BYTES} "
                f"for their temporary folders, so at most {limit}")
    return None


def _way_out(split: str, column: str | None) -> str:
    if column is None:
        return (f"rename the split first, e.g. DatasetDict({{'train': dataset[{split!r}]}}) "
                "(a split name becomes the folder root/split)")
    return (f"convert the other columns with columns=[...], or rename it first: "
            f"dataset = dataset.rename_column({column!r}, 'new_name') (a column name becomes "
            "the folder root/split/column)")


def check_names(root: Path, chosen: dict[str, list[str]]) -> None:
    """Raise :class:`UnsafePathError` for the first split or column name of `chosen` (split ->
    columns) that cannot be one folder under `root`; nothing has been written yet."""
    name_max = _pathconf(root.parent, "PC_NAME_MAX", NAME_BYTES_MAX_DEFAULT)
    path_max = _pathconf(root.parent, "PC_PATH_MAX", PATH_BYTES_MAX_DEFAULT)
    # Everything is written under a temporary sibling of root whose name is longer than
    # root's by at most NAME_ROOM_BYTES; the deepest path is a file inside a column store's own
    # temporary folder.
    base = len(os.fsencode(str(root))) + NAME_ROOM_BYTES
    for split, columns in chosen.items():
        reason = name_problem(split, name_max)
        if reason is None and split == PROVENANCE_FILE:
            reason = f"is {PROVENANCE_FILE!r}, the file written beside the split folders"
        if reason is not None:
            raise UnsafePathError(f"convert: the split name {split!r} {reason}; "
                                  f"{_way_out(split, None)}", split=split, reason=reason)
        for column in columns:
            reason = name_problem(column, name_max)
            if reason is None:
                deepest = (base + 1 + len(os.fsencode(split)) + 1 + len(os.fsencode(column))
                           + NAME_ROOM_BYTES + 1 + STORE_FILE_ROOM_BYTES)
                if deepest >= path_max:
                    reason = (f"makes paths of about {deepest} bytes under {str(root)!r}, and "
                              f"the file system takes paths of at most {path_max - 1}; choose "
                              "a destination with a shorter path or shorter names")
            if reason is not None:
                raise UnsafePathError(f"convert: split {split!r} column {column!r}: the column "
                                      f"name {reason}; {_way_out(split, column)}",
                                      split=split, column=column, reason=reason)


def check_root(root: Path) -> None:
    """Raise :class:`UnsafePathError` if `root` (absolute, not existing) lies inside a
    published zrecord store or its name leaves no room for the temporary sibling."""
    store = zrecord.enclosing_store(root)
    if store is not None:
        raise UnsafePathError(
            f"convert: the destination {str(root)!r} lies inside the published zrecord store "
            f"{store!r}; a published store is immutable (nothing may be created inside it), so "
            "choose a destination outside it", reason="lies inside a published zrecord store")
    name_max = _pathconf(root.parent, "PC_NAME_MAX", NAME_BYTES_MAX_DEFAULT)
    size = len(os.fsencode(root.name))
    if size + NAME_ROOM_BYTES > name_max:
        reason = (f"has a last component of {size} bytes; the conversion writes into a "
                  f"temporary sibling whose name is up to {NAME_ROOM_BYTES} bytes longer, and "
                  f"the file system holds names of at most {name_max} bytes")
        raise UnsafePathError(f"convert: the destination {str(root)!r} {reason}; choose a "
                              "shorter name", reason=reason)
