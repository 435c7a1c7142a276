"""The loopback servers of the remote tests (zrecord_testkit.servers) behave as the remote-read
code will need them to: exact bytes for ranged GETs, ETags that change with the content, 404 for a
missing key, and RangeHTTPServer's 206/416/HEAD/validators/keep-alive."""

from __future__ import annotations

import datetime
import http.client
import importlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from zrecord_testkit.servers import (
    HTTPFolder,
    RangeHTTPServer,
    RangeNotSatisfiable,
    S3Bucket,
    S3Credentials,
    S3Error,
    S3Server,
    ServerUnavailable,
    etag_for,
    resolve_range,
    sign_v4,
)

pytestmark = pytest.mark.remote

SIZE = 100_000
KEY = "stores/part 0+1~.bin"  # a space, a plus and a tilde: the signature's path encoding


@pytest.fixture(scope="module")
def payload() -> bytes:
    return os.urandom(SIZE)


# Ranges and the slices of a SIZE-byte object they select.
RANGES = [
    ("bytes=0-4095", slice(0, 4096)),
    ("bytes=4096-8191", slice(4096, 8192)),
    ("bytes=99990-", slice(99990, SIZE)),
    ("bytes=-10", slice(SIZE - 10, SIZE)),
    ("bytes=-1", slice(SIZE - 1, SIZE)),
    ("bytes=-200000", slice(0, SIZE)),  # a suffix longer than the object: all of it
    ("bytes=99000-200000", slice(99000, SIZE)),  # a last position past the end is clamped
    ("bytes=0-0", slice(0, 1)),
]


def _content_range(sl: slice) -> str:
    return f"bytes {sl.start}-{sl.stop - 1}/{SIZE}"


# --- moto_server --------------------------------------------------------------------------


def test_moto_ranged_get_stdlib_sigv4(s3_bucket: S3Bucket, payload: bytes) -> None:
    etag = s3_bucket.put(KEY, payload)
    with s3_bucket.server.client() as client:
        for header, sl in RANGES:
            resp = client.get_object(s3_bucket.name, KEY, byte_range=header)
            assert resp.status == 206, header
            assert resp.body == payload[sl], header
            assert resp.headers["Content-Range"] == _content_range(sl), header
            assert int(resp.headers["Content-Length"]) == sl.stop - sl.start
            assert resp.etag == etag
        whole = client.get_object(s3_bucket.name, KEY)
        assert whole.status == 200 and whole.body == payload


def test_moto_ranged_get_boto3(s3_bucket: S3Bucket, payload: bytes) -> None:
    s3_bucket.put(KEY, payload)
    client = s3_bucket.server.boto3_client()
    for header, sl in RANGES[:4]:
        got = client.get_object(Bucket=s3_bucket.name, Key=KEY, Range=header)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"] == _content_range(sl)
        assert got["Body"].read() == payload[sl]
    assert s3_bucket.keys() == [KEY]


def test_moto_etag_changes_when_replaced(s3_bucket: S3Bucket, payload: bytes) -> None:
    first = s3_bucket.put(KEY, payload)
    assert first.startswith('"') and first == s3_bucket.head(KEY).etag
    assert s3_bucket.put(KEY, payload) == first  # moto's ETag is the MD5: same bytes, same tag
    replaced = payload[:-1] + bytes([payload[-1] ^ 1])
    second = s3_bucket.put(KEY, replaced)
    assert second != first
    assert s3_bucket.head(KEY).etag == second
    with s3_bucket.server.client() as client:
        resp = client.get_object(s3_bucket.name, KEY, byte_range="bytes=-4")
        assert resp.etag == second and resp.body == replaced[-4:]
        # A reader that pinned the old ETag is told the object changed.
        with pytest.raises(S3Error) as info:
            client.get_object(s3_bucket.name, KEY, byte_range="bytes=0-9", headers={"If-Match": first})
        assert info.value.status == 412 and info.value.code == "PreconditionFailed"
        ok = client.get_object(s3_bucket.name, KEY, byte_range="bytes=0-9", headers={"If-Match": second})
        assert ok.status == 206 and ok.body == replaced[:10]


def test_moto_missing_key_is_404(s3_bucket: S3Bucket) -> None:
    with pytest.raises(S3Error) as info:
        s3_bucket.get("no/such/key")
    assert (info.value.status, info.value.code) == (404, "NoSuchKey")
    with pytest.raises(S3Error) as info:
        s3_bucket.head("no/such/key")
    assert info.value.status == 404

    botocore_exceptions = importlib.import_module("botocore.exceptions")
    client = s3_bucket.server.boto3_client()
    with pytest.raises(botocore_exceptions.ClientError) as boto_info:
        client.get_object(Bucket=s3_bucket.name, Key="no/such/key", Range="bytes=0-9")
    error: Any = boto_info.value
    assert error.response["Error"]["Code"] == "NoSuchKey"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_moto_unsatisfiable_range_is_416(s3_bucket: S3Bucket, payload: bytes) -> None:
    s3_bucket.put(KEY, payload)
    for header in (f"bytes={SIZE}-", f"bytes={SIZE + 5}-{SIZE + 10}", "bytes=-0"):
        with pytest.raises(S3Error) as info:
            s3_bucket.get(KEY, byte_range=header)
        assert (info.value.status, info.value.code) == (416, "InvalidRange"), header


def test_buckets_of_tests_are_separate(s3_server: S3Server, s3_bucket: S3Bucket) -> None:
    other = s3_server.new_bucket()
    try:
        other.put("k", b"other")
        s3_bucket.put("k", b"mine")
        assert s3_bucket.get("k") == b"mine" and other.get("k") == b"other"
    finally:
        other.destroy()
    with pytest.raises(S3Error) as info:
        other.get("k")
    assert info.value.code == "NoSuchBucket"


def test_env_names_the_server_without_printing_the_secret(s3_server: S3Server) -> None:
    env = s3_server.env()
    assert env["AWS_ENDPOINT_URL"] == s3_server.endpoint_url
    assert env["AWS_SECRET_ACCESS_KEY"] == s3_server.credentials.secret_access_key
    assert s3_server.credentials.secret_access_key not in repr(s3_server.credentials)
    assert os.environ.get("AWS_SECRET_ACCESS_KEY") != s3_server.credentials.secret_access_key


def test_signer_matches_botocore() -> None:
    auth = importlib.import_module("botocore.auth")
    awsrequest = importlib.import_module("botocore.awsrequest")
    botocore_credentials = importlib.import_module("botocore.credentials")
    creds = S3Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "eu-west-1")
    url = "http://127.0.0.1:9000/bucket/stores/part%200%2B1~.bin?partNumber=1&versionId=a%2Fb"
    request = awsrequest.AWSRequest(method="GET", url=url, headers={"Range": "bytes=0-4095"})
    auth.S3SigV4Auth(botocore_credentials.Credentials(creds.access_key_id, creds.secret_access_key),
                     "s3", creds.region).add_auth(request)
    when = datetime.datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=datetime.timezone.utc)
    mine = sign_v4("GET", url, {"Range": "bytes=0-4095"}, creds, now=when,
                   payload_sha256=request.headers["X-Amz-Content-SHA256"])
    assert mine["Authorization"] == request.headers["Authorization"]


def test_missing_moto_server_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ServerUnavailable, match=r"pip install 'moto\[server\]'"):
        S3Server(executable=tmp_path / "moto_server")


# --- RangeHTTPServer ----------------------------------------------------------------------


def _fetch(folder: HTTPFolder, name: str, headers: dict[str, str] | None = None,
           method: str = "GET") -> tuple[int, http.client.HTTPMessage, bytes]:
    conn = http.client.HTTPConnection(folder.server.host, folder.server.port, timeout=10)
    try:
        conn.request(method, folder.url_for(name).removeprefix(folder.server.url), headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize(("header", "sl"), RANGES)
def test_http_range_206(http_folder: HTTPFolder, payload: bytes, header: str, sl: slice) -> None:
    http_folder.write("data.bin", payload)
    status, headers, body = _fetch(http_folder, "data.bin", {"Range": header})
    assert status == 206
    assert body == payload[sl]
    assert headers["Content-Range"] == _content_range(sl)
    assert int(headers["Content-Length"]) == len(body)
    assert headers["Accept-Ranges"] == "bytes"


@pytest.mark.parametrize("header", [f"bytes={SIZE}-", f"bytes={SIZE}-{SIZE + 9}", "bytes=-0"])
def test_http_unsatisfiable_416(http_folder: HTTPFolder, payload: bytes, header: str) -> None:
    http_folder.write("data.bin", payload)
    status, headers, _ = _fetch(http_folder, "data.bin", {"Range": header})
    assert status == 416
    assert headers["Content-Range"] == f"bytes */{SIZE}"


def test_http_empty_file(http_folder: HTTPFolder) -> None:
    http_folder.write("empty", b"")
    assert _fetch(http_folder, "empty")[::2] == (200, b"")
    for header in ("bytes=0-", "bytes=-1", "bytes=0-0"):
        status, headers, _ = _fetch(http_folder, "empty", {"Range": header})
        assert (status, headers["Content-Range"]) == (416, "bytes */0"), header


@pytest.mark.parametrize("header", ["bytes=0-1,5-6", "bytes=5-2", "bytes=abc", "items=0-9", "bytes=-"])
def test_http_multi_or_invalid_range_is_the_whole_file(http_folder: HTTPFolder, payload: bytes,
                                                       header: str) -> None:
    http_folder.write("data.bin", payload)
    status, headers, body = _fetch(http_folder, "data.bin", {"Range": header})
    assert status == 200 and body == payload and "Content-Range" not in headers


def test_http_head_and_validators(http_folder: HTTPFolder, payload: bytes) -> None:
    path = http_folder.path / "data.bin"
    http_folder.write("data.bin", payload)
    status, headers, body = _fetch(http_folder, "data.bin", method="HEAD")
    assert (status, body) == (200, b"")
    assert int(headers["Content-Length"]) == SIZE
    etag = headers["ETag"]
    assert etag == etag_for(path.stat())
    last_modified = headers["Last-Modified"]
    assert last_modified.endswith(" GMT")

    # HEAD with a Range: the 206 headers, no body.
    status, headers, body = _fetch(http_folder, "data.bin", {"Range": "bytes=10-19"}, method="HEAD")
    assert (status, headers["Content-Range"], headers["Content-Length"], body) == (
        206, f"bytes 10-19/{SIZE}", "10", b"")

    # The same bytes with a new mtime: a new ETag; replaced content: a new ETag again.
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))
    touched = _fetch(http_folder, "data.bin", method="HEAD")[1]["ETag"]
    assert touched != etag
    path.write_bytes(payload[:-1])
    replaced = _fetch(http_folder, "data.bin", method="HEAD")[1]["ETag"]
    assert replaced not in (etag, touched)

    # Preconditions: If-Match (412), If-None-Match (304), If-Range (a stale tag: the whole file).
    assert _fetch(http_folder, "data.bin", {"If-Match": etag, "Range": "bytes=0-9"})[0] == 412
    status, _, body = _fetch(http_folder, "data.bin", {"If-Match": replaced, "Range": "bytes=0-9"})
    assert (status, body) == (206, payload[:10])
    assert _fetch(http_folder, "data.bin", {"If-None-Match": replaced})[0] == 304
    status, _, body = _fetch(http_folder, "data.bin", {"If-Range": etag, "Range": "bytes=0-9"})
    assert (status, len(body)) == (200, SIZE - 1)
    status, _, body = _fetch(http_folder, "data.bin", {"If-Range": replaced, "Range": "bytes=0-9"})
    assert (status, body) == (206, payload[:10])


def test_http_keep_alive(http_folder: HTTPFolder, payload: bytes) -> None:
    http_folder.write("data.bin", payload)
    path = http_folder.url_for("data.bin").removeprefix(http_folder.server.url)
    conn = http.client.HTTPConnection(http_folder.server.host, http_folder.server.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Range": "bytes=0-9"})
        first = conn.getresponse()
        assert (first.status, first.read()) == (206, payload[:10])
        assert not first.will_close
        sock = conn.sock
        assert sock is not None
        conn.request("GET", path, headers={"Range": "bytes=-10"})
        second = conn.getresponse()
        assert (second.status, second.read()) == (206, payload[-10:])
        assert conn.sock is sock  # the same connection carried both
        conn.request("GET", "/nothing-here")  # an error reply keeps the connection too
        third = conn.getresponse()
        assert third.status == 404 and third.read() and conn.sock is sock
    finally:
        conn.close()
    records = http_folder.requests()
    assert [(r.range, r.status, r.body_bytes) for r in records] == [
        ("bytes=0-9", 206, 10), ("bytes=-10", 206, 10)]
    assert records[0].client_port == records[1].client_port


def test_http_small_ranges_are_not_held_by_nagle(http_folder: HTTPFolder, payload: bytes) -> None:
    """Headers and body leave in two writes; without TCP_NODELAY each small response would
    wait for the client's delayed ACK (40 ms on Linux): 25 requests would take a second."""
    http_folder.write("data.bin", payload)
    path = http_folder.url_for("data.bin").removeprefix(http_folder.server.url)
    conn = http.client.HTTPConnection(http_folder.server.host, http_folder.server.port, timeout=10)
    try:
        started = time.monotonic()
        for i in range(25):
            conn.request("GET", path, headers={"Range": f"bytes={i * 64}-{i * 64 + 63}"})
            assert conn.getresponse().read() == payload[i * 64:i * 64 + 64]
        assert time.monotonic() - started < 0.6
    finally:
        conn.close()


def test_http_refuses_what_it_must(http_folder: HTTPFolder, payload: bytes) -> None:
    http_folder.write("sub/data.bin", payload)
    assert _fetch(http_folder, "sub/data.bin")[2] == payload
    assert _fetch(http_folder, "sub")[0] == 404  # no directory listings
    assert _fetch(http_folder, "missing.bin")[0] == 404
    status, headers, _ = _fetch(http_folder, "sub/data.bin", method="PUT")
    assert status == 405 and headers["Allow"] == "GET, HEAD"
    # A '..' segment, raw or percent-encoded, does not leave the served folder.
    conn = http.client.HTTPConnection(http_folder.server.host, http_folder.server.port, timeout=10)
    try:
        for target in ("/../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/sub/..%2f..%2fetc%2fpasswd"):
            conn.request("GET", target)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 404, target
    finally:
        conn.close()
    (http_folder.path / "escape").symlink_to("/etc/hostname")
    assert _fetch(http_folder, "escape")[0] == 404


def test_http_without_range_support(tmp_path: Path, payload: bytes) -> None:
    (tmp_path / "data.bin").write_bytes(payload)
    with RangeHTTPServer(tmp_path, accept_ranges=False, record_requests=False) as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        try:
            conn.request("GET", "/data.bin", headers={"Range": "bytes=0-9"})
            resp = conn.getresponse()
            assert (resp.status, resp.getheader("Accept-Ranges"), resp.read()) == (200, "none", payload)
        finally:
            conn.close()
        assert server.requests() == []
    assert server.url.startswith("http://127.0.0.1:")


def test_http_close_ends_idle_keep_alive_connections(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    server = RangeHTTPServer(tmp_path)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    conn.request("GET", "/f")
    assert conn.getresponse().read() == b"x"
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 5
    assert conn.sock is not None and conn.sock.recv(1) == b""  # the server's side has gone
    conn.close()


def test_a_client_that_resets_its_connection_prints_nothing(tmp_path: Path, capfd: Any) -> None:
    """Was: each connection a client reset (the link proxy's, when a reader cancels its
    requests) printed socketserver's traceback of ConnectionResetError, burying a benchmark's
    tables."""
    import socket
    import struct

    (tmp_path / "f").write_bytes(b"x")
    with RangeHTTPServer(tmp_path) as server:
        for _ in range(3):
            sock = socket.create_connection((server.host, server.port), timeout=10)
            sock.sendall(b"GET /f HTTP/1.1\r\nHost: x\r\n")  # the request never ends
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # RST
        conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
        conn.request("GET", "/f")
        assert conn.getresponse().read() == b"x"  # still serving
        conn.close()
        time.sleep(0.2)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "ConnectionResetError" not in err, err


def test_resolve_range() -> None:
    assert resolve_range("bytes=0-9", 100) == (0, 9)
    assert resolve_range(" Bytes = 90- ", 100) == (90, 99)
    assert resolve_range("bytes=-5", 3) == (0, 2)
    assert resolve_range("bytes=0-1, 4-5", 100) is None
    for header in ("bytes=100-", "bytes=-0"):
        with pytest.raises(RangeNotSatisfiable):
            resolve_range(header, 100)
    with pytest.raises(RangeNotSatisfiable):
        resolve_range("bytes=-5", 0)
