"""Object-storage and HTTP servers on loopback, started by the test session itself.

zrecord's remote reads (stores read over S3 and over plain HTTP by byte range) are tested and
benchmarked against real server processes on 127.0.0.1, not against mocks in the client's own
process:

:class:`S3Server`
    ``moto_server`` (PyPI ``moto[server]``), an in-memory S3 implementation. This package's
    ``s3`` extra depends on it (the ``zrecord`` nox session installs it); when the executable
    is missing the constructor raises :class:`ServerUnavailable` naming
    ``pip install 'moto[server]'``. Tests never skip on it.
:class:`RangeHTTPServer`
    A read-only HTTP/1.1 file server on the standard library, with single-range ``Range``
    support, validators (ETag, Last-Modified) and keep-alive.

:class:`S3Client` is a small S3 client on the standard library (``http.client`` with one
keep-alive connection, path-style addressing, AWS Signature Version 4) so that tests and
benchmarks can create buckets and put and get objects without boto3; boto3 (which moto
depends on) is available through :meth:`S3ServerBase.boto3_client` for checks against an
independent client.

Credentials are dummies. They reach client code only through the objects returned here
(:attr:`S3ServerBase.credentials`, :meth:`S3ServerBase.env`); nothing in this module changes
``os.environ`` or prints a secret key (the :class:`S3Credentials` repr leaves it out).

Server behaviour worth knowing (the first points are checked by tests/test_servers.py):

* moto (5.2): a single range ``a-b``, ``a-`` or ``-n`` answers 206 with ``Content-Range``; a
  range whose start is at or past the end, or ``-0``, answers 416 ``InvalidRange``; a
  multi-range request or an unparsable one answers 200 with the whole object, as S3 does. The
  ETag is the quoted MD5 of the content (replacing an object with the same bytes keeps its
  ETag); ``If-Match`` with another tag answers 412 ``PreconditionFailed``. Quirks: every
  response carries ``Connection: close`` (werkzeug's development server has no keep-alive, so
  each request costs a new TCP connection); a ranged GET copies the whole object inside the
  server (its cost grows with the object's size); ``If-Range`` is ignored; the range unit is
  not checked (``items=0-1`` is served as bytes); a Range value without ``=`` answers 500; on an
  empty object ``bytes=-n`` answers 200, other ranges 416.
* s3rver (npm, 3.7.1), the candidate for benchmarks (files on disk, ~3x moto's request rate
  here); not started by this module yet: keep-alive, and the ETag is the MD5 as on moto, but its
  Range support is broken beyond plain ``a-b`` and ``a-``: ``bytes=-n`` is served as
  ``bytes=0-n``; a last position of 0 is ignored (``bytes=0-0`` sends everything); multi-range,
  ``-0`` and unparsable values answer 206 with the whole object; any range of an empty object
  answers 206 with ``Content-Length: 1`` and no body (a keep-alive client then waits for a
  byte that never comes); ``If-Match`` is ignored.
* RangeHTTPServer: see the class's documentation.

The module is pure standard library at import time (boto3 is imported only when asked for), so
the pytest fixtures (:mod:`zrecord_testkit.pytest_plugin`) and the benchmarks can import it in
any environment, with or without moto installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import email.utils
import hashlib
import hmac
import http.client
import importlib
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, Final

__all__ = [
    "LOOPBACK",
    "HTTPFolder",
    "RangeHTTPServer",
    "RangeNotSatisfiable",
    "RequestRecord",
    "S3Bucket",
    "S3Client",
    "S3Credentials",
    "S3Error",
    "S3Response",
    "S3Server",
    "S3ServerBase",
    "ServerUnavailable",
    "free_port",
    "resolve_range",
    "sign_v4",
]

LOOPBACK: Final = "127.0.0.1"
EMPTY_SHA256: Final = hashlib.sha256(b"").hexdigest()

_log = logging.getLogger(__name__)


class ServerUnavailable(RuntimeError):
    """A server's executable is missing, or the server did not come up."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that nothing listens on at the moment of the call.

    Another process may take it before the caller binds it; the process servers below retry
    with a new port when their server exits before it answers.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------------------------
# AWS Signature Version 4 and a minimal S3 client
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class S3Credentials:
    """Static (dummy) credentials and the region they sign for. The repr omits the secret."""

    access_key_id: str
    secret_access_key: str = dataclasses.field(repr=False)
    region: str = "us-east-1"


def _hmac_sha256(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def _collapse_spaces(value: str) -> str:
    return " ".join(value.split())


def sign_v4(
    method: str,
    url: str,
    headers: Mapping[str, str],
    credentials: S3Credentials,
    *,
    payload_sha256: str = EMPTY_SHA256,
    service: str = "s3",
    now: datetime.datetime | None = None,
) -> dict[str, str]:
    """The headers that sign a request with AWS Signature Version 4 (header form).

    Every header in `headers` is signed, and ``Host`` (taken from `url` when `headers` has
    none). The result holds `headers` plus ``Host``, ``X-Amz-Date``, ``X-Amz-Content-SHA256``
    and ``Authorization``. The path of `url` must already be percent-encoded the way it is sent;
    as S3 wants, it is not normalised nor encoded a second time.
    """
    parts = urllib.parse.urlsplit(url)
    when = (now or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    amz_date = when.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]

    out = dict(headers)
    if not any(name.lower() == "host" for name in out):
        out["Host"] = parts.netloc
    out["X-Amz-Date"] = amz_date
    out["X-Amz-Content-SHA256"] = payload_sha256

    canonical = {name.lower(): _collapse_spaces(value) for name, value in out.items()}
    signed_headers = ";".join(sorted(canonical))
    canonical_headers = "".join(f"{name}:{canonical[name]}\n" for name in sorted(canonical))
    query = sorted(
        (urllib.parse.quote(key, safe="~"), urllib.parse.quote(value, safe="~"))
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    )
    canonical_query = "&".join(f"{key}={value}" for key, value in query)
    canonical_request = "\n".join([
        method.upper(), parts.path or "/", canonical_query, canonical_headers, signed_headers,
        payload_sha256,
    ])
    scope = f"{day}/{credentials.region}/{service}/aws4_request"
    string_to_sign = "\n".join([
        "AWS4-HMAC-SHA256", amz_date, scope,
        hashlib.sha256(canonical_request.encode("utf-8")).hexdigest(),
    ])
    key = _hmac_sha256(("AWS4" + credentials.secret_access_key).encode("utf-8"), day)
    for step in (credentials.region, service, "aws4_request"):
        key = _hmac_sha256(key, step)
    signature = hmac.new(key, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    out["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.access_key_id}/{scope}, "
        f"SignedHeaders={signed_headers}, Signature={signature}"
    )
    return out


@dataclasses.dataclass(frozen=True)
class S3Response:
    """A complete response: status, headers (case-insensitive ``get``) and body."""

    status: int
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def etag(self) -> str | None:
        return self.headers.get("ETag")


class S3Error(Exception):
    """An S3 error response: HTTP status and the ``Code`` and ``Message`` of its XML body."""

    def __init__(self, method: str, target: str, status: int, code: str, message: str) -> None:
        super().__init__(f"{method} {target}: HTTP {status} {code}: {message}".rstrip(": "))
        self.status = status
        self.code = code
        self.message = message


def _error_fields(body: bytes) -> tuple[str, str]:
    if not body:
        return "", ""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return "", body[:200].decode("utf-8", "replace")
    return root.findtext("Code", ""), root.findtext("Message", "")


def _strip_ns(tag: str) -> str:
    return tag.rpartition("}")[2]


class S3Client:
    """A minimal S3 client: one keep-alive HTTP connection, path-style URLs, SigV4 headers.

    Not thread-safe: use one client per thread. A request that finds the kept-alive connection
    closed by the server is sent again once on a new connection.
    """

    def __init__(self, endpoint_url: str, credentials: S3Credentials, *, timeout: float = 60.0) -> None:
        parts = urllib.parse.urlsplit(endpoint_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"only plain http:// endpoints are supported, not {endpoint_url!r}")
        self.endpoint_url = endpoint_url.rstrip("/")
        self.credentials = credentials
        self._netloc = parts.netloc
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        self._used = False

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> S3Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @staticmethod
    def path_for(bucket: str, key: str = "") -> str:
        """The percent-encoded request path of `key` in `bucket` (path-style addressing)."""
        path = "/" + urllib.parse.quote(bucket, safe="")
        if key:
            path += "/" + urllib.parse.quote(key, safe="/")
        return path

    def request(
        self,
        method: str,
        bucket: str = "",
        key: str = "",
        *,
        query: Sequence[tuple[str, str]] = (),
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> S3Response:
        """Send one signed request and read its whole response; never raises on a status."""
        target = self.path_for(bucket, key) if bucket else "/"
        if query:
            target += "?" + urllib.parse.urlencode(list(query), quote_via=urllib.parse.quote)
        payload_hash = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        signed = sign_v4(method, f"http://{self._netloc}{target}", {"Host": self._netloc, **(headers or {})},
                         self.credentials, payload_sha256=payload_hash)
        for attempt in (0, 1):
            reused = self._used
            try:
                self._conn.request(method, target, body=body if (body or method in ("PUT", "POST")) else None,
                                   headers=signed)
                resp = self._conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._conn.close()
                self._used = False
                if attempt == 0 and reused:
                    continue
                raise
            self._used = not resp.will_close
            if resp.will_close:
                self._conn.close()
            return S3Response(resp.status, resp.headers, data)
        raise AssertionError("unreachable")

    def _checked(self, method: str, bucket: str, key: str = "", **kwargs: Any) -> S3Response:
        resp = self.request(method, bucket, key, **kwargs)
        if resp.status >= 300:
            code, message = _error_fields(resp.body)
            if not code and resp.status == 404:
                code = "NoSuchKey" if key else "NoSuchBucket"
            raise S3Error(method, self.path_for(bucket, key), resp.status, code, message)
        return resp

    def create_bucket(self, bucket: str) -> None:
        body = b""
        if self.credentials.region != "us-east-1":
            body = (
                '<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                f"<LocationConstraint>{self.credentials.region}</LocationConstraint>"
                "</CreateBucketConfiguration>"
            ).encode()
        self._checked("PUT", bucket, body=body)

    def delete_bucket(self, bucket: str) -> None:
        self._checked("DELETE", bucket)

    def put_object(self, bucket: str, key: str, data: bytes,
                   *, content_type: str = "application/octet-stream") -> str:
        """Store `data` at `key`; returns the ETag (quotes included) the server gave it."""
        resp = self._checked("PUT", bucket, key, body=bytes(data), headers={"Content-Type": content_type})
        return resp.etag or ""

    def get_object(self, bucket: str, key: str, *, byte_range: str | None = None,
                   headers: Mapping[str, str] | None = None) -> S3Response:
        """GET `key`; `byte_range` is a ``Range`` value such as ``bytes=0-4095``. Raises
        :class:`S3Error` on any status from 300 up (404 ``NoSuchKey``, 416 ``InvalidRange``,
        412 ``PreconditionFailed`` for an ``If-Match`` header, 304 for ``If-None-Match``)."""
        all_headers = dict(headers or {})
        if byte_range is not None:
            all_headers["Range"] = byte_range
        return self._checked("GET", bucket, key, headers=all_headers)

    def head_object(self, bucket: str, key: str) -> S3Response:
        return self._checked("HEAD", bucket, key)

    def delete_object(self, bucket: str, key: str) -> None:
        self._checked("DELETE", bucket, key)

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under `prefix` (ListObjectsV2, following continuation tokens)."""
        keys: list[str] = []
        token: str | None = None
        while True:
            query = [("list-type", "2"), ("prefix", prefix)]
            if token:
                query.append(("continuation-token", token))
            root = ET.fromstring(self._checked("GET", bucket, query=query).body)
            token = None
            truncated = False
            for child in root:
                tag = _strip_ns(child.tag)
                if tag == "Contents":
                    for field in child:
                        if _strip_ns(field.tag) == "Key" and field.text is not None:
                            keys.append(field.text)
                elif tag == "NextContinuationToken":
                    token = child.text
                elif tag == "IsTruncated":
                    truncated = (child.text or "").strip().lower() == "true"
            if not (truncated and token):
                return keys


# --------------------------------------------------------------------------------------------
# S3-compatible server processes
# --------------------------------------------------------------------------------------------


def _wait_until_answering(proc: subprocess.Popen[bytes], what: str, host: str, port: int,
                          deadline: float) -> bool:
    """True once an HTTP request to host:port gets any response; False if `proc` exits first."""
    while True:
        if proc.poll() is not None:
            return False
        try:
            conn = http.client.HTTPConnection(host, port, timeout=2.0)
            try:
                conn.request("GET", "/")
                conn.getresponse().read()
                return True
            finally:
                conn.close()
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            raise ServerUnavailable(f"{what}: no answer on {host}:{port} before the start-up timeout")
        time.sleep(0.05)


class S3ServerBase:
    """A server process on loopback speaking the S3 protocol, its endpoint, credentials and
    helpers; a subclass says how to run it (:class:`S3Server`: moto_server; the remote
    benchmark's s3rver is to be the second).

    The helper methods (:meth:`create_bucket`, :meth:`put_object`, ...) share one
    :class:`S3Client` behind a lock; a thread that makes many requests should take its own
    from :meth:`client`.
    """

    name: ClassVar[str] = "S3 server"
    _START_ATTEMPTS: ClassVar[int] = 3

    def __init__(self, credentials: S3Credentials, *, host: str, port: int | None,
                 startup_timeout: float) -> None:
        self.credentials = credentials
        self.host = host
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_dir = tempfile.TemporaryDirectory(prefix="zrecord-s3-log-")
        self._log_path = Path(self._log_dir.name) / "server.log"
        self._lock = threading.Lock()
        self._client: S3Client | None = None
        started = time.monotonic()
        try:
            self.port = self._start(port, startup_timeout)
        except BaseException:
            self._log_dir.cleanup()
            raise
        self.startup_s = time.monotonic() - started
        """Seconds from the constructor's start until the server answered."""

    # Subclasses say how to run the server.
    def _argv(self, port: int) -> list[str]:
        raise NotImplementedError

    def _popen_env(self) -> dict[str, str]:
        return dict(os.environ)

    def _start(self, port: int | None, startup_timeout: float) -> int:
        deadline = time.monotonic() + startup_timeout
        attempts = 1 if port is not None else self._START_ATTEMPTS
        for _ in range(attempts):
            chosen = port if port is not None else free_port(self.host)
            log: IO[bytes]
            with open(self._log_path, "ab") as log:
                proc = subprocess.Popen(self._argv(chosen), stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, env=self._popen_env(),
                                        start_new_session=True)
            self._proc = proc
            try:
                if _wait_until_answering(proc, self.name, self.host, chosen, deadline):
                    return chosen
            except BaseException:
                self._stop_process()
                raise
            self._stop_process()  # exited early: most likely the port was taken meanwhile
        raise ServerUnavailable(f"{self.name} did not start on {self.host}; its output ends with:\n"
                                f"{self.log_tail()}")

    def log_tail(self, limit: int = 4000) -> str:
        """The end of the server's combined stdout and stderr (its request log, mostly)."""
        try:
            data = self._log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode("utf-8", "replace")

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def env(self) -> dict[str, str]:
        """Environment variables that point an AWS SDK (boto3, obstore / object_store, the AWS
        CLI) at this server with its dummy credentials. Merge them into the environment of a
        client process or a ``monkeypatch``; this object never sets them itself."""
        return {
            "AWS_ACCESS_KEY_ID": self.credentials.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.credentials.secret_access_key,
            "AWS_DEFAULT_REGION": self.credentials.region,
            "AWS_REGION": self.credentials.region,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ENDPOINT": self.endpoint_url,  # object_store's name for it
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
            "NO_PROXY": f"{self.host},localhost",
        }

    def client(self, *, timeout: float = 60.0) -> S3Client:
        """A new stdlib S3 client of this server (the caller closes it)."""
        return S3Client(self.endpoint_url, self.credentials, timeout=timeout)

    def boto3_client(self, *, max_pool_connections: int = 10) -> Any:
        """A boto3 S3 client of this server: path-style, no retries, checksums only where
        required (s3rver predates the flexible-checksum headers that botocore now sends)."""
        boto3 = importlib.import_module("boto3")
        config_mod = importlib.import_module("botocore.config")
        options: dict[str, Any] = {
            "s3": {"addressing_style": "path"},
            "retries": {"max_attempts": 1, "mode": "standard"},
            "max_pool_connections": max_pool_connections,
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
        }
        try:
            config = config_mod.Config(**options)
        except TypeError:  # botocore before 1.36 has no flexible checksums to turn down
            del options["request_checksum_calculation"], options["response_checksum_validation"]
            config = config_mod.Config(**options)
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.credentials.access_key_id,
            aws_secret_access_key=self.credentials.secret_access_key,
            region_name=self.credentials.region,
            config=config,
        )

    @contextlib.contextmanager
    def _shared_client(self) -> Iterator[S3Client]:
        with self._lock:
            if self._client is None:
                self._client = self.client()
            yield self._client

    def create_bucket(self, name: str) -> S3Bucket:
        with self._shared_client() as client:
            client.create_bucket(name)
        return S3Bucket(self, name)

    def new_bucket(self, prefix: str = "zr") -> S3Bucket:
        """A new bucket with a unique name that starts with `prefix`."""
        return self.create_bucket(f"{prefix}-{uuid.uuid4().hex[:20]}")

    def put_object(self, bucket: str, key: str, data: bytes) -> str:
        with self._shared_client() as client:
            return client.put_object(bucket, key, data)

    def get_object(self, bucket: str, key: str, *, byte_range: str | None = None) -> bytes:
        with self._shared_client() as client:
            return client.get_object(bucket, key, byte_range=byte_range).body

    def head_object(self, bucket: str, key: str) -> S3Response:
        with self._shared_client() as client:
            return client.head_object(bucket, key)

    def delete_object(self, bucket: str, key: str) -> None:
        with self._shared_client() as client:
            client.delete_object(bucket, key)

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        with self._shared_client() as client:
            return client.list_keys(bucket, prefix)

    def delete_bucket(self, bucket: str, *, empty: bool = True) -> None:
        """Delete `bucket`, first deleting every object in it unless `empty` is false."""
        with self._shared_client() as client:
            if empty:
                for key in client.list_keys(bucket):
                    client.delete_object(bucket, key)
            client.delete_bucket(bucket)

    def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def close(self) -> None:
        """Stop the server (an in-memory server's objects go with it)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
        self._stop_process()
        self._log_dir.cleanup()

    def __enter__(self) -> S3ServerBase:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.endpoint_url} running={self.running}>"


def _find_executable(name: str) -> str | None:
    """`name` beside the running interpreter (its virtual environment's bin), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return os.fspath(beside)
    return shutil.which(name)


class S3Server(S3ServerBase):
    """``moto_server -H 127.0.0.1 -p PORT``: an in-memory S3 server on loopback.

    `port` None picks a free one. `executable` defaults to ``moto_server`` beside the running
    interpreter, else on PATH; when there is none, :class:`ServerUnavailable` says how to
    install it. Objects live in the server's memory and go when it stops.
    """

    name = "moto_server"

    def __init__(self, *, port: int | None = None, executable: str | os.PathLike[str] | None = None,
                 startup_timeout: float = 60.0,
                 credentials: S3Credentials | None = None, authenticate: bool = False) -> None:
        found = os.fspath(executable) if executable is not None else _find_executable("moto_server")
        if found is None or not os.path.isfile(found):
            raise ServerUnavailable(
                f"moto_server not found (looked beside {sys.executable} and on PATH). The remote "
                "tests need it: pip install 'moto[server]' (or the test kit's s3 extra: "
                "pip install -e 'packages/zrecord-testkit[s3]')"
            )
        self.executable = found
        self.authenticate = authenticate
        super().__init__(credentials or S3Credentials("zrecord-test-key", "zrecord-test-secret"),
                         host=LOOPBACK, port=port, startup_timeout=startup_timeout)

    def _argv(self, port: int) -> list[str]:
        return [self.executable, "-H", self.host, "-p", str(port)]

    def _popen_env(self) -> dict[str, str]:
        """With `authenticate`, moto checks every request's access key and signature against
        its IAM users (it has none: every key is refused), as S3 does."""
        env = dict(os.environ)
        if self.authenticate:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        return env

    def reset(self) -> None:
        """Drop every bucket and object (moto's ``POST /moto-api/reset``)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request("POST", "/moto-api/reset")
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise ServerUnavailable(f"moto reset answered HTTP {resp.status}")
        finally:
            conn.close()

    def __enter__(self) -> S3Server:
        return self


@dataclasses.dataclass(frozen=True)
class S3Bucket:
    """One bucket of an S3 server, with helpers bound to it (the ``s3_bucket`` fixture)."""

    server: S3ServerBase
    name: str

    @property
    def endpoint_url(self) -> str:
        return self.server.endpoint_url

    def url(self, key: str = "") -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.name}/{key}"

    def http_url(self, key: str) -> str:
        """The path-style HTTP URL of `key` (requests to it still need a signature)."""
        return self.server.endpoint_url + S3Client.path_for(self.name, key)

    def put(self, key: str, data: bytes) -> str:
        """Store `data` at `key`; returns its ETag (with quotes)."""
        return self.server.put_object(self.name, key, data)

    def get(self, key: str, *, byte_range: str | None = None) -> bytes:
        return self.server.get_object(self.name, key, byte_range=byte_range)

    def head(self, key: str) -> S3Response:
        return self.server.head_object(self.name, key)

    def delete(self, key: str) -> None:
        self.server.delete_object(self.name, key)

    def keys(self, prefix: str = "") -> list[str]:
        return self.server.list_keys(self.name, prefix)

    def destroy(self) -> None:
        """Delete every object and then the bucket."""
        self.server.delete_bucket(self.name, empty=True)


# --------------------------------------------------------------------------------------------
# A read-only HTTP/1.1 file server with Range support
# --------------------------------------------------------------------------------------------


class RangeNotSatisfiable(ValueError):
    """The Range header names no byte of the representation (answered with 416)."""


_RANGE_SPEC = re.compile(r"(\d*)-(\d*)")


def resolve_range(header: str, size: int) -> tuple[int, int] | None:
    """The inclusive ``(first, last)`` byte positions a ``Range`` header selects from `size`
    bytes, following RFC 9110 section 14 for one range.

    Returns None where the header is to be ignored (the whole representation is sent with
    200): a unit other than ``bytes``, a syntactically invalid range (``5-2``, ``-``, ``abc``),
    or more than one range. Raises :class:`RangeNotSatisfiable` (416) when the range is valid
    but selects nothing: a first position at or past the end, a suffix of zero bytes, or any
    range of an empty representation. A last position past the end is clamped to the end.
    """
    unit, sep, ranges = header.strip().partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return None
    spec = ranges.strip()
    if "," in spec:
        return None
    match = _RANGE_SPEC.fullmatch(spec)
    if match is None or match.group(0) == "-":
        return None
    first_text, last_text = match.groups()
    if first_text:
        first = int(first_text)
        last = int(last_text) if last_text else None
        if last is not None and last < first:
            return None
        if first >= size:
            raise RangeNotSatisfiable(header)
        return first, size - 1 if last is None else min(last, size - 1)
    suffix = int(last_text)
    if suffix == 0 or size == 0:
        raise RangeNotSatisfiable(header)
    return max(0, size - suffix), size - 1


def etag_for(stat: os.stat_result) -> str:
    """RangeHTTPServer's (strong) ETag of a file: its size and mtime in nanoseconds."""
    return f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"'


def _etag_list(header: str) -> list[str]:
    return [item.strip() for item in header.split(",") if item.strip()]


def _strong_match(etag: str, candidates: Iterable[str]) -> bool:
    return any(c == "*" or c == etag for c in candidates)


def _weak_match(etag: str, candidates: Iterable[str]) -> bool:
    bare = etag.removeprefix("W/")
    return any(c == "*" or c.removeprefix("W/") == bare for c in candidates)


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    """One request a RangeHTTPServer answered."""

    method: str
    path: str
    range: str | None
    status: int
    body_bytes: int
    client_port: int


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], root: Path, accept_ranges: bool,
                 record_requests: bool) -> None:
        self.root = root
        self.root_real = os.path.realpath(root)
        self.accept_ranges = accept_ranges
        self.record_requests = record_requests
        self.records: list[RequestRecord] = []
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()
        # Requests being answered: a request's record is made after its body was sent, so a
        # client may have its answer before the record exists; `requests()` waits for these.
        self.answering = 0
        self.answered = threading.Condition(self.lock)
        # Faults for the next ranged GETs, in order (RangeHTTPServer.inject).
        self.faults: list[str] = []
        super().__init__(address, _RangeHandler)

    def next_fault(self) -> str | None:
        with self.lock:
            return self.faults.pop(0) if self.faults else None

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a reader closed or cancelled its requests, as the link
        proxy's readers do) is no error of the server's; socketserver printed a traceback
        for each, burying the benchmarks' output. Anything else is printed as before."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        with self.lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _RangeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "zrecord-range-http/1"
    timeout = 120  # an idle kept-alive connection is closed after this many seconds
    # Headers and body leave in two writes; with Nagle's algorithm on, the body would wait for
    # the client's delayed ACK of the headers (40 ms a request on Linux loopback).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        with self._answering():
            self._serve(send_body=True)

    def do_HEAD(self) -> None:
        with self._answering():
            self._serve(send_body=False)

    @contextlib.contextmanager
    def _answering(self) -> Iterator[None]:
        """Count the request as being answered until its record is made (`_record`)."""
        with self.server.lock:
            self.server.answering += 1
        try:
            yield
        finally:
            with self.server.lock:
                self.server.answering -= 1
                self.server.answered.notify_all()

    def _refuse_method(self) -> None:
        # The request may carry a body this server does not read: end the connection after.
        self.close_connection = True
        self._reply(405, f"{self.command} not allowed: this server is read-only\n",
                    {"Allow": "GET, HEAD", "Connection": "close"})

    do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method

    def _record(self, status: int, body_bytes: int) -> None:
        if self.server.record_requests:
            record = RequestRecord(self.command, self.path, self.headers.get("Range"), status,
                                   body_bytes, int(self.client_address[1]))
            with self.server.lock:
                self.server.records.append(record)

    def _reply(self, status: int, text: str, headers: Mapping[str, str] | None = None) -> None:
        body = text.encode("utf-8") if self.command != "HEAD" else b""
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(text.encode("utf-8"))))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(body)
        self._record(status, len(body))

    def _file_for_path(self) -> str | None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path, errors="strict")
        parts = [p for p in path.split("/") if p]
        if not path.startswith("/") or "\0" in path or any(p in (".", "..") for p in parts):
            return None
        real = os.path.realpath(os.path.join(self.server.root, *parts))
        if os.path.commonpath([real, self.server.root_real]) != self.server.root_real:
            return None  # a symbolic link out of the served folder
        return real if os.path.isfile(real) else None

    def _serve(self, *, send_body: bool) -> None:
        try:
            path = self._file_for_path()
        except UnicodeDecodeError:
            path = None
        if path is None:
            self._reply(404, "not found\n")
            return
        try:
            f = open(path, "rb")
        except OSError:
            self._reply(404, "not found\n")
            return
        with f:
            st = os.fstat(f.fileno())
            size = st.st_size
            etag = etag_for(st)
            last_modified = email.utils.formatdate(st.st_mtime, usegmt=True)
            validators = {"ETag": etag, "Last-Modified": last_modified}
            if self._answered_precondition(etag, size, validators):
                return
            range_header = self.headers.get("Range")
            fault = self.server.next_fault() if range_header is not None and send_body else None
            if self._answered_fault(fault):
                return
            try:
                span = self._requested_span(range_header, size, etag, last_modified)
            except RangeNotSatisfiable:
                self._reply(416, f"range not satisfiable: {range_header}\n",
                            {"Content-Range": f"bytes */{size}", **validators})
                return
            self._send_file(f, size, span, validators, fault, send_body=send_body)

    def _answered_precondition(self, etag: str, size: int, validators: dict[str, str]) -> bool:
        """Answer 412 to an If-Match that no tag satisfies, or 304 to an If-None-Match that one
        does; True if this answered the request."""
        if_match = self.headers.get("If-Match")
        if if_match is not None and not _strong_match(etag, _etag_list(if_match)):
            self._reply(412, "precondition failed: If-Match\n", validators)
            return True
        if_none_match = self.headers.get("If-None-Match")
        if if_none_match is not None and _weak_match(etag, _etag_list(if_none_match)):
            self.send_response(304)
            for name, value in validators.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            self._record(304, 0)
            return True
        return False

    def _answered_fault(self, fault: str | None) -> bool:
        """Act out an injected "503" or "drop" fault; True if it took the place of the answer
        ("truncate" is acted out while the body is sent)."""
        if fault == "503":
            self._reply(503, "SlowDown: reduce your request rate\n", {"Retry-After": "0"})
            return True
        if fault == "drop":  # the connection ends before any answer
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            self._record(0, 0)
            return True
        return False

    def _requested_span(self, range_header: str | None, size: int, etag: str,
                        last_modified: str) -> tuple[int, int] | None:
        """The (first, last) bytes the Range header asks for, or None for the whole file: no
        Range, ranges not accepted, or an If-Range that the file no longer matches. Raises
        RangeNotSatisfiable."""
        if range_header is None or not self.server.accept_ranges:
            return None
        if_range = self.headers.get("If-Range")
        if if_range is None or if_range.strip() in (etag, last_modified):
            return resolve_range(range_header, size)
        return None

    def _send_file(self, f: Any, size: int, span: tuple[int, int] | None, validators: dict[str, str],
                   fault: str | None, *, send_body: bool) -> None:
        """Answer 200 with the whole file, or 206 with `span` of it; an injected "truncate"
        fault sends half of the body the headers promise."""
        first, last = span if span is not None else (0, size - 1)
        length = last - first + 1
        status = 206 if span is not None else 200
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes" if self.server.accept_ranges else "none")
        for name, value in validators.items():
            self.send_header(name, value)
        if span is not None:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        sent = 0
        if fault == "truncate":  # the headers promise `length` bytes; half of them come
            length = length // 2
        if send_body and length > 0:
            try:
                sent = self.connection.sendfile(f, offset=first, count=length)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            if sent != length or fault == "truncate":
                self.close_connection = True  # the body is short: the connection is unusable
        self._record(status, sent)


class RangeHTTPServer:
    """A read-only HTTP/1.1 server of the files under `root`, on 127.0.0.1, in a thread.

    * ``GET`` and ``HEAD`` of regular files; directories, missing files, ``..`` segments and
      symbolic links leading out of `root` answer 404. Other methods answer 405 (and close).
    * Keep-alive (HTTP/1.1); every response has ``Content-Length``; bodies go by ``sendfile``.
    * Validators: a strong ``ETag`` made of the file's size and mtime in nanoseconds
      (:func:`etag_for`), and ``Last-Modified``. ``If-Match`` (412 when no tag matches),
      ``If-None-Match`` (304) and ``If-Range`` (a tag or the exact Last-Modified date; the
      Range is ignored otherwise) are honoured; date preconditions other than If-Range are not.
    * One range per request, as :func:`resolve_range` describes: ``bytes=a-b``, ``a-`` and
      ``-n`` answer 206 with ``Content-Range``; unsatisfiable ones 416 with
      ``Content-Range: bytes */SIZE``. **A multi-range request (``bytes=0-1,5-6``) answers 200
      with the whole file** (RFC 9110 lets a server ignore Range; no multipart/byteranges), as
      do invalid ranges and other units. With ``accept_ranges=False`` the server ignores every
      Range header (``Accept-Ranges: none``), like a server without range support.
    * :meth:`requests` lists what was answered (unless ``record_requests=False``), so tests can
      check how many requests and which ranges a reader sent.

    `port` 0 picks a free port. Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, root: str | os.PathLike[str], *, port: int = 0, accept_ranges: bool = True,
                 record_requests: bool = True) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise NotADirectoryError(os.fspath(self.root))
        self._server = _Server((LOOPBACK, port), self.root, accept_ranges, record_requests)
        self.host = LOOPBACK
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"RangeHTTPServer:{self.port}", daemon=True)
        self._thread.start()
        self._closed = False

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        return f"http://{self.host}:{self.port}"

    def url_for(self, relpath: str | os.PathLike[str]) -> str:
        """The URL of the file at `relpath` under the root (percent-encoded)."""
        rel = Path(relpath)
        if rel.is_absolute():
            rel = rel.relative_to(self.root)
        return self.url + "/" + urllib.parse.quote(rel.as_posix(), safe="/")

    def requests(self) -> list[RequestRecord]:
        """What was answered so far, once the requests being answered have their records (a
        client may read its answer before the server has recorded it); waits at most 5 s."""
        with self._server.lock:
            self._server.answered.wait_for(lambda: self._server.answering == 0, timeout=5.0)
            return list(self._server.records)

    def inject(self, *faults: str) -> None:
        """Misbehave on the next ranged GETs, one fault each, in order: ``"503"`` (SlowDown,
        ``Retry-After: 0``), ``"drop"`` (the connection ends with no answer) or ``"truncate"``
        (the headers promise the range, half of it comes, the connection ends)."""
        unknown = set(faults) - {"503", "drop", "truncate"}
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}")
        with self._server.lock:
            self._server.faults.extend(faults)

    def clear_faults(self) -> None:
        with self._server.lock:
            self._server.faults.clear()

    def pending_faults(self) -> int:
        with self._server.lock:
            return len(self._server.faults)

    def clear_requests(self) -> None:
        """Forget what was answered so far, once the requests being answered have their
        records (as ``requests``): a request whose answer the client has already read is never
        counted after the clear."""
        with self._server.lock:
            self._server.answered.wait_for(lambda: self._server.answering == 0, timeout=5.0)
            self._server.records.clear()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.drop_connections()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> RangeHTTPServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<RangeHTTPServer {self.url} root={os.fspath(self.root)!r}>"


@dataclasses.dataclass(frozen=True)
class HTTPFolder:
    """A test's own folder under a RangeHTTPServer's root (the ``http_folder`` fixture)."""

    server: RangeHTTPServer
    path: Path

    @property
    def url(self) -> str:
        """The folder's URL, with a trailing slash."""
        return self.server.url_for(self.path) + "/"

    def url_for(self, name: str) -> str:
        return self.server.url_for(self.path / name)

    def write(self, name: str, data: bytes) -> str:
        """Write `data` to the file `name` in the folder; returns its URL."""
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return self.url_for(name)

    def requests(self) -> list[RequestRecord]:
        """The server's records of requests for files in this folder."""
        prefix = urllib.parse.urlsplit(self.url).path
        return [r for r in self.server.requests() if urllib.parse.urlsplit(r.path).path.startswith(prefix)]
