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
- ``root`` is judged by zrecord's one rule for store locations (``zrecord.store_location``): a
  URL of a scheme zrecord does not read is refused, never taken for a local folder. An
  ``s3://`` root is converted into a private staging folder (``Destination``) and published
  from there with ``zrecord.publish_folder``; every store's prefix is checked before anything
  is written.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import zrecord
from loaderx_converter.errors import (
    ArgumentTypeError,
    ConversionError,
    DestinationExistsError,
    UnsafePathError,
)
from zrecord.console import restate

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


class Destination:
    """Where a conversion writes: `root`, the local folder the stores go under; for an
    ``s3://`` destination also `url`, and `staging`, the private folder holding `root` until
    it is published there."""

    def __init__(self, root: Any, storage_options: zrecord.StorageOptions | None) -> None:
        if not isinstance(root, (str, os.PathLike)):
            raise ArgumentTypeError(f"convert: root must be a path or an s3:// URL (str or "
                                    f"os.PathLike); got {type(root).__name__}")
        self.storage_options = storage_options
        try:
            where = zrecord.store_location(root, storage_options, role="convert: the destination")
            if zrecord.is_url(where):
                # An http(s):// URL, which cannot be written, too; and a prefix where a
                # conversion was published already (its provenance.json), which the upload at
                # the end would refuse after the whole conversion.
                self._check(where, "", files=(PROVENANCE_FILE,))
        except ValueError as exc:
            # A scheme zrecord does not read, an http(s):// URL, storage_options with a local
            # path, storage options the client refuses: the destination cannot be written.
            raise UnsafePathError(str(exc), reason="is not a place the converter can write") \
                from None
        self.url: str | None = None
        self.staging: Path | None = None
        if zrecord.is_url(where):
            self.url = where.rstrip("/")
            given = (storage_options or {}).get("cache_dir")
            cache_dir = None if given is None else os.fsdecode(given)
            if cache_dir is not None:
                os.makedirs(cache_dir, exist_ok=True)
            self.staging = Path(tempfile.mkdtemp(prefix="loaderx-convert-", dir=cache_dir))
            self.root = self.staging / "root"
            return
        self.root = Path(os.fspath(where)).absolute()
        if os.path.lexists(self.root):
            raise DestinationExistsError(errno.EEXIST, "convert: the destination must not exist",
                                         str(self.root))
        check_root(self.root)

    def _check(self, url: str, rel: str, files: tuple[str, ...] = ()) -> None:
        """Raise unless a store may be published at `url`/`rel` (the folder of the stores
        when `rel` is empty), and `files` beside it (zrecord.check_destination)."""
        where = f"{url}/{rel}" if rel else url
        try:
            zrecord.check_destination(where, storage_options=self.storage_options, files=files,
                                      folder=not rel)
        except zrecord.StoreExistsError as exc:
            raise DestinationExistsError(errno.EEXIST, f"convert: the destination must not hold "
                                         f"stores already: {exc}", where) from None

    def check_stores(self, chosen: dict[str, list[str]]) -> None:
        """For a URL: raise now, before any write, where a store's prefix holds a store, or
        a split or column name cannot be part of the URL (a '#', a '?', a newline)."""
        if self.url is not None:
            for split, columns in chosen.items():
                for column in columns:
                    try:
                        self._check(self.url, f"{split}/{column}")
                    except ValueError as exc:
                        if isinstance(exc, ConversionError):
                            raise
                        reason = f"cannot be part of the destination's URL ({exc})"
                        raise UnsafePathError(
                            f"convert: split {split!r} column {column!r}: the names {reason}; "
                            f"{_way_out(split, column)}", split=split, column=column,
                            reason=reason) from None

    def discard(self) -> None:
        """The conversion failed: remove the staging folder (a local root is never made)."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)

    def publish(self, progress: bool) -> None:
        """For a URL: publish the converted root there, then remove the staging folder. A
        failed publish keeps it, and its error says where and how to go on."""
        if self.url is None or self.staging is None:
            return
        try:
            zrecord.publish_folder(self.root, self.url, progress=progress,
                                   storage_options=self.storage_options)
        except BaseException as exc:  # an interrupt too: some stores may be published by then
            restate(exc, f"convert: the converted dataset is kept at {str(self.root)!r}: "
                         f"publish it from there once the cause is fixed (`zrecord publish "
                         f"{self.root} {self.url}`: stores already published are skipped), or "
                         f"delete {str(self.staging)!r}")
            raise
        self.discard()
