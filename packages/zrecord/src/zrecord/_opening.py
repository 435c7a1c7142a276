"""Opening a store by path or by URL: the native reader of a local store, or of a remote store's
mirror (``_remote``), with the open flags that ``cache=`` and ``validate=`` select.

Invariants of this module:
- A local path opens the store in place; a URL (``_objects.is_url``) opens its mirror, whose
  native reader checks every read and names the store by its URL in every message (the core's
  ``zr_open_opts.name``): no message is rewritten after the fact.
- A failed open leaves nothing open: the mirror made for it is closed (a private one removed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from zrecord import _native
from zrecord._dtypes import OPEN_CACHE_BYPASS, OPEN_CHECK_EVERY_READ, OPEN_VALIDATE_INDEX, OPEN_WHOLE_INDEX
from zrecord._index_cache import folder_for, policy
from zrecord._objects import is_url, storage_settings
from zrecord._paths import native_path, store_location
from zrecord._remote import Mirror
from zrecord.errors import NotPublishedError, StoreNotFoundError

# What `cache=` and `validate=` take at open, and the native open flags of each (zrecord.h
# ZR_OPEN_*).
CACHE_MODES = {"auto": 0, "bypass": OPEN_CACHE_BYPASS}
VALIDATE_MODES = {"cached": 0, "full": OPEN_VALIDATE_INDEX}


def open_native(path: Any, cache: Any, index_cache: Any, validate: Any,
              storage_options: Mapping[str, Any] | None) -> tuple[Mirror | None, _native.Reader]:
    """The native reader of the store at `path`: a local path, or a URL through its mirror."""
    where = store_location(path, storage_options)
    if is_url(where):
        return _open_remote(where, cache, index_cache, validate, storage_options)
    local = where
    try:
        return None, open_handle(local, cache, folder_for(index_cache), validate)
    except StoreNotFoundError as exc:
        # A store not published yet: say what its unfinished write tells, as the CLI does.
        from zrecord._tree import WRITER_SAYS, unfinished_writes  # _tree imports this module

        writes = unfinished_writes(local)
        if writes:
            exc.args = (f"{exc}: {WRITER_SAYS[writes[0][1]]}",)
        raise
    except NotPublishedError as exc:
        # A folder without header.zrh: say what it is when that can be seen at a glance.
        what = _what_lies_at(local)
        if what:
            exc.args = (f"{exc}; {what}",)
        raise


# A folder that is not a store is looked through this deep, and at most this many entries a
# folder, for stores below it (what an error names).
_BELOW_DEPTH = 3
_BELOW_ENTRIES = 256


def _what_lies_at(folder: str) -> str | None:
    """What a folder without header.zrh holds, as an error says it: a dataset's manifests, a
    store of the loaderx 2.x of PyPI (``meta.zr``), or stores below it (the first few);
    None when none of these."""
    from zrecord._manifest import NAME_PATTERN

    try:
        with os.scandir(folder) as entries:
            names = [e.name for _, e in zip(range(_BELOW_ENTRIES), entries)]
    except OSError:
        return None
    if any(NAME_PATTERN.fullmatch(n) for n in names):
        return "it is a dataset of parts (it holds dataset-*.zrm manifests): open it with zrecord.open_dataset"
    if "meta.zr" in names:
        return ("it holds meta.zr: a store of the loaderx 2.x of PyPI, which zrecord does not read; "
                "move it with docs/examples/migrate_2x_stores.py (the guide's 'Coming from')")
    below = _stores_below(folder, "", _BELOW_DEPTH)
    if below:
        return ("it is a folder of stores: open one of them, such as "
                + ", ".join(repr(os.path.join(folder, b)) for b in below[:3]))
    return None


def _stores_below(folder: str, rel: str, depth: int) -> list[str]:
    """Up to 3 stores below `folder`/`rel` (their paths relative to `folder`), in name order."""
    try:
        with os.scandir(os.path.join(folder, rel)) as entries:
            subs = sorted(e.name for _, e in zip(range(_BELOW_ENTRIES), entries)
                          if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))
    except OSError:
        return []
    found: list[str] = []
    for name in subs:
        path = os.path.join(rel, name)
        if os.path.isfile(os.path.join(folder, path, "header.zrh")):
            found.append(path)
        elif depth > 1:
            found += _stores_below(folder, path, depth - 1)
        if len(found) >= 3:
            break
    return found[:3]


def _open_remote(url: str, cache: Any, index_cache: Any, validate: Any,
                 storage_options: Mapping[str, Any] | None) -> tuple[Mirror, _native.Reader]:
    """The mirror of the store at `url` and the native reader of it. A private mirror (no
    ``cache_dir``) keeps its compact index in memory: no index cache file outlives it. A
    mirror that fetches the index by part (a store with index parts: decision 0008) is judged
    by part, as gathers fetch its parts; one that fetched the whole index is judged whole at
    open (or maps a shared mirror's cache file)."""
    mirror = Mirror(url, storage_settings(storage_options), whole_index=validate == "full")
    folder = folder_for(index_cache) if mirror.options.cache_dir is not None else None
    try:
        handle = open_handle(mirror.store_path, cache, folder, validate,
                             OPEN_CHECK_EVERY_READ | (0 if mirror.by_part else OPEN_WHOLE_INDEX),
                             name=mirror.url)
        mirror.attach(handle)
        return mirror, handle
    except BaseException:
        mirror.close()
        raise


def _mode_flags(name: str, value: Any, modes: dict[str, int]) -> int:
    if not isinstance(value, str) or value not in modes:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, modes))}; got {value!r}")
    return modes[value]


def open_handle(path: str, cache: Any, folder: str | None, validate: Any, flags: int = 0,
                index_policy: tuple[int, int] | None = None, *, name: str | None = None) -> _native.Reader:
    """The native reader of the store at `path`, opened with the index cache `folder` and
    `flags` besides those of `cache` and `validate`; the core writes and bounds the folder by
    `index_policy` (_index_cache.policy, read from the environment when not given; not read
    at all without a folder)."""
    flags |= _mode_flags("cache", cache, CACHE_MODES) | _mode_flags("validate", validate, VALIDATE_MODES)
    if folder is None:
        index_policy = (0, 0)
    records_min, budget = index_policy or policy()
    return _native.Reader(native_path(path), flags, None if folder is None else native_path(folder),
                          records_min, budget, None if name is None else name.encode())
