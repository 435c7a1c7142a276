"""Publishing a local store to object storage (``zrecord.publish``, ``zrecord publish``).

Invariants of this module (spec §7.1):
- Only a store that opens and passes ``verify()`` is uploaded: a damaged local copy is never
  published.
- ``header.zrh`` is uploaded last, after every shard object and ``index.zri`` have been
  uploaded in full (multipart uploads completed) and their sizes checked, and only where no
  ``header.zrh`` exists (a conditional create where the server supports it). An upload
  interrupted at any point therefore leaves a prefix that readers report as not published.
- Nothing of the local store is changed.
"""

from __future__ import annotations

import concurrent.futures
import errno as _errno
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zrecord._reader import open_store
from zrecord._remote import _Client, is_url, storage_settings
from zrecord.console import progress_bar
from zrecord.errors import RemoteError, StoreExistsError

# Objects at least this large go up as multipart uploads of parts this large (S3's minimum).
MULTIPART_PART_BYTES = 8 << 20


def publish(source: Any, url: str, *, storage_options: Mapping[str, Any] | None = None,
            progress: bool = False, verify: bool = True) -> str:
    """Upload the published local store at `source` to `url` (``s3://bucket/prefix``) so that
    no reader ever sees it half uploaded, and return the store's digest.

    The store is opened (and, unless `verify` is false, verified) first. Shards and
    ``index.zri`` go up in parallel (multipart above 8 MiB); ``header.zrh``, which publishes
    the store, goes last and only if the prefix holds none. An interrupted upload leaves
    objects that no reader opens (they report ``NotPublishedError``); publishing again to the
    same prefix replaces them. `storage_options` as for ``Dense.open``; `progress` shows the
    bytes uploaded on stderr.
    """
    if is_url(source):
        raise ValueError(f"publish uploads a local store; got the URL {source!r} as the source")
    if not is_url(url) or not url.startswith("s3://"):
        raise ValueError(f"publish uploads to object storage: give an s3://BUCKET/PREFIX URL; got {url!r}")
    options = storage_settings(storage_options)
    with open_store(source, index_cache=None) as store:
        if verify:
            store.verify()
        digest = store.digest
        folder = Path(store.path)
        shards = [folder / f"data-{k:03d}.zrd" for k in range(store.data_shards)]
    client = _Client(url, options)
    if client.head("header.zrh") is not None:
        raise StoreExistsError(f"{client.shown} already holds a published store (its header.zrh "
                               "exists); published stores are immutable: publish to a new prefix")
    body = [*shards, folder / "index.zri"]
    total = sum(p.stat().st_size for p in body) + (folder / "header.zrh").stat().st_size
    with progress_bar(progress, total, f"{client.shown}: publish", unit="B") as update:
        workers = max(1, min(len(body), int(options["max_in_flight"]) // 4 or 1))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="zrecord-put") as pool:
            for done in [pool.submit(_put, client, p, "overwrite") for p in body]:
                update(done.result())
        update(_put(client, folder / "header.zrh", "create"))
    return digest


def _put(client: _Client, path: Path, mode: str) -> int:
    """Upload `path` as the object of its name; check the size the server reports."""
    name, size = path.name, path.stat().st_size
    try:
        client.put(name, str(path), create=mode == "create", part_bytes=MULTIPART_PART_BYTES)
    except FileExistsError:  # only a conditional create fails so
        raise StoreExistsError(f"{client.where(name)} appeared while publishing: another "
                               "writer published a store at this prefix first") from None
    head = client.head(name)
    if head is None or head[0] != size:
        raise RemoteError(_errno.EIO, f"{client.where(name)}: uploaded {size} bytes, but the server "
                          f"reports {'no object' if head is None else f'{head[0]} bytes'}")
    return size
