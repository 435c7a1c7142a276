"""The store under test, and how one is written, made durable and opened.

The store under test is ours (`zrecord`) when it is importable, else the published loaderx
(2.5.9, say) through `loaderx.zrecord`: a script then runs as a black-box peer in that
package's own virtualenv (`--peer PYTHON`, common.peers), in a subprocess, in the same run.
`STORE_LABEL` names its rows. Each write is measured twice (`timed_writes`): into the page
cache (ours with `sync=False`; the peer as it is, since it never syncs) and durable, the
figure that counts ([P1]): ours as append + close (which flushes to stable storage), the peer
as append + close followed by flushing every file and folder it wrote (`sync_tree`;
`--peer-durable sync` uses `os.sync()` instead, which on a shared machine also waits for every
other process's dirty pages and so understates the peer). Writes take the complete source in
one append and exclude dictionary training (`create_kwargs`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from common.data import Workload, verify
from common.timing import sync_tree, timed_write

try:  # our packages
    import zrecord
    from zrecord import Dense, Ragged, train_dict

    # `--builds` runs other builds of zrecord (say, the one before a change) through the same
    # script with this variable set, so that their rows and stores are told apart.
    STORE_LABEL = os.environ.get("ZR_BENCH_LABEL", "zrecord")
    OURS = True
    # Keyword arguments of create() for a page-cache write and for a durable one.
    WRITE_KWARGS: dict[str, dict[str, object]] = {"page_cache": {"sync": False}, "durable": {}}
except ImportError:  # the published loaderx, run as a black-box peer in its own venv
    import importlib.metadata

    from loaderx.utils import train_dict  # type: ignore[no-redef]
    from loaderx.zrecord import Dense, Ragged  # type: ignore[no-redef]

    STORE_LABEL = "loaderx-" + importlib.metadata.version("loaderx")
    OURS = False
    zrecord = None  # not in the peer's virtualenv; every use is behind OURS
    WRITE_KWARGS = {"page_cache": {}, "durable": {}}  # durable: flushed after close


__all__ = ["OURS", "Dense", "Ragged", "train_dict", "zrecord"]


def create_kwargs(codec: str, sample: Any) -> dict[str, object]:
    """Keyword arguments for create(); dictionaries are trained here, outside the timing."""
    extra: dict[str, object] = {}
    if codec == "zstd_dict":
        extra["dict_bytes"] = train_dict(sample)
    return extra


def peer_flush(args: argparse.Namespace | None) -> Callable[[str], None] | None:
    """How a durable write of this library's store ends: nothing for ours, other builds of
    zrecord (`--builds`, labelled zrecord@NAME) included (close() flushes); `sync_tree` or
    os.sync() for the published loaderx (--peer-durable)."""
    if OURS:
        return None
    if args is not None and getattr(args, "peer_durable", "fsync") == "sync":
        return lambda _path: os.sync()
    return sync_tree


def timed_writes(path: str, write: Callable[[str, dict[str, object]], None],
                 nbytes: int, args: argparse.Namespace | None = None,
                 prefix: str = "") -> dict[str, float]:
    """Write the store at `path` twice, into the page cache and durably; MiB/s of each.

    `write(path, kwargs)` creates the store with `kwargs` added to create() and appends the
    whole source. The durable store is left at `path`. The keys are `write_mib_s` (page
    cache) and `durable_mib_s`, each after `prefix`.
    """
    return {
        prefix + "write_mib_s": timed_write(path, lambda p: write(p, WRITE_KWARGS["page_cache"]),
                                            nbytes),
        prefix + "durable_mib_s": timed_write(path, lambda p: write(p, WRITE_KWARGS["durable"]),
                                              nbytes, peer_flush(args)),
    }


def store_path(root: str, label: str, workload: str, codec: str) -> str:
    return os.path.join(root, f"{label}-{workload}-{codec}")


def ensure_store(w: Workload, codec: str, root: str, batch: int, data_shards: int | None = None) -> str:
    """This library's store of `w` with `codec` under `root`, written durably and checked the
    first time it is asked for (later rounds reuse it); `data_shards` None: the writer's
    default."""
    path = store_path(root, STORE_LABEL, w.name, codec)
    if os.path.exists(path):
        return path
    sample = w.dense if w.dense is not None else w.ragged.dict_sample()  # type: ignore[union-attr]
    extra = create_kwargs(codec, sample)
    if data_shards is not None:
        extra["data_shards"] = data_shards
    if w.dense is not None:
        with Dense.create(path, w.dtype, w.item_shape, codec=codec, **extra) as writer:
            writer.append(w.dense)
    else:
        with Ragged.create(path, w.dtype, w.ndim, codec=codec, **extra) as writer:
            writer.append(iter(w.ragged))  # type: ignore[arg-type]
    if not OURS:  # the published loaderx never flushes: make it durable
        sync_tree(path)
    store = open_store(w, path)
    try:
        verify(STORE_LABEL, w, lambda idx: store[idx], batch)
    finally:
        store.close()
    return path


def open_store(w: Workload, path: str, cache: str = "auto") -> Any:
    cls = Dense if w.kind == "dense" else Ragged
    return cls.open(path, cache=cache) if cache != "auto" else cls.open(path)
