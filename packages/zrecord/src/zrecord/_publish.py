"""Publishing a local store to object storage (``zrecord.publish``, ``zrecord publish``).

Invariants of this module (spec §7.1):
- Only a store that opens and passes ``verify()`` is uploaded, and only bytes checked on their
  way up: ``header.zrh`` is read once and must be the header the verified open read (its
  checksum is the store's digest); ``index.zri`` is read once and must match the header's
  ``index_checksum``; in a store with index parts (format 1.2), ``index.zrs`` is read once and
  each of its sum groups must match the header's group sum; each shard is read once, in parts,
  and every record in it is checked
  against its checksum in that index before the upload ends. A file that changed after
  ``verify()`` fails its upload, and nothing is published.
- Before it uploads anything, a publisher holds the prefix's claim, ``PREFIX/publish.claim``
  ([ZR-PUB-009]): made by a conditional create, or taken from a publisher that released it or
  left it unrefreshed for ``CLAIM_STALE_S`` by a conditional replace of the version read, so
  two publishers never both hold it. Only the holder uploads, and only after checking (once
  it holds the claim) that the prefix holds no ``header.zrh``. The holder refreshes the claim
  (a conditional replace of its own version) every ``CLAIM_REFRESH_S``, and before any write
  more than ``CLAIM_REFRESH_S`` after its last refresh; a refresh that fails (the claim was
  taken over) stops every upload before its end.
- ``header.zrh`` goes last, by conditional create: after every other object was uploaded
  whole and found on the server with the size and ETag its upload gave, and right after one
  more refresh of the claim. An upload interrupted at any point leaves a prefix that readers
  report as not published; a failed publisher releases its claim.
- The claim stays after publication, so a later publisher stops at it (or at ``header.zrh``)
  and never writes over a published store's objects. Readers ignore it.
- Nothing of the local store is changed.
- A folder of stores (``publish_folder``) is published store by store, each as above, after
  every store below it opened (and verified) and every destination was checked; the regular
  files directly in the folder (the converter's ``provenance.json``) go last, each by
  conditional create. A store or file already at its destination with the same bytes is left
  alone, so publishing a folder again goes on where a failed publish stopped; nothing else is
  ever written over.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import errno as _errno
import functools
import json
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from zrecord import _native
from zrecord._objects import (
    MAX_IN_FLIGHT_DEFAULT,
    Client,
    StorageSettings,
    is_url,
    redact,
    storage_settings,
)
from zrecord._paths import HEADER_NAME, store_location
from zrecord._reader import open_store
from zrecord._remote import shard_name
from zrecord._tree import WRITER_SAYS, is_store_dir, is_temporary_name, survey, writer_state
from zrecord._types import PathLike, StorageOptions
from zrecord.console import progress_bar, restate
from zrecord.errors import (
    ChecksumError,
    CorruptStoreError,
    FormatError,
    ImmutableStoreError,
    NotPublishedError,
    RemoteError,
    StoreChangedError,
    StoreExistsError,
    StoreNotFoundError,
    StoreOSError,
    ZrecordError,
)

# Objects at least this large go up as multipart uploads of parts this large (S3's minimum);
# a shard is read and checked in parts of this size too.
MULTIPART_PART_BYTES = 8 << 20
# The claim object (spec §7.1, [ZR-PUB-009]), its refresh period, and how long a claim left
# unrefreshed stays another publisher's: far above the period, a request's retries
# (retry_timeout_s) and the clock differences S3 tolerates (15 minutes), as staleness is read
# from the server's Last-Modified against this host's clock.
CLAIM = "publish.claim"
CLAIM_REFRESH_S = 30.0
CLAIM_STALE_S = 1800.0
# Conditional takes of a claim tried before giving up (each lost to another publisher).
_CLAIM_ATTEMPTS = 4
# The most bytes of a claim object read; a claim is a few hundred.
_CLAIM_BYTES_MAX = 4096
# Levels below a folder searched for stores by `publish_folder` (as deep as `zrecord info`
# searches): a converted dataset keeps its stores two levels down (ROOT/split/column).
FOLDER_DEPTH_MAX = 6


def publish(source: PathLike, url: str, *, storage_options: StorageOptions | None = None,
            progress: bool = False, verify: bool = True) -> str:
    """Upload the published local store at `source` to `url` (``s3://bucket/prefix``) so that
    no reader ever sees it half uploaded, and return the store's digest.

    The store is opened (and, unless `verify` is false, verified) first; every byte uploaded is
    checked against the store's checksums on its way up, so a local copy damaged meanwhile is
    refused (``ChecksumError``, ``CorruptStoreError``) with nothing published. The publisher
    first takes the prefix's claim (``PREFIX/publish.claim``): ``StoreExistsError`` when the
    prefix holds a published store or another publisher holds the claim. Shards,
    ``index.zri`` and ``index.zrs`` (format 1.2) go up in parallel (multipart above 8 MiB);
    ``header.zrh``, which publishes
    the store, goes last. An interrupted upload leaves objects that no reader opens (they
    report ``NotPublishedError``) and releases the claim, so publishing again to the same
    prefix replaces them (an interrupt that comes once ``header.zrh`` has landed leaves the
    store published, and its note says so); a publisher that was killed leaves its claim, and the prefix is
    refused until the claim has gone unrefreshed for ``CLAIM_STALE_S`` (30 minutes), or its
    object is deleted. `storage_options` as for ``Dense.open``; `progress` shows the bytes
    uploaded on stderr.
    """
    folder = _local_source(source)
    _writable_url(url)
    if not is_store_dir(folder) and os.path.isdir(folder):
        raise ValueError(f"the source {folder!r} is a folder, not a store (it holds no "
                         f"{HEADER_NAME}): publish the stores below it with "
                         f"zrecord.publish_folder({folder!r}, {redact(url)!r}) or `zrecord "
                         "publish FOLDER URL`")
    options = storage_settings(storage_options)
    # The URL and the prefix are judged before the store is verified, which reads all of it:
    # a URL without a bucket, or a prefix that holds a store, fails in a moment.
    client, _ = _destination(url, options)
    with open_store(folder, index_cache=None) as store:
        if verify:
            store.verify()
        digest = store.digest
        store_dir = Path(store.path)
    local = _LocalStore(store_dir, digest)
    claim = _Claim.take(client, digest)
    header_sent = False
    try:
        # A store published by a writer that takes no claim (an older zrecord) is never
        # written over: it is looked for again now that the claim is held.
        _refuse_published(client)
        claim.start_refreshing()
        with progress_bar(progress, local.total_bytes, f"{client.shown}: publish", unit="B") as update:
            in_flight = MAX_IN_FLIGHT_DEFAULT if options.max_in_flight == "auto" else options.max_in_flight
            etags = _upload_body(client, local, claim, in_flight, update)
            _check_uploaded(client, local, etags)
            claim.refresh()  # proves, just before the header, that the claim is still ours
            header_sent = True
            _upload_header(client, local.header)
            update(len(local.header))
    except BaseException as exc:
        if header_sent and _header_landed(client, local.header):
            # The header's PUT reached the server before the failure (an interrupt raised
            # once it returned, an answer lost on the way back): the store is published, as
            # on success, and the claim stays (module docstring).
            if isinstance(exc, Exception):
                return digest
            restate(exc, f"{redact(url)} was published before the interrupt: the store there is "
                    "complete")
            setattr(exc, PUBLISHED_MARK, True)
            raise
        claim.release()
        raise
    finally:
        claim.stop_refreshing()
    return digest


# Set on an interrupt that reached `publish` after the store was published, so that its
# callers (a writer by URL, publish_folder) count the store as published.
PUBLISHED_MARK = "zrecord_published"


def published_before(exc: BaseException) -> bool:
    """Whether `exc` interrupted a `publish` after its store was published."""
    return bool(getattr(exc, PUBLISHED_MARK, False))


def _header_landed(client: Client, header: bytes) -> bool:
    """Whether ``header.zrh`` on the server is `header` (the publisher's, whose PUT may have
    landed before its answer was lost); False when it cannot be told (best effort, on a
    failure path: a second interrupt or a failed request says nothing landed)."""
    try:
        data, _ = client.get("header.zrh")
    except BaseException:  # noqa: BLE001 - the error that led here is the one raised
        return False
    return data == header


@dataclasses.dataclass(frozen=True)
class Published:
    """One line of a folder's publish report (`publish_entries`)."""

    path: str
    """What was published, relative to the folder (``train/image``, ``provenance.json``)."""
    url: str
    """Where it lies now (the URL without user information or query)."""
    digest: str | None
    """The store's digest; None for a file."""
    state: str
    """``"published"`` now, or ``"already published"`` (found there, the same bytes)."""


def publish_folder(source: PathLike, url: str, *, storage_options: StorageOptions | None = None,
                   progress: bool = False, verify: bool = True) -> dict[str, str]:
    """Upload every store below the local folder `source` (a converted dataset's
    ``ROOT/split/column`` stores, say) to ``url/<its path below source>``, each as
    :func:`publish` uploads a store, and then the regular files directly in `source` (the
    converter's ``provenance.json``); return each store's relative path and digest.

    Before anything is uploaded, every store found is opened (and, unless `verify` is false,
    verified) and every destination is checked: a folder holding an unfinished write or
    something that is not a valid store, a prefix that holds another store, or a file that
    exists with other bytes, stops it with nothing uploaded. A store or file found at its
    destination with the same bytes (the store of the same digest) is left as it is, so
    publishing a folder again after a failure goes on where it stopped; the files go last, so
    a ``provenance.json`` that can be read means that every store was published. An error
    says which stores were published before it and which not. Arguments as for
    :func:`publish`.
    """
    entries = publish_entries(source, url, storage_options=storage_options, progress=progress,
                              verify=verify)
    return {e.path: e.digest for e in entries if e.digest is not None}


def publish_entries(source: PathLike, url: str, *, storage_options: StorageOptions | None,
                    progress: bool, verify: bool,
                    on_entry: Callable[[Published], object] | None = None) -> list[Published]:
    """`publish_folder`, reporting each store and file as it is done (`on_entry`, then the
    list returned): what the command line prints."""
    folder = _local_source(source)
    _writable_url(url)
    options = storage_settings(storage_options)
    stores, files = _folder_contents(folder)
    root, _ = _destination(url, options, store=False)  # the folder's prefix: not a store
    base = root.url
    targets = {rel: _destination(f"{base}/{rel}", options, digest)
               for rel, digest in stores.items()}
    uploads = _files_to_upload(folder, files, root)
    # Every store is verified before the first upload (publish then checks each byte it
    # uploads against the checksums verified here, and does not read the store twice).
    for rel, (_, already) in targets.items():
        if verify and not already:
            with open_store(os.path.join(folder, rel), index_cache=None) as store:
                store.verify()
    done: list[Published] = []

    def report(entry: Published) -> None:
        done.append(entry)
        if on_entry is not None:
            on_entry(entry)

    for rel, (client, already) in targets.items():
        if not already:
            try:
                publish(os.path.join(folder, rel), f"{base}/{rel}",
                        storage_options=storage_options, progress=progress, verify=False)
            except BaseException as exc:  # an interrupt too: what was published, and what not
                if published_before(exc):  # its header landed before the interrupt
                    report(Published(rel, client.shown, stores[rel], "published"))
                left = [r for r in targets if r not in {e.path for e in done}]
                restate(exc, f"publishing the folder {folder!r} to {redact(base)!r} stopped at "
                         f"the store {rel!r}; published: {[e.path for e in done] or 'none'}; not "
                         f"published: {left} (publishing the folder again skips the stores "
                         "already published)")
                raise
        report(Published(rel, client.shown, stores[rel],
                         "already published" if already else "published"))
    for name, (client, data) in uploads.items():
        if data is not None:
            try:
                client.put(name, data, create=True, part_bytes=MULTIPART_PART_BYTES)
            except FileExistsError:
                raise StoreExistsError(f"{client.where(name)} appeared while the stores were "
                                       f"published (another writer made it); every store of "
                                       f"{folder!r} is published, the file was not") from None
        report(Published(name, client.where(name), None,
                         "published" if data is not None else "already published"))
    return done


def _folder_contents(folder: str) -> tuple[dict[str, str], list[str]]:
    """The stores below `folder` (relative path -> digest, each opened) and the regular files
    directly in it; an error for what cannot be published."""
    if not os.path.isdir(folder):
        raise StoreNotFoundError(f"no folder of stores at {folder!r}")
    if is_store_dir(folder):
        raise ValueError(f"the source {folder!r} is a store, not a folder of stores: publish it "
                         "with zrecord.publish")
    found = survey(folder, FOLDER_DEPTH_MAX, describe=False)
    where = f"the folder {folder!r}"
    if found.unfinished:
        first = found.unfinished[0]
        raise NotPublishedError(f"{where} holds {len(found.unfinished)} unfinished or aborted "
                                f"write(s), such as {first['path']!r} ({WRITER_SAYS[first['writer']]}); "
                                "publish it once every write is finished, or remove them")
    if found.problems:
        first = found.problems[0]
        text = (f"{where} holds {len(found.problems)} thing(s) that are not valid stores or "
                f"cannot be read, such as {first['path']!r}: {first['error']}; nothing was uploaded")
        raise StoreOSError(_errno.EIO, text) if first["status"] == 3 else FormatError(text)
    if found.truncated:
        raise ValueError(f"{where} is deeper than {FOLDER_DEPTH_MAX} levels (or holds too many "
                         "folders) to be searched whole; publish its parts one by one")
    if not found.stores:
        raise StoreNotFoundError(f"{where} holds no store (no folder with {HEADER_NAME} within "
                                 f"{FOLDER_DEPTH_MAX} levels)")
    stores = {}
    for entry in sorted(found.stores, key=lambda e: str(e["path"])):
        with open_store(os.path.join(folder, entry["path"]), index_cache=None) as store:
            stores[str(entry["path"])] = store.digest
    with os.scandir(folder) as entries:
        files = sorted(e.name for e in entries
                       if not e.name.startswith(".") and e.is_file(follow_symlinks=False))
    return stores, files


def _files_to_upload(folder: str, files: list[str],
                     client: Client) -> dict[str, tuple[Client, bytes | None]]:
    """Each file's bytes, or None where the prefix holds the same bytes already; a file there
    with other bytes stops the publish before any upload."""
    uploads: dict[str, tuple[Client, bytes | None]] = {}
    for name in files:
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        try:
            there, _ = client.get(name)
        except FileNotFoundError:
            uploads[name] = (client, data)
            continue
        if there != data:
            raise StoreExistsError(f"{client.where(name)} exists and differs from "
                                   f"{os.path.join(folder, name)!r}; nothing was uploaded: "
                                   "publish the folder to a new prefix")
        uploads[name] = (client, None)
    return uploads


class _LocalStore:
    """The files of the local store, read for the upload: ``header.zrh``, ``index.zri`` and
    ``index.zrs`` (format 1.2) whole, judged by the core as the store's (the bytes held, not
    the files as they are by then), and where each record lies, as the core decodes it."""

    def __init__(self, folder: Path, digest: str) -> None:
        self.folder = folder
        self.header = _read_checked_header(folder / "header.zrh", digest)
        layout = _native.header_layout(np.frombuffer(self.header, np.uint8), len(self.header),
                                       str(folder / "header.zrh"))
        self.shard_sizes: list[int] = layout["shard_sizes"]
        self.index = (folder / "index.zri").read_bytes()
        # index.zrs, in a store with index parts (format 1.2).
        self.sums = (folder / "index.zrs").read_bytes() if layout["index_parts"] else None
        records = int(layout["record_count"])
        self.offsets = np.empty(records, np.uint64)
        self.sizes = np.empty(records, np.uint64)
        self.shards = np.empty(records, np.uint8)
        self.checksums = np.empty(records, np.uint64)
        try:
            _native.index_table(np.frombuffer(self.header, np.uint8), np.frombuffer(self.index, np.uint8),
                                np.frombuffer(self.sums or b"", np.uint8), str(folder), self.offsets,
                                self.sizes, self.shards, self.checksums)
        except ZrecordError as exc:
            restate(exc, "the store's files changed after it was opened; nothing was published")
            raise
        self.total_bytes = sum(self.shard_sizes) + len(self.index) + len(self.sums or b"") + len(self.header)

    def shard_path(self, k: int) -> Path:
        return self.folder / shard_name(k)

    def records_of(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(record numbers, starts, ends) of the non-empty records of shard `k` in the order
        they lie; they tile the shard ([ZR-IDX-008]), so every byte uploaded is checked."""
        recs = np.flatnonzero((self.shards == k) & (self.sizes > 0))
        recs = recs[np.argsort(self.offsets[recs], kind="stable")]
        starts = self.offsets[recs]
        ends = starts + self.sizes[recs]
        tiled = bool(starts[0] == 0 and np.array_equal(starts[1:], ends[:-1])) if recs.size else True
        if not tiled or (int(ends[-1]) if recs.size else 0) != self.shard_sizes[k]:
            raise CorruptStoreError(f"{self.shard_path(k)}: the records of index.zri do not cover "
                                    "the shard exactly ([ZR-IDX-008]); nothing was published")
        return recs, starts, ends


def _xxh64(data: bytes | np.ndarray) -> int:
    arr = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data
    return int(_native.xxh64(arr))


def _is_header_of(header: bytes, digest: str, name: str) -> bool:
    """Whether `header` (file `name`'s bytes) is a valid header of the store of `digest` (its
    checksum), as the core judges a header."""
    try:
        layout = _native.header_layout(np.frombuffer(header, np.uint8), len(header), name)
    except ZrecordError:
        return False
    return f"{layout['header_checksum']:016x}" == digest


def _read_checked_header(path: Path, digest: str) -> bytes:
    """``header.zrh``, which must still be the header of `digest` (its checksum)."""
    header = path.read_bytes()
    if not _is_header_of(header, digest, str(path)):
        raise ChecksumError(f"{path} changed after the store was opened: it is no longer the "
                            f"header of digest {digest}; nothing was published")
    return header


def check_destination(url: str, *, storage_options: StorageOptions | None = None,
                      files: Sequence[str] = (), folder: bool = False) -> None:
    """Raise now what publishing a store at `url` would raise before uploading anything: a
    location that cannot be written (a local path, an ``http(s)://`` URL, a scheme zrecord
    does not read: ``ValueError``), settings or credentials the server refuses, a prefix
    that holds a published store, objects other than a store's (stores below it, files), or
    that another publisher is publishing to (``StoreExistsError``), a prefix inside a
    published store (``ImmutableStoreError``). ``Dense.create`` by URL and the converter call
    it before they write anything, so that such a mistake costs a moment, not the write. With
    `folder` true, the prefix is a folder of stores' (``publish_folder``'s destination, a
    dataset's): what lies below it is no error. With `files` (names of objects directly under
    the prefix, as ``publish_folder`` uploads a folder's files beside its stores):
    ``StoreExistsError`` where the prefix holds any of them already (``publish_folder`` would
    refuse the folder unless its file had the same bytes)."""
    client, _ = _destination(url, storage_settings(storage_options), store=not folder)
    for name in files:
        if client.head(name) is not None:
            raise StoreExistsError(f"{client.where(name)} exists: something was published at "
                                   f"{client.shown} before; publish to a new prefix")


def _local_source(source: Any) -> str:
    """The local path `source` names; ValueError for a URL (publish uploads local stores)."""
    where = store_location(source, role="the source")
    if is_url(where):
        raise ValueError(f"the source {redact(where)!r} is a URL: publish uploads a local store "
                         "(or folder of stores) to object storage")
    if is_temporary_name(os.path.basename(os.path.normpath(where))) and os.path.isdir(where):
        # Even once its writer wrote a header into it: an unfinished or aborted write.
        raise ValueError(f"the source {where!r} is a writer's temporary folder, not a published "
                         f"store: {WRITER_SAYS[writer_state(where)]}; publish the store its "
                         "writer's close() publishes")
    return where


def _destination(url: Any, options: StorageSettings, digest: str | None = None, *,
                 store: bool = True) -> tuple[Client, bool]:
    """The client of the prefix `url` names, once it is known that a store (or, with `store`
    false, a folder of stores) may be published there (`check_destination`), and whether the
    store of `digest` is published there already (then it is no error: a folder's publish run
    again goes on where it stopped)."""
    client = Client(_writable_url(url), options)
    if _refuse_published(client, digest):
        return client, True
    _refuse_inside_a_store(client, options)
    if store:
        _refuse_other_objects(client)
    found = _read_claim(client)
    if found is not None:
        held, _, modified = found
        if held.get("state") != "released" and time.time() - modified < CLAIM_STALE_S:
            raise _busy(client, held, modified)
    return client, False


def _refuse_inside_a_store(client: Client, options: StorageSettings) -> None:
    """ImmutableStoreError where a prefix above the client's holds a published store (one
    HEAD of header.zrh a level, at most _ANCESTORS_MAX levels): as a local path inside a store
    is refused, nothing is published inside one."""
    key = client.url[len(f"s3://{client.bucket}/"):] if client.url.startswith("s3://") else ""
    parts = [p for p in key.split("/") if p]
    # Down to depth 0, the bucket's root: a store may be published there too.
    for depth in range(len(parts) - 1, max(-1, len(parts) - 1 - _ANCESTORS_MAX), -1):
        prefix = "/".join(parts[:depth])
        above = Client(f"s3://{client.bucket}" + (f"/{prefix}" if prefix else ""), options,
                       answered=True)
        if above.head(HEADER_NAME) is not None:
            raise ImmutableStoreError(_errno.EROFS, f"{client.shown} lies inside the published store "
                                      f"{above.shown}: published stores are immutable and nothing "
                                      "is published inside one; publish to a prefix beside it")


# Levels above a destination looked at for a published store.
_ANCESTORS_MAX = 8

# The objects of a store's prefix (spec §3, and the claim of §7.1): what an interrupted upload
# of a store leaves, which publishing again replaces.
_STORE_OBJECT = re.compile(r"(header\.zrh|index\.zri|index\.zrs|data-\d{3}\.zrd|"
                           + re.escape(CLAIM) + ")")
# Names listed to find another object under a destination: more than a store has (255 shards
# and four others), so a full page holds one that is not a store's at least.
_LISTED_FOR_OTHERS = 300


def _refuse_other_objects(client: Client) -> None:
    """StoreExistsError where the prefix holds objects other than a store's own: stores below
    it, a dataset, files (one listing request). As a local path that exists is refused
    ([ZR-PUB-003]), a store is published to a prefix of its own; published over stores, it
    would make them stores inside a store, which nothing publishes in the other order."""
    # The prefix's own "folder" marker (the empty object a console's "Create folder" makes,
    # listed as '' or with a / at its end) holds nothing.
    others = [n for n in client.listed(_LISTED_FOR_OTHERS)
              if not _STORE_OBJECT.fullmatch(n) and n and not n.endswith("/")]
    if not others:
        return
    stores = [n[:-len(HEADER_NAME) - 1] for n in others if n.endswith("/" + HEADER_NAME)]
    what, names = ("stores below it", stores) if stores else ("objects that are not a store's", others)
    shown = ", ".join(repr(n) for n in names[:3]) + (", ..." if len(names) > 3 else "")
    raise StoreExistsError(f"{client.shown} holds {what}: {shown}; a store is published to a "
                           "prefix of its own (nothing is published over stores, a dataset or "
                           "files): publish to a new prefix")


def _writable_url(url: Any) -> str:
    """`url` if it is a URL zrecord can publish at (s3://), else ValueError saying why not."""
    where = store_location(url, role="the destination")
    if not is_url(where):
        raise ValueError(f"the destination {where!r} is a local path: publishing uploads to "
                         "object storage; give an s3://BUCKET/PREFIX URL")
    if not where.startswith("s3://"):
        raise ValueError(f"the destination {redact(where)!r} is an {where.partition(':')[0]}:// "
                         "URL, which zrecord reads but cannot write (a web server takes no "
                         "uploads): publish to an s3://BUCKET/PREFIX URL, or copy the store to "
                         "the web server's folder by other means")
    marks = [c for c in "?#" if c in where]
    if marks:
        # S3 would keep them in the key, where the URL as shown (without them) finds nothing.
        raise ValueError(f"the destination URL holds {' and '.join(map(repr, marks))} "
                         f"({redact(where)!r} without what follows): an s3:// URL takes no "
                         "query string or fragment, and the objects would lie under a key "
                         "that holds it; give s3://BUCKET/PREFIX")
    return where


def _refuse_published(client: Client, digest: str | None = None) -> bool:
    """Raise StoreExistsError where the prefix holds a published store, unless it is the store
    of `digest` (then True: its header, checked whole, is that store's)."""
    if digest is None:
        if client.head(HEADER_NAME) is None:
            return False
    else:
        try:
            header, _ = client.get(HEADER_NAME)
        except FileNotFoundError:
            return False
        if _is_header_of(header, digest, client.where(HEADER_NAME)):
            return True
    raise StoreExistsError(f"{client.shown} already holds a published store (its {HEADER_NAME} "
                           "exists); published stores are immutable: publish to a new prefix")


def _upload_body(client: Client, local: _LocalStore, claim: _Claim, max_in_flight: int,
                 update: Callable[[int], object]) -> dict[str, str | None]:
    """Upload every shard, ``index.zri`` and ``index.zrs`` in parallel; the ETag each upload
    gave, by name.
    A failure stops the uploads still running at their next part, and is raised once they
    have ended (the claim must not be released while any is in flight)."""
    jobs: list[tuple[str, Callable[[], Any], int]] = [
        (local.shard_path(k).name, functools.partial(_shard_parts, local, k, claim), size)
        for k, size in enumerate(local.shard_sizes)]
    jobs.append(("index.zri", lambda: local.index, len(local.index)))
    if local.sums is not None:
        jobs.append(("index.zrs", lambda: local.sums, len(local.sums)))
    workers = max(1, min(len(jobs), max_in_flight // 4 or 1))
    etags: dict[str, str | None] = {}
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="zrecord-put") as pool:
        futures = {pool.submit(_put_body, client, name, data, size, claim): (name, size)
                   for name, data, size in jobs}
        try:
            for done in concurrent.futures.as_completed(futures):
                name, size = futures[done]
                etags[name] = done.result()
                update(size)
        except BaseException:
            claim.cancel()
            for future in futures:
                future.cancel()
            raise
    return etags


def _put_body(client: Client, name: str, data: Callable[[], Any], size: int,
              claim: _Claim) -> str | None:
    """Upload one object other than the header, only while the claim is ours; its ETag."""
    claim.check()
    body = data()
    if size < MULTIPART_PART_BYTES and not isinstance(body, bytes):
        body = b"".join(body)  # checked whole before the one request that uploads it
        claim.check()
    return client.put(name, body, size=size, part_bytes=MULTIPART_PART_BYTES)


def _shard_parts(local: _LocalStore, k: int, claim: _Claim) -> Iterator[bytes]:
    """The bytes of shard `k`, read once in parts, each record checked against its checksum
    as soon as it has been read whole: the upload they feed ends (its multipart upload is
    completed) only after the last record was checked. Holds at most one part and one
    record."""
    path, size = local.shard_path(k), local.shard_sizes[k]
    recs, starts, ends = local.records_of(k)
    done = 0  # records checked
    base = 0  # the file offset of the first byte held
    held: list[bytes] = []
    held_bytes = 0
    with open(path, "rb") as f:
        while base + held_bytes < size:
            claim.check()
            part = f.read(min(MULTIPART_PART_BYTES, size - base - held_bytes))
            if not part:
                raise CorruptStoreError(f"{path} is shorter than header.zrh says ({size} bytes): "
                                        "it changed after the store was opened; nothing was "
                                        "published")
            held.append(part)
            held_bytes += len(part)
            stop = int(np.searchsorted(ends, base + held_bytes, side="right"))
            if stop > done:
                data = b"".join(held) if len(held) > 1 else held[0]
                view = np.frombuffer(data, np.uint8)
                for j in range(done, stop):
                    rec = view[int(starts[j]) - base:int(ends[j]) - base]
                    if _xxh64(rec) != int(local.checksums[recs[j]]):
                        raise _changed_record(path, k, int(recs[j]), int(starts[j]), int(ends[j]))
                cut = int(ends[stop - 1]) - base
                held, held_bytes, base, done = [data[cut:]], len(data) - cut, base + cut, stop
            yield part
        if f.read(1):
            raise CorruptStoreError(f"{path} is longer than header.zrh says ({size} bytes): it "
                                    "changed after the store was opened; nothing was published")
    claim.check()


def _changed_record(path: Path, shard: int, rec: int, start: int, end: int) -> ChecksumError:
    exc = ChecksumError(f"{path}: record {rec} (bytes {start}-{end - 1}) no longer matches its "
                        "checksum in index.zri: the file changed after the store was verified; "
                        "nothing was published")
    exc.record, exc.shard = rec, shard
    return exc


def _check_uploaded(client: Client, local: _LocalStore, etags: Mapping[str, str | None]) -> None:
    """Every object uploaded is on the server with its size, and is still the version this
    publisher uploaded (ETag): nothing else wrote it meanwhile."""
    sizes = {local.shard_path(k).name: s for k, s in enumerate(local.shard_sizes)}
    sizes["index.zri"] = len(local.index)
    if local.sums is not None:
        sizes["index.zrs"] = len(local.sums)
    for name, size in sizes.items():
        head = client.head(name)
        if head is None or head[0] != size:
            raise RemoteError(_errno.EIO, f"{client.where(name)}: uploaded {size} bytes, but the "
                              f"server reports {'no object' if head is None else f'{head[0]} bytes'}")
        if etags.get(name) is not None and head[1] is not None and head[1] != etags[name]:
            raise StoreExistsError(f"{client.where(name)} changed after this publisher uploaded it "
                                   "(another writer wrote it); nothing was published")


def _upload_header(client: Client, header: bytes) -> None:
    """Publish: ``header.zrh``, only where none exists."""
    try:
        client.put("header.zrh", header, create=True, part_bytes=MULTIPART_PART_BYTES)
    except FileExistsError:  # only a conditional create fails so
        raise StoreExistsError(f"{client.where('header.zrh')} appeared while publishing: another "
                               "writer published a store at this prefix first") from None


def _now_text(at: float | None = None) -> str:
    moment = datetime.datetime.fromtimestamp(time.time() if at is None else at, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Claim:
    """This publisher's hold on a prefix: the claim object's content and the ETag of the
    version it last wrote (module docstring)."""

    def __init__(self, client: Client, record: dict[str, Any], etag: str | None) -> None:
        self.client = client
        self.record = record
        self.etag = etag
        self.refreshed = time.monotonic()
        self.lost: StoreExistsError | None = None
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def take(cls, client: Client, digest: str) -> _Claim:
        """Create the claim, or take over a released or stale one; StoreExistsError while
        another publisher holds it."""
        record = {"claim": "zrecord publish", "version": 1, "token": uuid.uuid4().hex,
                  "digest": digest, "host": socket.gethostname(), "pid": os.getpid(),
                  "claimed_at": _now_text(), "refreshed_at": _now_text(), "refreshes": 0,
                  "state": "publishing"}
        try:
            return cls._taken(client, record)
        except StoreExistsError:
            raise  # held by another publisher: not this one's to release
        except BaseException:
            # Interrupted, or failed, after a create that may have reached the server (its
            # answer lost): a claim of this publisher's token is released, or the prefix
            # stays refused until it goes stale. Best effort, as `release`.
            with contextlib.suppress(BaseException):
                found = _read_claim(client)
                if found is not None and found[0].get("token") == record["token"]:
                    cls(client, record, found[1]).release()
            raise

    @classmethod
    def _taken(cls, client: Client, record: dict[str, Any]) -> _Claim:
        body = json.dumps(record).encode()
        for _ in range(_CLAIM_ATTEMPTS):
            try:
                return cls(client, record, client.put(CLAIM, body, create=True,
                                                      part_bytes=MULTIPART_PART_BYTES))
            except FileExistsError:
                pass
            found = _read_claim(client)
            if found is None:
                continue  # removed meanwhile: create it again
            held, etag, modified = found
            if held.get("state") != "released" and time.time() - modified < CLAIM_STALE_S:
                raise _busy(client, held, modified)
            try:
                # Only the version judged stale is replaced: of two publishers taking it over,
                # one fails here and then finds the other's fresh claim.
                return cls(client, record, client.put(CLAIM, body, if_match=etag,
                                                      part_bytes=MULTIPART_PART_BYTES))
            except StoreChangedError:
                continue
        raise StoreExistsError(f"{client.where(CLAIM)}: other publishers took the claim of this "
                               f"prefix {_CLAIM_ATTEMPTS} times while this one tried to; retry, "
                               "or publish to another prefix")

    def refresh(self) -> None:
        """Write the claim again over the version this publisher wrote last: a new
        Last-Modified, and a new ETag (the content changes) for any taker to fail on.
        StoreExistsError when it is no longer that version (taken over)."""
        with self._lock:
            if self.lost is not None:
                raise self.lost
            self.record["refreshes"] += 1
            self.record["refreshed_at"] = _now_text()
            try:
                self.etag = self.client.put(CLAIM, json.dumps(self.record).encode(),
                                            if_match=self.etag, part_bytes=MULTIPART_PART_BYTES)
            except StoreChangedError:
                self.lost = StoreExistsError(
                    f"{self.client.where(CLAIM)} was taken over by another publisher while this "
                    f"one uploaded (it found the claim unrefreshed for {CLAIM_STALE_S:.0f} s: was "
                    "this process stopped or cut off that long?); nothing of this store was "
                    "published and the other publisher's objects are not touched again")
                raise self.lost from None
            self.refreshed = time.monotonic()

    def check(self) -> None:
        """Raise unless this publisher may still write: the claim not lost, the publish not
        cancelled, and the claim refreshed within CLAIM_REFRESH_S (else refreshed now)."""
        if self._cancelled.is_set():
            raise StoreExistsError(f"{self.client.shown}: publish cancelled")
        if self.lost is not None:
            raise self.lost
        if time.monotonic() - self.refreshed > CLAIM_REFRESH_S:
            self.refresh()

    def cancel(self) -> None:
        """Make the uploads still running stop at their next part."""
        self._cancelled.set()

    def start_refreshing(self) -> None:
        def run() -> None:
            while not self._stop.wait(CLAIM_REFRESH_S):
                try:
                    self.refresh()
                except StoreExistsError:
                    return  # lost: the uploads stop at their next check
                except Exception:  # noqa: BLE001 - a failed request is tried again next period
                    continue

        self._thread = threading.Thread(target=run, name="zrecord-claim", daemon=True)
        self._thread.start()

    def stop_refreshing(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def release(self) -> None:
        """Mark the claim released, if it is still this publisher's, so that publishing again
        need not wait for it to go stale. Best effort: this runs on failure paths."""
        self.stop_refreshing()
        with self._lock:
            if self.lost is not None:
                return
            self.record["state"] = "released"
            self.record["refreshed_at"] = _now_text()
            try:
                self.client.put(CLAIM, json.dumps(self.record).encode(), if_match=self.etag,
                                part_bytes=MULTIPART_PART_BYTES)
            except Exception:  # noqa: BLE001 - the error that led here matters more
                pass


def _read_claim(client: Client) -> tuple[dict[str, Any], str | None, float] | None:
    """The claim object's content (empty where it is not a claim zrecord wrote), its ETag and
    the server's Last-Modified (seconds since the epoch); None where there is none."""
    # `Client.get` gives no Last-Modified: the answer's own meta has it.
    try:
        result = client.get_stream(CLAIM)
        with client.errors(CLAIM):
            data = bytes(result.bytes())
    except FileNotFoundError:
        return None
    try:
        held = json.loads(data[:_CLAIM_BYTES_MAX])
    except ValueError:
        held = {}
    if not isinstance(held, dict):
        held = {}
    return held, result.meta.get("e_tag"), result.meta["last_modified"].timestamp()


def _claim_field(held: Mapping[str, Any], key: str) -> str:
    """A field of a claim, which another program wrote, as a message shows it: an int as it
    is, anything else quoted (repr escapes control characters) and cut short."""
    value = held.get(key, "?")
    return str(value) if type(value) is int else repr(str(value)[:100])


def claim_state(client: Client) -> str:
    """What the prefix's publish.claim says of an upload, for the error of a prefix that has
    objects but no header.zrh: none, held (in progress), released, or stale (interrupted)."""
    found = _read_claim(client)
    if found is None:
        return (f"no {CLAIM}: not an upload of zrecord publish, or of one from before claims; "
                "nothing says that an upload is in progress")
    held, _, modified = found
    who = (f"claimed at {_claim_field(held, 'claimed_at')} by host {_claim_field(held, 'host')}, "
           f"pid {_claim_field(held, 'pid')}, last written {_now_text(modified)}")
    if held.get("state") == "released":
        return (f"its {CLAIM} ({who}) was released: that upload failed or was stopped; "
                "publish the store again")
    if time.time() - modified < CLAIM_STALE_S:
        return (f"its {CLAIM} is held ({who}): an upload is in progress; open the store once "
                "it is published")
    return (f"its {CLAIM} ({who}) has not been refreshed for {CLAIM_STALE_S / 60:.0f} minutes: "
            "that upload was interrupted (its publisher killed); publish the store again")


def _busy(client: Client, held: Mapping[str, Any], modified: float) -> StoreExistsError:
    """The error for a claim another publisher holds, saying who and until when."""
    def shown(key: str) -> str:
        return _claim_field(held, key)

    return StoreExistsError(
        f"{client.shown}: another publisher is publishing a store here (claimed at "
        f"{shown('claimed_at')} by host {shown('host')}, pid {shown('pid')}, for the store of "
        f"digest {shown('digest')}; last refreshed {_now_text(modified)}), or it crashed: retry after "
        f"{_now_text(modified + CLAIM_STALE_S)}, when an unrefreshed claim may be taken over; or, "
        f"if you know that no publisher runs, delete {client.where(CLAIM)}; or publish to another "
        "prefix")
