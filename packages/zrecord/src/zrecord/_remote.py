"""Stores read from object storage (``s3://``) and web servers (``http(s)://``) by byte range.

A remote store is read through a *mirror*: a local folder laid out as a store, whose
``header.zrh`` and ``index.zri`` are the objects fetched whole at open and whose shard files
are sparse files of the objects' sizes, filled record by record as gathers need them. The
native reader opens the mirror as it opens any store, so every check of the spec (§9) runs on
the fetched header and index, and every record is checked against its checksum when it is
first read, whatever the network did.

Invariants of this module:
- Open fetches ``header.zrh`` and ``index.zri`` once and notes every object's ETag; every later
  request carries ``If-Match`` with the ETag seen at open, so a store replaced under a reader
  fails its next fetch (:class:`~zrecord.errors.StoreChangedError`) and is never mixed.
- A gather first fetches the records of its batch that the mirror does not hold: sorted by
  shard and offset, neighbours whose gap is at most ``gap_bytes`` coalesced into one ranged GET
  of at most ``request_bytes_max`` bytes, ``max_in_flight`` requests at once. A record is marked
  present (one bit per record, ``present.bits`` beside the mirror) only after its bytes are
  written; a failed fetch fails the whole gather, never returns part of a batch.
- The native reader of a mirror checks every read of a record against its checksum, not only the
  first (ZR_OPEN_CHECK_EVERY_READ): the mirror's files change while it reads them. A record
  whose bytes there fail (a damaged or half-written mirror, or one punched out by an eviction
  meanwhile) is fetched once more, and once more for each chunk punched out of the mirror since
  the gather began, by any of its readers (at most ``_REFETCHES_MAX`` times); a record that
  fails after that is the store's own corruption.
- With ``cache_bytes`` the mirror's shard files hold at most that many bytes after each fetch:
  the least recently used chunks are punched out (``_mirror_cache``).
- ``prefetch`` starts the fetches of records a reader will read soon and does not wait; a
  gather that needs records whose prefetch is still under way waits for it (and for its
  failure fetches them itself), so no record is asked for twice at once by one reader.
- ``close()`` cancels the fetches under way and waits for them to end; a gather or prefetch
  that races it raises :class:`~zrecord.errors.ClosedError`, and none starts after it.
- Messages name the URL and the object, never the mirror's path, a credential or a query
  string.
- Without ``cache_dir`` the mirror is a private temporary folder, removed at ``close()`` by the
  process that opened it; with one, processes that open the same store (same URL and ETags)
  share one mirror.
- fork(): a child forked after reads (or during them, on other threads) reads what the mirror
  holds and closes its copy; it drops the parent's event loop, prefetches, locks and client on
  first use (``Mirror._adopt``). It cannot fetch: obstore's client does not work in a process
  forked after it ran, so a fetch there raises :class:`~zrecord.errors.RemoteError` saying so
  and how to start workers instead, never waits forever (``_client_runs``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno as _errno
import hashlib
import os
import re
import shutil
import struct
import tempfile
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any, TypeGuard, TypeVar

import numpy as np

from zrecord._mirror_cache import Budget, PunchWord, parse_budget, punches_since
from zrecord.errors import (
    ChecksumError,
    ClosedError,
    CorruptStoreError,
    NotPublishedError,
    RemoteError,
    StoreChangedError,
    StoreNotFoundError,
    ZrecordError,
)

SCHEMES = ("s3://", "http://", "https://")

# Header fields the mirror is laid out from (spec §3.1); the native reader validates them all.
_HEADER_FIXED_BYTES = 128
_KIND_DENSE = 1

# Tuning keys of `storage_options` and their defaults; every other key configures the client.
DEFAULTS: dict[str, Any] = {
    "max_in_flight": 64,
    # "auto": the store's mean stored record, at most GAP_AUTO_MAX: a request joins neighbours
    # with about one record between them, so that it costs at most about twice its bytes.
    "gap_bytes": "auto",
    "request_bytes_max": 8 << 20,
    "timeout_s": 30.0,
    "connect_timeout_s": 5.0,
    # 20 retries with backoff from 100 ms to 5 s: about 40 s of waiting, so a server restart
    # is ridden out; 8 from 50 ms were spent in under a second against a closed port.
    "retries": 20,
    "retry_timeout_s": 60.0,
    "cache_dir": None,
    "cache_bytes": None,
}
# Client keys: ours, then what obstore's S3 configuration calls them.
_S3_KEYS = {
    "endpoint_url": "endpoint",
    "region": "region",
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
    "skip_signature": "skip_signature",
}

GAP_AUTO_MAX = 64 << 10
# The most times one gather fetches one record again after its bytes in the mirror failed.
_REFETCHES_MAX = 8
# What one prefetch call fetches at most (the local prefetch's bounds, readahead.zig).
PREFETCH_RECORDS_MAX = 16 << 10
PREFETCH_BYTES_MAX = 64 << 20

_T = TypeVar("_T")


def is_url(path: object) -> TypeGuard[str]:
    """Whether `path` names a remote store (a str starting with s3://, http:// or https://)."""
    return isinstance(path, str) and path.startswith(SCHEMES)


def redact(url: str) -> str:
    """`url` without user information, query or fragment: what messages may show. A URL that
    does not parse (an unclosed IPv6 bracket, a port that is no number) is shown by its scheme
    only, since where its secret parts end cannot be told."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
    except ValueError:
        return f"{url.partition('://')[0]}://(a URL that does not parse)"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def _import_obstore() -> Any:
    try:
        import obstore
    except ImportError:
        raise ImportError("reading stores over s3:// and http(s):// needs the obstore client: "
                          "pip install 'zrecord[remote]'") from None
    return obstore


class _Client:
    """One store's objects through obstore: whole gets, heads and ranged gets with If-Match."""

    def __init__(self, url: str, options: Mapping[str, Any]) -> None:
        obstore = _import_obstore()
        from obstore.store import HTTPStore, S3Store

        self._obstore = obstore
        bucket, prefix = _checked_url(url)
        # The process that made this client: a forked child makes its own (Mirror._adopt).
        self.pid = os.getpid()
        self.url = url.rstrip("/")
        self.shown = redact(self.url)
        self.bucket = bucket
        # Plain dicts for obstore's TypedDicts (RetryConfig, ClientConfig, S3Config).
        retry: Any = {"max_retries": int(options["retries"]),
                 "backoff": {"init_backoff": timedelta(milliseconds=100),
                             "max_backoff": timedelta(seconds=5), "base": 2.0},
                 "retry_timeout": timedelta(seconds=float(options["retry_timeout_s"]))}
        client: Any = {"timeout": timedelta(seconds=float(options["timeout_s"])),
                  "connect_timeout": timedelta(seconds=float(options["connect_timeout_s"]))}
        try:
            if bucket is not None:
                config: Any = {ours: options[key] for key, ours in _S3_KEYS.items() if options.get(key) is not None}
                config.update(_profile_credentials(config))
                endpoint = config.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")
                if endpoint:
                    # MinIO-style servers: path-style requests, and plain HTTP when the endpoint is.
                    config.setdefault("virtual_hosted_style_request", False)
                    if str(endpoint).startswith("http://"):
                        client["allow_http"] = True
                self.store: Any = S3Store(bucket, prefix=prefix or None, config=config,
                                          client_options=client, retry_config=retry)
            else:
                client["allow_http"] = self.url.startswith("http://")
                self.store = HTTPStore.from_url(self.url, client_options=client, retry_config=retry)
        except BaseException as exc:
            if not isinstance(exc, (ValueError, obstore.exceptions.BaseError)) and not _is_panic(exc):
                raise
            # Settings the client refuses (an unknown key, an endpoint that is no URL): the
            # caller's input, said with the URL and never with the settings' values.
            raise ValueError(f"{self.shown}: the object storage client refuses these settings: "
                             f"{_first_line(exc)}") from None

    def where(self, name: str) -> str:
        return f"{self.shown}/{name}" if name else self.shown

    def get(self, name: str) -> tuple[bytes, str | None]:
        """The whole object `name` and its ETag; FileNotFoundError when there is none."""
        result = self._call(name, lambda: self._obstore.get(self.store, name))
        return bytes(self._call(name, result.bytes)), result.meta.get("e_tag")

    def head(self, name: str) -> tuple[int, str | None] | None:
        """(size, ETag) of object `name`, or None when there is none."""
        try:
            meta = self._call(name, lambda: self._obstore.head(self.store, name))
        except FileNotFoundError:
            return None
        return int(meta["size"]), meta.get("e_tag")

    async def get_range(self, name: str, start: int, end: int, etag: str | None) -> bytes:
        """Bytes [start, end) of object `name`, which must still have ETag `etag`: a coroutine,
        so that one event loop keeps hundreds of requests in flight without a thread each."""
        options: dict[str, Any] = {"range": (start, end)}
        if etag is not None:
            options["if_match"] = etag
        with self._errors(name):
            result = await self._obstore.get_async(self.store, name, options=options)
            data = bytes(await result.bytes_async())
        if len(data) != end - start:
            why = ("the object is shorter than at open (truncated or replaced)" if len(data) < end - start
                   else "the server does not answer Range requests (it sent more)")
            raise StoreChangedError(_errno.EIO, f"{self.where(name)}: asked for bytes {start}-{end - 1} "
                                    f"and got {len(data)} bytes: {why}")
        return data

    def any_object(self) -> bool:
        """Whether anything lies under the store's prefix (S3: a listing; HTTP: index.zri or the
        first shard answer a HEAD)."""
        if self.url.startswith("s3://"):
            def first() -> bool:
                for chunk in self._obstore.list(self.store, chunk_size=1):
                    return bool(chunk)
                return False
            return self._call("", first)
        return any(self.head(n) is not None for n in ("index.zri", "data-000.zrd"))

    def put(self, name: str, data: bytes | Iterator[bytes], *, size: int | None = None,
            create: bool = False, if_match: str | None = None, part_bytes: int) -> str | None:
        """Upload `data` as object `name` and return the ETag the server gave it (None where it
        gives none). `data` is the object's bytes, or an iterator of them (`size` then says how
        many in all); an exception the iterator raises ends the upload, and no object is made.
        Multipart in parts of `part_bytes` when the object is at least that large. With
        `create`, only where no such object exists (FileExistsError otherwise); with
        `if_match`, only where the object's ETag is still `if_match` (StoreChangedError
        otherwise: another writer replaced it, or removed it)."""
        if create and if_match is not None:
            raise ValueError("put: create and if_match exclude each other")
        size = len(data) if isinstance(data, bytes) else size
        if size is None:
            raise ValueError("put: give the size of an object uploaded from an iterator")
        mode: Any = "create" if create else "overwrite" if if_match is None else {"e_tag": if_match}
        # A conditional put is one request (obstore makes no multipart upload of one).
        multipart = size >= part_bytes and mode == "overwrite"
        with self._errors(name):
            try:
                result = self._obstore.put(self.store, name, data, mode=mode,
                                           use_multipart=multipart, chunk_size=part_bytes)
            except (self._obstore.exceptions.PreconditionError, FileNotFoundError):
                if if_match is None:
                    raise
                raise StoreChangedError(_errno.ESTALE, f"{self.where(name)} was not replaced: it "
                                        f"is no longer the version {if_match} (another writer "
                                        "replaced or removed it)") from None
        etag = result.get("e_tag")
        return None if etag is None else str(etag)

    def _call(self, name: str, fn: Callable[[], _T]) -> _T:
        """`fn()`, with obstore's errors as zrecord's (`_errors`)."""
        with self._errors(name):
            return fn()

    @contextlib.contextmanager
    def _errors(self, name: str) -> Iterator[None]:
        """obstore's errors inside the block raised as zrecord's (`_translate`); the block is
        an obstore request, refused in a process where obstore cannot run (`_client_runs`)."""
        _client_runs(self.where(name))
        try:
            yield
        except Exception as exc:
            mapped = self._translate(name, exc)
            if mapped is exc:
                raise
            raise mapped from None
        except BaseException as exc:
            # A panic in obstore's Rust code reaches Python as pyo3's PanicException, a
            # BaseException that `except Exception` (ours and the caller's) would miss.
            if not _is_panic(exc):
                raise
            raise RemoteError(_errno.EIO, f"{self.where(name)}: the object storage client failed "
                              f"(a panic in obstore): {_first_line(exc)}") from None

    def _translate(self, name: str, exc: Exception) -> Exception:
        """zrecord's error for obstore's `exc` on object `name`, naming the object (never a
        secret); `exc` itself when it is no obstore error, or FileNotFoundError."""
        exc_mod = self._obstore.exceptions
        where = self.where(name)
        if isinstance(exc, FileNotFoundError) or not isinstance(exc, exc_mod.BaseError):
            return exc
        if isinstance(exc, exc_mod.AlreadyExistsError):
            return FileExistsError(_errno.EEXIST, f"{where} exists")
        if isinstance(exc, exc_mod.PreconditionError):
            return StoreChangedError(_errno.ESTALE, f"{where} changed after the store was opened "
                                     "(its ETag is not the one seen at open): the store was "
                                     "replaced; open it again to read the new one")
        if isinstance(exc, (exc_mod.PermissionDeniedError, exc_mod.UnauthenticatedError)):
            return RemoteError(_errno.EACCES, f"{where}: access denied ({type(exc).__name__}); "
                               "check the credentials (AWS_ACCESS_KEY_ID and "
                               "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or storage_options)")
        if isinstance(exc, exc_mod.NotSupportedError):
            return RemoteError(_errno.EOPNOTSUPP, f"{where}: the server does not answer Range "
                               "requests, which reading a store by URL needs")
        if "NoSuchBucket" in str(exc):
            return StoreNotFoundError(f"no store at {self.shown}: the bucket {self.bucket!r} does not exist")
        return RemoteError(_errno.EIO, f"{where}: the request failed after its retries: {_first_line(exc)}")


# The process where obstore's client first ran here. Its first request starts a tokio runtime
# whose threads a process forked afterwards does not have, and every request of such a child,
# on any client, waits forever (tokio-rs/tokio#4301; obstore 0.12 has no check of its own).
_client_ran_in: int | None = None


def _client_runs(where: str) -> None:
    """Note that obstore's client runs in this process, or refuse with RemoteError in a child
    forked after it ran in an ancestor (module comment above): a clear error, never a hang."""
    global _client_ran_in
    if _client_ran_in is None:
        _client_ran_in = os.getpid()
    elif _client_ran_in != os.getpid():
        raise RemoteError(_errno.EOPNOTSUPP, f"{where}: cannot fetch in this process: it was forked "
                          "(os.fork(), or a worker of multiprocessing's or a DataLoader's 'fork' "
                          "start method) after its parent had fetched from object storage, and the "
                          "client (obstore's tokio runtime) does not work in such a child. The "
                          "records the mirror holds are read all the same; to fetch, start workers "
                          "with 'spawn' or 'forkserver' (DataLoader(multiprocessing_context="
                          "'spawn')), or fork before opening stores by URL")


# Held while a forked child adopts a mirror (Mirror._adopt); made anew in every child, since a
# thread of the parent may have held it at the fork.
_adopting = threading.Lock()


def _after_fork_in_child() -> None:
    global _adopting
    _adopting = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _first_line(exc: BaseException) -> str:
    """The first line of a client error, without what could hold a secret: user information
    and query strings of the URLs in it."""
    text = str(exc).strip().splitlines()
    return _scrub(text[0][:400] if text else type(exc).__name__)


def _scrub(text: str) -> str:
    """`text` without the user information, query strings and fragments of URLs in it: what a
    message may show of text that does not parse as one URL (redact's regex twin)."""
    return re.sub(r"[?#][^\s]*", "", re.sub(r"://[^/@\s]+@", "://", text))


def _checked_url(url: str) -> tuple[str | None, str]:
    """(bucket, prefix) of an s3:// URL, (None, "") of an http(s):// one; ValueError naming the
    URL (scrubbed) when it names no bucket or no host, or does not parse."""
    if url.startswith("s3://"):
        # Not urlsplit: an S3 key may hold '?' and '#', which are part of the prefix here.
        bucket, _, prefix = url[len("s3://"):].partition("/")
        if not bucket:
            raise ValueError(f"an s3:// URL names a bucket and a prefix, s3://BUCKET/PREFIX; "
                             f"got {_scrub(url)!r}, which names no bucket")
        return bucket, prefix.rstrip("/")
    try:
        parts = urllib.parse.urlsplit(url)
        host, _ = parts.hostname, parts.port  # .port raises on a port that is no number
    except ValueError as exc:
        raise ValueError(f"{_scrub(url)!r} is not a valid URL: {exc}") from None
    if not host:
        raise ValueError(f"an {parts.scheme}:// URL names a host, {parts.scheme}://HOST/PATH; "
                         f"got {_scrub(url)!r}, which names no host")
    return None, ""


def _is_panic(exc: BaseException) -> bool:
    """Whether `exc` is pyo3's PanicException (a panic in Rust code, such as obstore's)."""
    return type(exc).__name__ == "PanicException" and not isinstance(exc, Exception)


def _profile_credentials(config: Mapping[str, Any]) -> dict[str, Any]:
    """Keys and region from ~/.aws/credentials and ~/.aws/config (AWS_PROFILE, else default)
    where neither `config` nor the environment gives them: what AWS's own tools would use."""
    if "access_key_id" in config or os.environ.get("AWS_ACCESS_KEY_ID"):
        return {}
    import configparser

    profile = os.environ.get("AWS_PROFILE", "default")
    found: dict[str, Any] = {}
    files = ((os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), profile),
             (os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"),
              profile if profile == "default" else f"profile {profile}"))
    for path, section in files:
        parser = configparser.RawConfigParser()
        with contextlib.suppress(OSError, configparser.Error):
            parser.read(os.path.expanduser(path))
        if not parser.has_section(section):
            continue
        for key, ours in (("aws_access_key_id", "access_key_id"),
                          ("aws_secret_access_key", "secret_access_key"),
                          ("aws_session_token", "session_token"), ("region", "region")):
            if parser.has_option(section, key) and ours not in config and ours not in found:
                found[ours] = parser.get(section, key)
    return found


def storage_settings(storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """`storage_options` with the defaults filled in; unknown keys are an error."""
    options = dict(DEFAULTS)
    for key, value in (storage_options or {}).items():
        if key not in DEFAULTS and key not in _S3_KEYS:
            known = ", ".join(sorted([*DEFAULTS, *_S3_KEYS]))
            raise ValueError(f"unknown storage option {key!r}; known: {known}")
        options[key] = value
    for key in ("max_in_flight", "request_bytes_max"):
        if int(options[key]) < 1:
            raise ValueError(f"storage option {key} must be at least 1; got {options[key]!r}")
    options["cache_bytes"] = parse_budget(options["cache_bytes"])
    if options["gap_bytes"] != "auto" and int(options["gap_bytes"]) < 0:
        raise ValueError(f"storage option gap_bytes must be 'auto' or at least 0; got {options['gap_bytes']!r}")
    return options


def _layout(header: bytes) -> tuple[int, int, int, list[int]] | None:
    """(record_count, index_entry_size, index_size, shard sizes) from a header's bytes, or None
    when they are too short or not a zrecord header: the native open then reports what is wrong."""
    if len(header) < _HEADER_FIXED_BYTES + 8 or header[:8] != b"\x89ZREC\r\n\x1a":
        return None
    kind, ndim, shards = header[16], header[18], header[20]
    records, = struct.unpack_from("<Q", header, 24)
    entry, = struct.unpack_from("<I", header, 48)
    index_size, = struct.unpack_from("<Q", header, 56)
    at = _HEADER_FIXED_BYTES + (8 * ndim if kind == _KIND_DENSE else 0)
    if at + 8 * shards > len(header) - 8:
        return None
    return records, entry, index_size, list(struct.unpack_from(f"<{shards}Q", header, at))


class Mirror:
    """The local mirror of one remote store, and the fetches that fill it (module docstring)."""

    # The punch word of a shared mirror read without a budget, made on first use (_punch_word).
    _shared_punches: PunchWord | None = None
    # Set by close(), under the lock: no fetch starts after it (_submit).
    _closed = False

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None) -> None:
        self.options = storage_settings(storage_options)
        self.client = _Client(url, self.options)
        self.url = self.client.shown
        self._private: tempfile.TemporaryDirectory[str] | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._slots: asyncio.Semaphore | None = None
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}
        self._budget: Budget | None = None
        # Prefetches under way: the records each fetches, and its future.
        self._pending: list[tuple[np.ndarray, concurrent.futures.Future[None]]] = []
        self.requests = 0
        self.bytes_fetched = 0
        header, header_etag = self._fetch_header()
        index, index_etag = self._fetch_whole("index.zri")
        layout = _layout(header)
        self.etags: dict[str, str | None] = {"header.zrh": header_etag, "index.zri": index_etag}
        shard_sizes: list[int | None] = []
        if layout is not None:
            for k in range(len(layout[3])):
                head = self.client.head(_shard(k))
                shard_sizes.append(None if head is None else head[0])
                self.etags[_shard(k)] = None if head is None else head[1]
        self.root = self._place(header, index, shard_sizes)
        self.store_path = os.path.join(self.root, "store")
        self._entries(layout, index)

    # -- open ---------------------------------------------------------------------------------

    def _fetch_header(self) -> tuple[bytes, str | None]:
        try:
            return self.client.get("header.zrh")
        except FileNotFoundError:
            if self.client.any_object():
                raise NotPublishedError(f"{self.url} is not a published store: it has objects but no "
                                        "header.zrh, which is uploaded last (an upload in progress or "
                                        "interrupted?)") from None
            raise StoreNotFoundError(f"no store at {self.url}: nothing there") from None

    def _fetch_whole(self, name: str) -> tuple[bytes | None, str | None]:
        try:
            return self.client.get(name)
        except FileNotFoundError:
            return None, None

    def _place(self, header: bytes, index: bytes | None, shard_sizes: list[int | None]) -> str:
        """The mirror folder for these objects: made in a temporary folder beside it and renamed
        into place, so that processes sharing `cache_dir` find it complete or not at all."""
        key = hashlib.sha256("\n".join([self.client.url, *(f"{k}={v}" for k, v in sorted(
            self.etags.items()))]).encode() + header).hexdigest()[:32]
        base = self.options["cache_dir"]
        if base is None:
            self._private = tempfile.TemporaryDirectory(prefix="zrecord-remote-")
            base = self._private.name
        os.makedirs(base, exist_ok=True)
        final = os.path.join(base, key)
        if os.path.isfile(os.path.join(final, "store", "header.zrh")):
            with open(os.path.join(final, "store", "header.zrh"), "rb") as f:
                if f.read() == header:
                    return final
            shutil.rmtree(final, ignore_errors=True)
        tmp = os.path.join(base, f".{key}.{uuid.uuid4().hex[:8]}.tmp")
        store = os.path.join(tmp, "store")
        os.makedirs(store)
        try:
            if index is not None:
                _write(os.path.join(store, "index.zri"), index)
            for k, size in enumerate(shard_sizes):
                if size is not None:
                    with open(os.path.join(store, _shard(k)), "wb") as f:
                        f.truncate(size)
            _write(os.path.join(store, "header.zrh"), header)
            try:
                os.rename(tmp, final)
            except OSError:  # another process placed it first
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final

    def _entries(self, layout: tuple[int, int, int, list[int]] | None, index: bytes | None) -> None:
        """Where each record lies, from the mirror's index.zri, and the presence bits."""
        self._offsets = self._sizes = self._shards = np.empty(0, np.uint64)
        self._present: np.ndarray = np.zeros(0, np.uint8)
        self._gap = 0
        if layout is None or index is None:
            return  # the native open fails on these files and says why
        records, entry, _, self._shard_sizes = layout
        if records == 0 or entry < 16 or len(index) != records * entry:
            return
        # Views into the mirror's index.zri (spec §4: offset u64 at 0, stored_size u32 at 8, shard
        # u8 at 12 of each entry), not copies: the page cache holds them once for the host.
        table = np.memmap(os.path.join(self.store_path, "index.zri"), np.uint8, "r")
        field = {"offsets": ("<u8", 0), "sizes": ("<u4", 8), "shards": ("u1", 12)}
        views = {name: np.ndarray((records,), dtype, buffer=table, offset=at, strides=(entry,))
                 for name, (dtype, at) in field.items()}
        self._offsets, self._sizes, self._shards = views["offsets"], views["sizes"], views["shards"]
        bits = os.path.join(self.root, "present.bits")
        with open(bits, "ab") as f:
            if f.tell() < (records + 7) // 8:
                f.truncate((records + 7) // 8)
        self._present = np.memmap(bits, np.uint8, "r+", shape=((records + 7) // 8,))
        gap = self.options["gap_bytes"]
        self._gap = int(gap) if gap != "auto" else min(GAP_AUTO_MAX, int(self._sizes.mean()))
        if self.options["cache_bytes"] is not None:
            paths = [os.path.join(self.store_path, _shard(k)) for k in range(len(self._shard_sizes))]
            self._budget = Budget(self.root, [p if os.path.exists(p) else None for p in paths],
                                  self._shard_sizes, (self._offsets, self._sizes, self._shards),
                                  self._present, self.options["cache_bytes"], self._fd)
            self._budget.check()  # a mirror left larger by an earlier reader or budget

    def relabel(self, exc: ZrecordError) -> ZrecordError:
        """`exc` with the mirror's path in its message replaced by the URL."""
        local = self.store_path
        if isinstance(exc, OSError) and exc.strerror:
            exc.strerror = exc.strerror.replace(local, self.url)
        elif exc.args and isinstance(exc.args[0], str):
            exc.args = (exc.args[0].replace(local, self.url), *exc.args[1:])
        return exc

    # -- gathers ------------------------------------------------------------------------------

    def read(self, idx: np.ndarray, gather: Callable[[np.ndarray], _T]) -> _T:
        """`gather(idx)` over the mirror, after fetching what it lacks; a record that fails its
        checksum there is fetched again (module docstring). ClosedError once close() has begun."""
        self._adopt()
        with self._unless_closed():
            return self._read(idx, gather)

    def _read(self, idx: np.ndarray, gather: Callable[[np.ndarray], _T]) -> _T:
        before = self._punch_word()
        self.ensure(idx)
        chunks = None
        if self._budget is not None:
            # After every gather's fetches, and after those its prefetches made for it.
            chunks = self._budget.chunks_of(np.asarray(idx, dtype=np.int64))
            self._budget.check(keep=chunks)
        refetched: dict[int, int] = {}
        while True:
            try:
                result = gather(idx)
            except ChecksumError as exc:
                rec = exc.record
                # Once for bytes that were bad before (a damaged or half-written mirror), and
                # once for each punch since the read began, by any reader of the mirror: each
                # damages a record at most once (_mirror_cache's module docstring).
                allowed = min(_REFETCHES_MAX, 1 + punches_since(before, self._punch_word()))
                if rec is None or refetched.get(rec, 0) >= allowed:
                    raise self.relabel(exc) from None
                refetched[rec] = refetched.get(rec, 0) + 1
                # What an eviction took since has lost its bit and comes back with the rest;
                # the failed record is fetched whatever its bit says.
                self.ensure(idx)
                self.ensure(np.array([rec], np.uint64), force=True)
                continue
            except ZrecordError as exc:
                raise self.relabel(exc) from None
            if self._budget is not None and chunks is not None:
                self._budget.touch(chunks)
            return result

    def _punch_word(self) -> int:
        """The mirror's punch word (_mirror_cache): this reader's budget's, else that of the
        readers with a budget that share the mirror, else 0 (a private mirror, no budget)."""
        if self._budget is not None:
            return self._budget.punch_word()
        if self.options["cache_dir"] is None:
            return 0
        if self._shared_punches is None:
            self._shared_punches = PunchWord(self.root)
        return self._shared_punches()

    def ensure(self, idx: np.ndarray, *, force: bool = False) -> None:
        """Fetch the records of `idx` that the mirror does not hold (all of them with `force`),
        after waiting for the prefetches under way that fetch any of them."""
        self._adopt()
        recs = self._missing(idx, force=force)
        if recs.shape[0] == 0:
            return
        if not force and self._wait_prefetches(recs):
            recs = self._missing(recs)
        runs = self._runs(recs)
        if not runs:
            return
        self._submit(runs).result()

    def prefetch(self, idx: np.ndarray) -> None:
        """Start fetching the records of `idx` that the mirror lacks and no prefetch is fetching
        (of the first PREFETCH_RECORDS_MAX positions, the lowest-numbered records up to
        PREFETCH_BYTES_MAX stored bytes), without waiting. ClosedError once close() has begun."""
        self._adopt()
        with self._unless_closed():
            self._prefetch(idx)

    def _prefetch(self, idx: np.ndarray) -> None:
        recs = self._missing(idx[:PREFETCH_RECORDS_MAX])
        if recs.shape[0] == 0:
            return
        with self._lock:
            self._pending = [(r, f) for r, f in self._pending if not f.done()]
            busy = [r for r, _ in self._pending]
        if busy:
            recs = recs[~np.isin(recs, np.concatenate(busy))]
        recs = recs[np.cumsum(self._sizes[recs], dtype=np.uint64) <= PREFETCH_BYTES_MAX]
        runs = self._runs(recs)
        if not runs:
            return
        future = self._submit(runs)
        with self._lock:
            self._pending.append((recs, future))

    def _submit(self, runs: list[tuple[int, int, int, np.ndarray]]) -> concurrent.futures.Future[None]:
        """Start `_fetch_runs(runs)` on the event loop; ClosedError once close() has begun.
        Under the lock that close() takes to begin: every fetch started before close() is
        queued on the loop before the cancellation close() queues, so none outlives it (nor
        leaves its waiter waiting on a loop that has stopped)."""
        with self._lock:
            if self._closed:
                raise self._closed_error()
            return asyncio.run_coroutine_threadsafe(self._fetch_runs(runs), self._loop())

    @contextlib.contextmanager
    def _unless_closed(self) -> Iterator[None]:
        """What fails in the block once close() has begun raised as ClosedError: a fetch that
        close() cancelled (CancelledError), or the arrays close() emptied under a gather."""
        try:
            yield
        except Exception as exc:
            if not self._closed or isinstance(exc, ClosedError):
                raise
            raise self._closed_error() from None

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"the store {self.url!r} is closed")

    def _adopt(self) -> None:
        """In a process forked from the one that used this mirror last (os.fork(), 'fork'
        workers), first drop what belongs to the parent: its event loop (whose thread is not
        here: a fetch queued on it would wait forever), its prefetches (they run and end in the
        parent), a lock one of its threads may have held, its budget's eviction lock, and its
        client (whose connections are the parent's sockets): this process makes its own on
        first use. A private mirror stays the parent's to remove."""
        if self.client.pid == os.getpid():
            return
        with _adopting:
            if self.client.pid == os.getpid():
                return
            self._lock = threading.Lock()
            self._event_loop = None
            self._thread = None
            self._slots = None
            self._pending = []
            if self._budget is not None:
                self._budget.after_fork()
            if self._private is not None:
                # TemporaryDirectory removes the folder by a weakref.finalize (CPython's
                # _finalizer), which would run when this process drops it or exits.
                finalizer = getattr(self._private, "_finalizer", None)
                if finalizer is not None:
                    finalizer.detach()
                self._private = None
            self.client = _Client(self.client.url, self.options)

    def _wait_prefetches(self, recs: np.ndarray) -> bool:
        """Wait for the prefetches under way that fetch any of `recs`; whether there were any.
        Their failures are left to the caller, which fetches what is still missing."""
        with self._lock:
            waits = [f for r, f in self._pending if not f.done() and np.isin(recs, r).any()]
        for future in waits:
            with contextlib.suppress(Exception):
                future.result()
        return bool(waits)

    def _missing(self, idx: np.ndarray, *, force: bool = False) -> np.ndarray:
        """The distinct valid records of `idx` with bytes that the mirror does not hold (all of
        them with `force`); empty records are marked held on the way."""
        if self._present.shape[0] == 0 or idx.shape[0] == 0:
            return np.empty(0, np.int64)
        recs = np.unique(idx.astype(np.int64))
        recs = recs[(recs >= 0) & (recs < self._offsets.shape[0])]
        if not force:
            recs = recs[(self._present[recs >> 3] >> (recs & 7).astype(np.uint8)) & 1 == 0]
        empty = self._sizes[recs] == 0
        self._mark(recs[empty])
        out: np.ndarray = recs[~empty]
        return out

    def _runs(self, recs: np.ndarray) -> list[tuple[int, int, int, np.ndarray]]:
        """(shard, start, end, records) of each ranged GET: records sorted by place, neighbours
        whose gap is at most gap_bytes joined while the request stays within request_bytes_max."""
        shards, offsets, sizes = self._shards[recs], self._offsets[recs], self._sizes[recs]
        order = np.lexsort((offsets, shards))
        recs, shards, offsets, ends = recs[order], shards[order], offsets[order], offsets[order] + sizes[order]
        for k in np.unique(shards).tolist():
            if k >= len(self._shard_sizes) or int(ends[shards == k].max()) > self._shard_sizes[k]:
                raise CorruptStoreError(f"{self.url}: index.zri places a record past the end of "
                                        f"{_shard(int(k))}")
        gap, most = self._gap, int(self.options["request_bytes_max"])
        runs = []
        first = 0
        for i in range(1, recs.shape[0] + 1):
            if (i == recs.shape[0] or shards[i] != shards[first] or int(offsets[i]) > int(ends[i - 1]) + gap
                    or int(ends[i]) - int(offsets[first]) > most):
                runs.append((int(shards[first]), int(offsets[first]), int(ends[first:i].max()), recs[first:i]))
                first = i
        return runs

    async def _fetch_runs(self, runs: list[tuple[int, int, int, np.ndarray]]) -> None:
        """Every run's GET, at most max_in_flight of this reader's at once; the first failure
        cancels the rest and is raised."""
        tasks = [asyncio.ensure_future(self._fetch_run(*run)) for run in runs]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()

    async def _fetch_run(self, shard: int, start: int, end: int, recs: np.ndarray) -> None:
        name = _shard(shard)
        assert self._slots is not None
        async with self._slots:
            data = await self.client.get_range(name, start, end, self.etags.get(name))
        os.pwrite(self._fd(shard), data, start)
        if self._budget is not None:
            self._budget.wrote(shard, start, start + len(data))
        with self._lock:
            self.requests += 1
            self.bytes_fetched += len(data)
        self._mark(recs)

    def _mark(self, recs: np.ndarray) -> None:
        if recs.shape[0]:
            np.bitwise_or.at(self._present, recs >> 3, (1 << (recs & 7)).astype(np.uint8))

    def _fd(self, shard: int) -> int:
        with self._lock:
            fd = self._fds.get(shard)
            if fd is None:
                fd = self._fds[shard] = os.open(os.path.join(self.store_path, _shard(shard)), os.O_WRONLY)
            return fd

    def _loop(self) -> asyncio.AbstractEventLoop:
        """The reader's event loop, in a daemon thread of its own, started on first use; the
        caller holds the lock."""
        if self._event_loop is None:
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                self._slots = asyncio.Semaphore(int(self.options["max_in_flight"]))
                started.set()
                loop.run_forever()
                loop.close()

            self._thread = threading.Thread(target=run, name="zrecord-fetch", daemon=True)
            self._thread.start()
            started.wait()
            self._event_loop = loop
        return self._event_loop

    def stats(self) -> dict[str, int]:
        """Ranged GETs made for gathers so far and the bytes they brought; with a budget, the
        bytes the mirror holds now and those this reader's evictions freed."""
        self._adopt()
        with self._lock:
            out = {"requests": self.requests, "bytes": self.bytes_fetched}
        if self._budget is not None:
            out.update(cache_bytes=self._budget.used(), evicted_bytes=self._budget.evicted_bytes,
                       evictions=self._budget.evictions())
        return out

    def close(self) -> None:
        self._adopt()
        with self._lock:
            self._closed = True
            loop, self._event_loop = self._event_loop, None
            fds, self._fds = self._fds, {}
            self._pending = []
        if loop is not None:
            # Fetches still under way (prefetches, and gathers racing this close) are cancelled,
            # and end, before their files close; their waiters get ClosedError (_submit).
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_tasks(), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join()
        for fd in fds.values():
            os.close(fd)
        if self._budget is not None:
            self._budget.close()
            self._budget = None
        self._present = np.zeros(0, np.uint8)
        self._offsets = self._sizes = self._shards = np.empty(0, np.uint64)
        if self._private is not None:
            self._private.cleanup()
            self._private = None


async def _cancel_tasks() -> None:
    """Cancel every other task of the running loop and wait until they have ended."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _shard(k: int) -> str:
    return f"data-{k:03d}.zrd"


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
