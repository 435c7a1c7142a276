"""Publishing a directory tree at once: the protocol writers use, offered to other tools.

Invariants of this module:
- There is one implementation of publication, the native core's (zig/src/staging.zig): the
  locked temporary sibling, its stale-temporary rule ([ZR-PUB-006]), the flush of everything
  below it and the one atomic rename that never replaces anything. Writers use it for a store;
  ``staged_directory`` hands the same temporary directory to a tool that builds a tree of
  stores and files (the converter's dataset roots).
- Nothing appears at the path unless the ``with`` block ends without an exception; otherwise
  the temporary directory is removed with everything below it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from zrecord import _native
from zrecord._dtypes import WRITE_NO_SYNC
from zrecord._paths import fspath, native_path
from zrecord._types import PathLike
from zrecord.console import restate


@contextmanager
def staged_directory(path: PathLike, *, sync: bool = True) -> Iterator[str]:
    """Build a directory tree, then publish it at `path` in one atomic rename.

    Yields the temporary directory (a hidden sibling of `path`) to build in: stores created
    inside it with ``Dense.create``/``Ragged.create``, and files of your own. When the block
    ends without an exception, everything below the directory is flushed to stable storage
    (unless ``sync=False``) and the directory is renamed to `path`; ``StoreExistsError`` if
    something appeared there meanwhile. On an exception the temporary directory is removed and
    nothing appears at `path`. The checks of ``create`` apply to `path`: it must not exist and
    must not lie inside a published store; missing parent directories are made.
    """
    stage = _native.Staging(native_path(fspath(path)))
    directory = stage.directory()
    assert directory is not None
    try:
        yield os.fsdecode(directory)
    except BaseException:
        stage.abort()
        raise
    try:
        stage.publish(0 if sync else WRITE_NO_SYNC)
    except BaseException as exc:
        # An interrupt raised once the native publish had returned (the signal's
        # KeyboardInterrupt waits for it): the tree was renamed into place, complete.
        renamed = not isinstance(exc, Exception) and not os.path.lexists(directory) \
            and os.path.isdir(path)
        stage.abort()
        if renamed:
            restate(exc, f"{fspath(path)} was published before the interrupt: it is complete")
        raise
