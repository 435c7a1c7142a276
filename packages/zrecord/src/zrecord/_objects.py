"""The object client: one store's objects in a bucket (``s3://``) or on a web server
(``http(s)://``), through obstore, and the settings of ``storage_options``.

A :class:`Client` makes whole GETs, HEADs, listings, ranged GETs with ``If-Match`` and puts for
one store's prefix; the mirror (``_remote``) and the publisher (``_publish``) do their I/O
through it, and nothing else here knows the format. :func:`storage_settings` judges
``storage_options`` once into a :class:`StorageSettings`, which the client, the mirror and the
publisher read.

Invariants of this module:
- Messages name the URL and the object, never a credential, user information or a query
  string (``redact``, ``scrub``); obstore's errors become zrecord's (``Client._translate``).
- Until a server has answered a client once, a request goes first without retries: a host that
  cannot be reached, or credentials that cannot be had, fail at once with what to do
  (``Client._request``), not after the retries meant for a server that is restarting.
- fork(): obstore's client does not work in a process forked after it ran; a request there
  raises :class:`~zrecord.errors.RemoteError` saying so and how to start workers instead,
  never waits forever (``_client_runs``).
- ``storage_options`` takes exactly the keys of ``zrecord.StorageOptions`` (``DEFAULTS`` and
  ``_S3_KEYS``); an unknown key or a value out of range is a ValueError naming it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno as _errno
import os
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any, Literal, TypeGuard, TypeVar

from zrecord._cost import Link, link_of
from zrecord._mirror_cache import parse_budget
from zrecord._types import PathLike
from zrecord.errors import ClosedError, RemoteError, StoreChangedError

SCHEMES = ("s3://", "http://", "https://")
# Requests in flight per reader (and the uploads' share) without a link to size them from.
MAX_IN_FLIGHT_DEFAULT = 64

# Tuning keys of `storage_options` and their defaults; every other key configures the client.
DEFAULTS: dict[str, Any] = {
    # "auto": MAX_IN_FLIGHT_DEFAULT, or with a link the requests its rate and latency keep
    # busy (Link.in_flight of the store's mean record).
    "max_in_flight": "auto",
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
    # The request cost model's link (zrecord.LINKS or a Link): with it, "auto" gap_bytes is
    # the gap that costs less than a request (Link.join_gap).
    "link": None,
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
        # The extra's requirement itself, not `zrecord[remote]`: right wherever zrecord came
        # from (a clone, a wheelhouse), and kept equal to the extra's by the wheelhouse session.
        raise ImportError("reading stores over s3:// and http(s):// needs the obstore client "
                          "(zrecord's remote extra): pip install 'obstore>=0.12.1,<0.13'") from None
    return obstore


def _interruptible(call: Callable[[], _T]) -> _T:
    """`call()`, a blocking request of the object storage client, on a thread of its own when
    this is the main thread, which waits for it in steps: Python handles Ctrl-C on the main
    thread only, between its own instructions, and a request to a server that accepts and
    never answers held the main thread (and Ctrl-C) for the client's timeout, 28 s measured.
    The request goes on to its end on its thread (a daemon, which never holds the exit)."""
    if threading.current_thread() is not threading.main_thread():
        return call()
    result: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            result.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            result.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="zrecord-request", daemon=True).start()
    while not done.wait(_WAIT_STEP_S):
        pass
    ok, value = result[0]
    if not ok:
        raise value
    out: _T = value
    return out


# How often the main thread, waiting for a request, lets Python see a Ctrl-C (_interruptible).
_WAIT_STEP_S = 0.1


class Client:
    """One store's objects through obstore: whole gets, heads, listings, ranged gets with
    If-Match, and puts."""

    def __init__(self, url: str, settings: StorageSettings, *, answered: bool = False) -> None:
        # A URL that names no bucket or host, or does not parse, is refused before the client
        # is even imported: the mistake is the URL, whatever is installed.
        bucket, prefix = _checked_url(url)
        obstore = _import_obstore()
        from obstore.store import HTTPStore, S3Store

        self._obstore = obstore
        # The process that made this client: a forked child makes its own (Mirror._adopt).
        self.pid = os.getpid()
        self.url = url.rstrip("/")
        self.shown = redact(self.url)
        self.bucket = bucket
        # Plain dicts for obstore's TypedDicts (RetryConfig, ClientConfig, S3Config).
        retry: Any = {"max_retries": settings.retries,
                      "backoff": {"init_backoff": timedelta(milliseconds=100),
                                  "max_backoff": timedelta(seconds=5), "base": 2.0},
                      "retry_timeout": timedelta(seconds=settings.retry_timeout_s)}
        client: Any = {"timeout": timedelta(seconds=settings.timeout_s),
                       "connect_timeout": timedelta(seconds=settings.connect_timeout_s)}
        # Whether the server (or the credential service) has answered this client once: until
        # then, a request goes first without retries (_request).
        self.answered = answered
        # Requests made (each obstore call one, whatever its retries) and bytes downloaded by
        # the calls of this class and Mirror's open: what opening cost (Mirror.stats).
        # Threads count through `count` (one lock): `+=` on an attribute is three steps, and
        # threads that run at once (a free-threaded CPython) would lose counts between them.
        self.requests = 0
        self.bytes = 0
        self._counting = threading.Lock()
        # Where credentials were looked for, for the message when none were found (None where
        # some were, or none are needed).
        self.looked_in: str | None = None
        self.endpoint: str | None = None
        try:
            if bucket is not None:
                config: Any = {_S3_KEYS[key]: value for key, value in settings.client.items()}
                config.update(_profile_credentials(config))
                endpoint = config.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")
                if endpoint and not config.get("endpoint"):
                    check_endpoint(endpoint, "the environment's AWS_ENDPOINT_URL"
                                   if os.environ.get("AWS_ENDPOINT_URL") else "the environment's AWS_ENDPOINT")
                if endpoint:
                    self.endpoint = redact(str(endpoint))
                    # MinIO-style servers: path-style requests, and plain HTTP when the endpoint is.
                    config.setdefault("virtual_hosted_style_request", False)
                    if str(endpoint).startswith("http://"):
                        client["allow_http"] = True
                self.looked_in = _looked_in(config)
                self.store: Any = S3Store(bucket, prefix=prefix or None, config=config,
                                          client_options=client, retry_config=retry)
                self._first: Any = S3Store(bucket, prefix=prefix or None, config=config,
                                           client_options=client, retry_config=_no_retries(retry))
            else:
                client["allow_http"] = self.url.startswith("http://")
                self.store = HTTPStore.from_url(self.url, client_options=client, retry_config=retry)
                self._first = HTTPStore.from_url(self.url, client_options=client,
                                                 retry_config=_no_retries(retry))
        except BaseException as exc:
            if not isinstance(exc, (ValueError, obstore.exceptions.BaseError)) and not _is_panic(exc):
                raise
            # Settings the client refuses (an unknown key, an endpoint that is no URL): the
            # caller's input, said with the URL and never with the settings' values.
            raise ValueError(f"{self.shown}: the object storage client refuses these settings: "
                             f"{_first_line(exc)}") from None

    def close(self) -> None:
        """Let go of the connections (each obstore store keeps a pool of them open, idle):
        a request after this raises ClosedError."""
        self.store = self._first = None

    def _open_store(self) -> Any:
        """The obstore store requests go through; ClosedError after close()."""
        if self.store is None:
            raise ClosedError(f"{self.shown}: the store was closed")
        return self.store

    def count(self, *, requests: int = 0, nbytes: int = 0) -> None:
        """Add to the client's counts of requests and bytes downloaded (any thread)."""
        with self._counting:
            self.requests += requests
            self.bytes += nbytes

    def where(self, name: str) -> str:
        return f"{self.shown}/{name}" if name else self.shown

    def get(self, name: str) -> tuple[bytes, str | None]:
        """The whole object `name` and its ETag; FileNotFoundError when there is none."""
        result = self._request(name, lambda store: self._obstore.get(store, name))
        data = bytes(self._call(name, result.bytes))
        self.count(nbytes=len(data))
        return data, result.meta.get("e_tag")

    def get_stream(self, name: str, options: Mapping[str, Any] | None = None) -> Any:
        """obstore's answer to one GET of object `name` with `options` (range, if_match), whose
        body the caller reads in pieces inside ``errors(name)``: one request, counted.
        FileNotFoundError when there is no such object."""
        return self._request(name, lambda store: self._obstore.get(store, name, options=dict(options or {})))

    def head(self, name: str) -> tuple[int, str | None] | None:
        """(size, ETag) of object `name`, or None when there is none."""
        try:
            meta = self._request(name, lambda store: self._obstore.head(store, name))
        except FileNotFoundError:
            return None
        return int(meta["size"]), meta.get("e_tag")

    def listed(self, most: int, after: str | None = None) -> list[str]:
        """The names (below the store's prefix) of at most `most` objects under it, in the
        server's order (S3: by name), only those after `after` when given: one listing
        request."""
        return [name for name, _ in self.listed_sizes(most, after)]

    def listed_sizes(self, most: int, after: str | None = None) -> list[tuple[str, int]]:
        """`listed`, with each object's size in bytes."""
        def first(store: Any) -> list[tuple[str, int]]:
            for chunk in self._obstore.list(store, offset=after, chunk_size=most):
                return [(str(meta["path"]), int(meta["size"])) for meta in chunk[:most]]
            return []
        return self._request("", first)

    def _request(self, name: str, fn: Callable[[Any], _T]) -> _T:
        """`fn(store)`, one request for object `name`, with obstore's errors as zrecord's.

        Until the server has answered this client once, the request goes first without
        retries: a connection refused, a name that does not resolve, or credentials that
        cannot be had then fail at once (_unreachable, _no_credentials), not after the retries
        meant for a server that is restarting (about 40 s). Any other failure of that first try
        (a timeout, a 5xx, a connection reset) is tried again with the retries. Once the server
        has answered, a refused connection is a restart, and is waited for as the rest."""
        # Read once: a close() racing this request leaves these two as they were here.
        first, store = self._first, self._open_store()
        self.count(requests=1)
        with self.errors(name):
            if not self.answered:
                try:
                    out = _interruptible(lambda: fn(first))
                except Exception as exc:
                    fast = self._no_credentials(exc) or self._unreachable(name, exc)
                    if fast is not None:
                        raise fast from None
                    if isinstance(exc, self._obstore.exceptions.BaseError) and \
                            type(exc) is not self._obstore.exceptions.GenericError:
                        self.answered = True  # an answer (not found, denied, ...)
                    if self.answered or not isinstance(exc, self._obstore.exceptions.BaseError):
                        raise
                else:
                    self.answered = True
                    return out
                self.count(requests=1)
            out = _interruptible(lambda: fn(store))
            self.answered = True
            return out

    async def get_range(self, name: str, start: int, end: int, etag: str | None) -> tuple[memoryview, int, str | None]:
        """Bytes [start, end) of object `name`, which must still have ETag `etag` (when not
        None), with the object's size and ETag as the answer gives them: a coroutine, so that
        one event loop keeps hundreds of requests in flight without a thread each. The bytes
        are a view of the client's buffer, not a copy (a copy of every answer cost 3% of the
        rate of uniform random photographs over the fast server)."""
        options: dict[str, Any] = {"range": (start, end)}
        if etag is not None:
            options["if_match"] = etag
        with self.errors(name):
            result = await self._obstore.get_async(self._open_store(), name, options=options)
            data = memoryview(await result.bytes_async())
        if len(data) != end - start:
            why = ("the object is shorter than at open (truncated or replaced)" if len(data) < end - start
                   else "the server does not answer Range requests (it sent more)")
            raise StoreChangedError(_errno.EIO, f"{self.where(name)}: asked for bytes {start}-{end - 1} "
                                    f"and got {len(data)} bytes: {why}")
        return data, int(result.meta["size"]), result.meta.get("e_tag")

    def any_object(self) -> bool:
        """Whether anything lies under the store's prefix (S3: a listing; HTTP: index.zri or the
        first shard answer a HEAD)."""
        if self.url.startswith("s3://"):
            return bool(self.listed(1))
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
        with self.errors(name):
            try:
                result = self._obstore.put(self._open_store(), name, data, mode=mode,
                                           use_multipart=multipart, chunk_size=part_bytes)
            except (self._obstore.exceptions.PreconditionError, FileNotFoundError):
                if if_match is None:
                    raise
                raise StoreChangedError(_errno.ESTALE, f"{self.where(name)} was not replaced: it "
                                        f"is no longer the version {if_match} (another writer "
                                        "replaced or removed it)") from None
        etag = result.get("e_tag")
        return None if etag is None else str(etag)

    def _unreachable(self, name: str, exc: Exception) -> RemoteError | None:
        """The error for `exc`, a request for object `name`, when it says that the server's host cannot be reached at all (a
        connection refused, a name that does not resolve, no route to it), naming the host,
        the cause and where the address comes from; None for any other failure."""
        text = str(exc)
        if "dns error" in text:
            detail = re.search(r'dns error.*?error: "([^"]+)"', text, re.S)
            cause = "its name does not resolve" + (f" ({detail.group(1)})" if detail else "")
            code = _errno.EHOSTUNREACH
        elif "ConnectionRefused" in text or "Connection refused" in text:
            cause, code = "connection refused: nothing listens at that address", _errno.ECONNREFUSED
        elif "NetworkUnreachable" in text or "HostUnreachable" in text:
            cause, code = "no route to it (network or host unreachable)", _errno.EHOSTUNREACH
        else:
            return None
        if self.bucket is None:
            hint = "check the URL's host and port"
        elif self.endpoint is not None:
            hint = (f"is the endpoint {self.endpoint} right (storage_options['endpoint_url'], the "
                    "CLI's --endpoint-url, or AWS_ENDPOINT_URL) and its server running?")
        else:
            hint = ("for an S3-compatible server (MinIO, Ceph, R2, ...) give its address: "
                    "storage_options={'endpoint_url': 'http://HOST:PORT'}, the CLI's "
                    "--endpoint-url, or AWS_ENDPOINT_URL")
        return RemoteError(code, f"{self.where(name)}: the request failed: cannot reach "
                           f"{_host_of(text) or 'the server'}: {cause} (not retried, as the server "
                           f"never answered this client); {hint}")

    def _no_credentials(self, exc: Exception) -> RemoteError | None:
        """The error for `exc` when it is the failure of the last place credentials are looked
        for, the instance metadata service, by a client that found none elsewhere; None for
        any other failure. Says where they were looked for and how to give them."""
        text = str(exc)
        if self.looked_in is None or not re.search(r"/latest/(api/token|meta-data/)", text):
            return None
        status = re.search(r"status(?: code)?:? (\d{3})", text)
        cause = ("connection refused" if "ConnectionRefused" in text or "Connection refused" in text
                 else "its name does not resolve" if "dns error" in text
                 else "timed out" if "timed out" in text.lower() or "Timeout" in text
                 else f"it answered HTTP {status.group(1)}" if status else _first_line(exc))
        return RemoteError(_errno.EACCES, f"no credentials found for {self.shown} (looked in: "
                           f"{self.looked_in}, and the instance metadata service at "
                           f"{_host_of(text) or 'its address'}: {cause}). Give them as the "
                           "environment variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                           "(what a command line reads), in ~/.aws/credentials (AWS_PROFILE "
                           "picks the profile), or in Python as storage_options="
                           "{'aws_access_key_id': ..., 'aws_secret_access_key': ...}; a public "
                           "bucket reads without them with storage_options={'skip_signature': "
                           "True}")

    def _call(self, name: str, fn: Callable[[], _T]) -> _T:
        """`fn()`, with obstore's errors as zrecord's (`errors`)."""
        with self.errors(name):
            return fn()

    @contextlib.contextmanager
    def errors(self, name: str) -> Iterator[None]:
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
        if "NoSuchBucket" in str(exc):
            # Not a FileNotFoundError (obstore's is one): every caller reads that as "no such
            # object", and a publisher would go on writing to a bucket that is not there.
            return RemoteError(_errno.ENOENT, f"{self.shown}: the bucket {self.bucket!r} does not "
                               "exist (create it first, or check the URL, the endpoint and the "
                               "region)")
        if isinstance(exc, FileNotFoundError) or not isinstance(exc, exc_mod.BaseError):
            return exc
        no_credentials = self._no_credentials(exc)
        if no_credentials is not None:
            return no_credentials
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


def _first_line(exc: BaseException) -> str:
    """The first line of a client error, without what could hold a secret: user information
    and query strings of the URLs in it."""
    text = str(exc).strip().splitlines()
    return scrub(text[0][:400] if text else type(exc).__name__)


def scrub(text: str) -> str:
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
                             f"got {scrub(url)!r}, which names no bucket")
        if not all("!" <= c <= "~" for c in bucket):
            # A space or a control character: the client's first request would panic on it.
            raise ValueError(f"the bucket {bucket!r} of {scrub(url)!r} holds a character that no "
                             "bucket name has (a space, a control or a non-ASCII character)")
        return bucket, prefix.rstrip("/")
    try:
        parts = urllib.parse.urlsplit(url)
        host, _ = parts.hostname, parts.port  # .port raises on a port that is no number
    except ValueError as exc:
        raise ValueError(f"{scrub(url)!r} is not a valid URL: {exc}") from None
    if not host:
        raise ValueError(f"an {parts.scheme}:// URL names a host, {parts.scheme}://HOST/PATH; "
                         f"got {scrub(url)!r}, which names no host")
    return None, ""


def _is_panic(exc: BaseException) -> bool:
    """Whether `exc` is pyo3's PanicException (a panic in Rust code, such as obstore's)."""
    return type(exc).__name__ == "PanicException" and not isinstance(exc, Exception)


def _no_retries(retry: Mapping[str, Any]) -> Any:
    """`retry` (obstore's RetryConfig) with no retries: a client's first request (_request)."""
    return {**retry, "max_retries": 0}


def _host_of(text: str) -> str | None:
    """The scheme, host and port of the URL a client error names ("Error performing HEAD
    http://host:port/..."), None where it names none: never its path, user or query."""
    found = re.search(r"(https?://[^\s/]+)", text)
    if found is None:
        return None
    shown = redact(found.group(1))
    return None if "does not parse" in shown else shown


def _credential_files() -> list[tuple[str, str]]:
    """The shared files AWS's tools read credentials from, and the section of each that the
    profile (AWS_PROFILE, else default) is in."""
    profile = os.environ.get("AWS_PROFILE", "default")
    return [(os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), profile),
            (os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"),
             profile if profile == "default" else f"profile {profile}")]


# Environment variables that give obstore credentials, or a way to get them, before it asks the
# instance metadata service (object_store's AmazonS3Builder::build, in its order): keys, a web
# identity token (with AWS_ROLE_ARN), a container's credentials service.
_CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE",
                         "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                         "AWS_CONTAINER_CREDENTIALS_FULL_URI")


def _looked_in(config: Mapping[str, Any]) -> str | None:
    """Where credentials were looked for, said for a message (names only, never a value),
    when the instance metadata service is the only place left to get them from; None where
    `config` (storage_options and the shared files) or the environment gives them, or none are
    needed (skip_signature)."""
    if config.get("skip_signature") or config.get("access_key_id"):
        return None
    if any(os.environ.get(name) for name in _CREDENTIAL_VARIABLES):
        return None
    if str(os.environ.get("AWS_SKIP_SIGNATURE", "")).lower() in ("1", "true"):
        return None
    files = " and ".join(f"{path} [{section}]" for path, section in _credential_files())
    return ("storage_options (aws_access_key_id, aws_secret_access_key), the environment ("
            + ", ".join(_CREDENTIAL_VARIABLES) + f"), the shared files {files}")


def _profile_credentials(config: Mapping[str, Any]) -> dict[str, Any]:
    """Keys and region from ~/.aws/credentials and ~/.aws/config (AWS_PROFILE, else default)
    where neither `config` nor the environment gives them: what AWS's own tools would use."""
    if "access_key_id" in config or os.environ.get("AWS_ACCESS_KEY_ID"):
        return {}
    import configparser

    found: dict[str, Any] = {}
    for path, section in _credential_files():
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


@dataclasses.dataclass(frozen=True)
class StorageSettings:
    """``storage_options`` judged, with the defaults filled in (`storage_settings`): what the
    client, the mirror and the publisher read. The keys and their meaning: ``zrecord.StorageOptions``."""

    max_in_flight: int | Literal["auto"]
    gap_bytes: int | Literal["auto"]
    request_bytes_max: int
    timeout_s: float
    connect_timeout_s: float
    retries: int
    retry_timeout_s: float
    cache_dir: PathLike | None
    cache_bytes: int | None
    link: Link | None
    # The client's keys that were given (endpoint, region, credentials, skip_signature), by the
    # names of storage_options.
    client: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def storage_settings(storage_options: Mapping[str, Any] | None) -> StorageSettings:
    """`storage_options` judged (module docstring): unknown keys, and values of the wrong type
    or out of range, are a ValueError naming the key and the value."""
    if storage_options is not None and not isinstance(storage_options, Mapping):
        # "abc" failed in dict() with "dictionary update sequence element #0 ...".
        raise TypeError(f"storage_options must be a dict of option names to values, or None; got "
                        f"{type(storage_options).__name__}")
    given = dict(storage_options or {})
    unknown = [key for key in given if key not in DEFAULTS and key not in _S3_KEYS]
    if unknown:
        known = ", ".join(sorted([*DEFAULTS, *_S3_KEYS]))
        raise ValueError(f"unknown storage option {unknown[0]!r}; known: {known}")
    for key in _S3_KEYS:
        value = given.get(key)
        wanted = bool if key == "skip_signature" else str
        if value is not None and not isinstance(value, wanted):
            # Its value is never shown: it may be a secret.
            raise ValueError(f"storage option {key} must be a {wanted.__name__}; got type "
                             f"{type(value).__name__}")
    if given.get("endpoint_url") is not None:
        check_endpoint(given["endpoint_url"], "storage option endpoint_url")
    options = {**DEFAULTS, **{k: v for k, v in given.items() if k in DEFAULTS}}
    gap = options["gap_bytes"]
    return StorageSettings(
        max_in_flight="auto" if options["max_in_flight"] == "auto"
        else _whole(options, "max_in_flight", 1, "'auto' or "),
        gap_bytes="auto" if gap == "auto" else _whole(options, "gap_bytes", 0, "'auto' or "),
        request_bytes_max=_whole(options, "request_bytes_max", 1),
        timeout_s=_seconds(options, "timeout_s"),
        connect_timeout_s=_seconds(options, "connect_timeout_s"),
        retries=_whole(options, "retries", 0),
        retry_timeout_s=_seconds(options, "retry_timeout_s"),
        cache_dir=_cache_dir(options["cache_dir"]),
        cache_bytes=parse_budget(options["cache_bytes"]),
        link=None if options["link"] is None else _link(options["link"]),
        client={k: v for k, v in given.items() if k in _S3_KEYS and v is not None},
    )


def _whole(options: Mapping[str, Any], key: str, least: int, other: str = "") -> int:
    """Storage option `key`, a whole number of at least `least` (or what `other` names)."""
    value = options[key]
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or isinstance(value, bool) or number != value or number < least:
        raise ValueError(f"storage option {key} must be {other}at least {least}; got {value!r}")
    return number


def _link(value: Any) -> Link:
    """Storage option ``link``: a Link, or the name of one of ``zrecord.LINKS``."""
    try:
        return link_of(value)
    except ValueError as exc:
        raise ValueError(f"storage option link: {exc}") from None


def _seconds(options: Mapping[str, Any], key: str) -> float:
    """Storage option `key`, a number of seconds above 0 and at most _SECONDS_MAX."""
    value = options[key]
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = 0.0
    if isinstance(value, bool) or not 0 < seconds <= _SECONDS_MAX:
        raise ValueError(f"storage option {key} must be a number of seconds above 0 and at most "
                         f"{_SECONDS_MAX:,} (a year); got {value!r}")
    return seconds


# The longest time a storage option gives: a year (a larger one, or infinity, overflowed the
# client's durations with an OverflowError that named no option).
_SECONDS_MAX = 365 * 86400


def _cache_dir(value: Any) -> str | None:
    """Storage option ``cache_dir``: None, or a path (``~`` expanded); not empty, which would
    put the mirror in whatever the working folder is."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, bytes, os.PathLike)):
        raise ValueError(f"storage option cache_dir must be a path (str or os.PathLike) or None; "
                         f"got {value!r}")
    path = os.path.expanduser(os.fsdecode(value))
    if not path:
        raise ValueError("storage option cache_dir must name a folder; got '' (give None for a "
                         "private folder made for each reader, or a path such as "
                         "'~/.cache/zrecord')")
    return path


def check_endpoint(value: str, what: str) -> None:
    """ValueError naming `what` unless `value` is an http:// or https:// URL with a host and
    no spaces (the client's first request would panic on it)."""
    try:
        parts = urllib.parse.urlsplit(value)
        host, _ = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"{what} must be an http:// or https:// URL; got {value!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not host or any(c.isspace() for c in value):
        raise ValueError(f"{what} must be an http:// or https:// URL naming a host, such as "
                         f"http://127.0.0.1:9000; got {value!r}")
