"""Opening a store by path or by URL: the native reader of a local store, or of a remote store's
mirror (``_remote``), with the open flags that ``cache=`` and ``validate=`` select.

Invariants of this module:
- A local path opens the store in place; a URL (``_objects.is_url``) opens its mirror, whose
  native reader checks every read and names the store by its URL in every message (the core's
  ``zr_open_opts.name``): no message is rewritten after the fact.
- A failed open leaves nothing open: the mirror made for it is closed (a private one removed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zrecord import _native
from zrecord._dtypes import OPEN_CACHE_BYPASS, OPEN_CHECK_EVERY_READ, OPEN_VALIDATE_INDEX, OPEN_WHOLE_INDEX
from zrecord._index_cache import folder_for, policy
from zrecord._objects import is_url, storage_settings
from zrecord._paths import native_path, store_location
from zrecord._remote import Mirror
from zrecord.errors import StoreNotFoundError

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
