"""What a store opened by URL says when it cannot be read, and what opening it cost: missing
credentials named as such (where they were looked for, how to give them), a server that cannot
be reached failing at once instead of after its retries, a prefix without a header described
as it is, the open's requests and bytes in ``remote_stats()``, and ``--endpoint-url`` on every
command of the CLI that takes a store. Loopback servers only; nothing leaves the machine (the
instance metadata service is pointed at a closed loopback port, and the names that must not
resolve are under the reserved ``.invalid`` domain, RFC 2606)."""

from __future__ import annotations

import errno
import json
import socket
import time

import numpy as np
import pytest

from zrecord import Dense
from zrecord.cli import main
from zrecord.errors import NotPublishedError, RemoteError, StoreNotFoundError

pytestmark = pytest.mark.remote

ORDER = ("index.zri", "index.zrs", "data-000.zrd", "data-001.zrd", "header.zrh")


def _closed_port() -> int:
    """A loopback port nothing listens on (taken from the system, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A small Dense store of two shards, and its records."""
    root = tmp_path_factory.mktemp("remote-errors") / "images"
    data = np.random.default_rng(3).integers(0, 255, (200, 4, 4), dtype=np.uint8)
    with Dense.create(root, np.uint8, (4, 4), codec="raw", data_shards=2, index_cache=None) as w:
        w.append(data)
    return root, data


def _upload(bucket, prefix: str, folder, names=ORDER) -> str:
    for name in names:
        bucket.put(f"{prefix}/{name}", (folder / name).read_bytes())
    return bucket.url(prefix)


@pytest.fixture(autouse=True)
def metadata_offline(monkeypatch):
    """The instance metadata service, which a client without credentials asks, at a closed
    loopback port for every test here: never 169.254.169.254 (off this machine)."""
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """An environment with no AWS credentials anywhere: no AWS_* variable, shared files that do
    not exist, and the metadata service offline (metadata_offline)."""
    import os

    for name in [n for n in os.environ if n.startswith("AWS_") and n != "AWS_METADATA_ENDPOINT"]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))


@pytest.fixture
def credentials_only(monkeypatch, s3_server):
    """The S3 server's credentials in the environment, and no endpoint: what a user who forgot
    --endpoint-url has."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.delenv("AWS_ENDPOINT")


# --- credentials ---------------------------------------------------------------------------


def test_missing_credentials_say_where_they_were_looked_for_at_once(s3_server, s3_bucket, store,
                                                                   no_credentials, capsys):
    """It was a 403 or a refused connection from the instance metadata address, after the
    retries (about 40 s)."""
    url = _upload(s3_bucket, "pub", store[0])
    endpoint = {"endpoint_url": s3_server.endpoint_url}
    start = time.monotonic()
    with pytest.raises(RemoteError) as info:
        Dense.open(url, storage_options=endpoint)
    assert time.monotonic() - start < 5
    text = str(info.value)
    assert info.value.errno == errno.EACCES
    assert f"no credentials found for {url} (looked in: storage_options" in text
    for where in ("AWS_ACCESS_KEY_ID", "no-credentials", "no-config", "instance metadata service at "
                  "http://127.0.0.1:", "connection refused", "skip_signature"):
        assert where in text, where
    assert "169.254" not in text
    # The command line says the same, in one line.
    assert main(["info", url, "--endpoint-url", s3_server.endpoint_url]) == 3
    err = capsys.readouterr().err
    assert err.startswith("zrecord info: ") and "no credentials found for" in err
    # What a command line reads comes first (was: storage_options=..., which it has not).
    assert "Give them as the environment variables AWS_ACCESS_KEY_ID" in err
    # What the message offers for a public bucket asks for no credentials: the server answers
    # (this bucket is not public: access denied), and the metadata service is not asked.
    with pytest.raises(RemoteError, match="header.zrh: access denied") as info:
        Dense.open(url, storage_options={**endpoint, "skip_signature": True})
    assert "no credentials" not in str(info.value)


def test_credentials_that_are_given_are_never_shown(s3_server, no_credentials):
    """With keys given, a failure is no 'no credentials' one, and shows no secret."""
    secret = "not-shown-0123456789"
    opts = {"endpoint_url": f"http://127.0.0.1:{_closed_port()}", "aws_access_key_id": "AKIAX",
            "aws_secret_access_key": secret}
    with pytest.raises(RemoteError) as info:
        Dense.open("s3://b/x", storage_options=opts)
    assert "no credentials" not in str(info.value) and secret not in str(info.value)


# --- servers that cannot be reached ----------------------------------------------------------


def test_a_refused_connection_fails_at_once_naming_the_host_and_the_endpoint_option(s3_server, capsys):
    port = _closed_port()
    opts = {"endpoint_url": f"http://127.0.0.1:{port}", "region": "us-east-1",
            "aws_access_key_id": "AKIAX", "aws_secret_access_key": "secret-value"}
    start = time.monotonic()
    with pytest.raises(RemoteError) as info:
        Dense.open("s3://b/x", storage_options=opts)  # 20 retries by default
    assert time.monotonic() - start < 3
    text = str(info.value)
    assert info.value.errno == errno.ECONNREFUSED
    assert f"s3://b/x/header.zrh: the request failed: cannot reach http://127.0.0.1:{port}" in text
    assert "connection refused" in text and "--endpoint-url" in text and "secret-value" not in text
    # A web server's URL: the hint is the URL itself.
    with pytest.raises(RemoteError, match=f"cannot reach http://127.0.0.1:{port}: connection "
                       "refused.*check the URL's host and port"):
        Dense.open(f"http://127.0.0.1:{port}/store")


def test_a_name_that_does_not_resolve_fails_at_once(no_credentials):
    """Names under .invalid (RFC 2606) never resolve; asking costs the local resolver only."""
    opts = {"endpoint_url": "http://minio.invalid:9000", "aws_access_key_id": "AKIAX",
            "aws_secret_access_key": "secret-value"}
    start = time.monotonic()
    with pytest.raises(RemoteError) as info:
        Dense.open("s3://b/x", storage_options=opts)
    assert time.monotonic() - start < 5
    assert info.value.errno == errno.EHOSTUNREACH
    assert "cannot reach http://minio.invalid:9000: its name does not resolve" in str(info.value)
    assert "is the endpoint http://minio.invalid:9000 right" in str(info.value)
    with pytest.raises(RemoteError, match="cannot reach https://store.invalid: its name does not resolve"):
        Dense.open("https://store.invalid/data/store")


def test_a_first_request_that_fails_otherwise_keeps_its_retries():
    """The classification alone (no server): a 5xx, a timeout or a connection reset on the
    first request is tried again with the retries; a refusal or a DNS failure is not."""
    from obstore.exceptions import GenericError

    from zrecord._objects import Client, storage_settings

    client = Client("https://store.invalid/x", storage_settings({"retries": 3}))
    for failure in ("Server returned non-2xx status code: 503 Service Unavailable",
                    "error sending request: operation timed out",
                    "connection closed before message completed (ConnectionReset)"):
        client.answered = False
        tried: list[object] = []

        def fn(store, failure=failure, tried=tried):
            tried.append(store)
            if len(tried) == 1:
                raise GenericError(f"Generic HTTP error: Error performing HEAD https://store.invalid/x in 1ms - {failure}")
            return "answer"

        assert client._request("header.zrh", fn) == "answer"
        assert tried == [client._first, client.store] and client.answered
    client.answered = False
    refused = GenericError("Error performing HEAD https://store.invalid/x - tcp connect error ConnectionRefused")
    calls: list[object] = []

    def refuse(store):
        calls.append(store)
        raise refused

    with pytest.raises(RemoteError, match="connection refused"):
        client._request("header.zrh", refuse)
    assert calls == [client._first]
    # Once the server has answered, a refusal is a restart: the retries wait for it.
    client.answered = True
    calls.clear()
    with pytest.raises(RemoteError, match="the request failed after its retries"):
        client._request("header.zrh", refuse)
    assert calls == [client.store]


# --- a prefix without a header ---------------------------------------------------------------


def _claim(state: str) -> bytes:
    return json.dumps({"claim": "zrecord publish", "version": 1, "host": "builder-7", "pid": 4242,
                       "claimed_at": "2026-01-02T03:04:05Z", "refreshed_at": "2026-01-02T03:04:05Z",
                       "digest": "0123456789abcdef", "state": state}).encode()


def test_a_prefix_without_a_header_says_what_is_there(s3_server, s3_bucket, store, monkeypatch,
                                                      capsys):
    """It said 'an upload in progress or interrupted?' whatever was there."""
    import zrecord._publish as pub

    root = store[0]
    creds = s3_server.credentials
    opts = {"endpoint_url": s3_server.endpoint_url, "region": creds.region,
            "aws_access_key_id": creds.access_key_id, "aws_secret_access_key": creds.secret_access_key}
    # Objects, no header, no claim: nothing says an upload runs.
    url = _upload(s3_bucket, "half", root, ORDER[:-1])
    with pytest.raises(NotPublishedError) as info:
        Dense.open(url, storage_options=opts)
    text = str(info.value)
    assert "no header.zrh there" in text and "data-000.zrd" in text and "index.zri" in text
    assert "no publish.claim" in text and "in progress" in text  # "nothing says ... in progress"
    assert "upload in progress or interrupted?" not in text
    # A claim being refreshed: an upload is in progress.
    s3_bucket.put("half/publish.claim", _claim("publishing"))
    with pytest.raises(NotPublishedError, match=r"its publish.claim is held \(claimed at "
                       r"'2026-01-02T03:04:05Z' by host 'builder-7', pid 4242.*an upload is in progress"):
        Dense.open(url, storage_options=opts)
    # The same claim unrefreshed for longer than a claim stays held: the upload was interrupted.
    monkeypatch.setattr(pub, "CLAIM_STALE_S", 0.0)
    with pytest.raises(NotPublishedError, match="has not been refreshed for 0 minutes: that upload was interrupted"):
        Dense.open(url, storage_options=opts)
    # A released claim: the publisher failed and said so.
    s3_bucket.put("half/publish.claim", _claim("released"))
    with pytest.raises(NotPublishedError, match=r"was released: that upload failed or was stopped"):
        Dense.open(url, storage_options=opts)
    # Nothing under the prefix, and a prefix holding stores below it.
    with pytest.raises(StoreNotFoundError, match="no object under that prefix"):
        Dense.open(s3_bucket.url("empty"), storage_options=opts)
    _upload(s3_bucket, "dataset/train/image", root)
    with pytest.raises(StoreNotFoundError, match=f"stores below it, such as {s3_bucket.url('dataset')}/train/image"):
        Dense.open(s3_bucket.url("dataset"), storage_options=opts)
    # Objects only below (a store whose header the listing did not reach): not an "upload".
    _upload(s3_bucket, "parts/train/image", root, ORDER[:-1])
    with pytest.raises(StoreNotFoundError, match=f"lie below it, such as {s3_bucket.url('parts')}/train/image/"):
        Dense.open(s3_bucket.url("parts"), storage_options=opts)
    # The command line says it too (credentials from the environment, as it takes them).
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    assert main(["info", url, "--endpoint-url", s3_server.endpoint_url]) == 1
    err = capsys.readouterr().err
    assert "was released" in err and "upload in progress or interrupted?" not in err


# --- what open cost --------------------------------------------------------------------------


def test_remote_stats_count_what_open_fetched(http_folder, store, tmp_path):
    """remote_stats() counted the gathers' ranged GETs only."""
    root, data = store
    for name in ORDER:
        http_folder.write(f"images/{name}", (root / name).read_bytes())
    url = http_folder.url_for("images")
    header = (root / "header.zrh").stat().st_size
    # index.zri and index.zrs (a store with index parts, the writer's default).
    index = (root / "index.zri").stat().st_size + (root / "index.zrs").stat().st_size
    shared = {"cache_dir": str(tmp_path / "mirrors")}
    # By part (a store with index parts, the writer's default): open is one GET, of header.zrh.
    http_folder.server.clear_requests()
    with Dense.open(url, storage_options=shared) as ds:
        seen = http_folder.requests()
        stats = ds.remote_stats()
        assert stats["open_requests"] == len(seen) == 1
        assert stats["open_bytes"] == header == sum(r.body_bytes for r in seen)
        assert stats["requests"] == stats["bytes"] == stats["index_requests"] == stats["index_bytes"] == 0
        http_folder.server.clear_requests()
        ds[[0, 199]]
        seen = http_folder.requests()
        stats = ds.remote_stats()
        index_gets = [r for r in seen if r.path.endswith((".zri", ".zrs"))]
        assert stats["index_requests"] == len(index_gets) > 0
        assert stats["index_bytes"] == sum(r.body_bytes for r in index_gets) <= index
        assert stats["requests"] == len(seen) - len(index_gets) > 0
        assert stats["open_requests"] == 1
    # The whole path (validate="full"): the GET of header.zrh, HEADs of both shards, index.zri and index.zrs, GETs of index.zri and index.zrs.
    http_folder.server.clear_requests()
    with Dense.open(url, storage_options=shared, validate="full") as ds:
        seen = http_folder.requests()
        stats = ds.remote_stats()
        assert stats["open_requests"] == len(seen) == 7
        assert stats["open_bytes"] == header + index == sum(r.body_bytes for r in seen)
        assert stats["requests"] == 0 and stats["bytes"] == 0
    # A mirror that exists already: open fetches no index.
    with Dense.open(url, storage_options=shared, validate="full") as again:
        assert again.remote_stats()["open_bytes"] == header
        assert again.remote_stats()["open_requests"] == 5


# --- storage options: the CLI and the documentation -------------------------------------------


def test_every_command_that_takes_a_store_takes_endpoint_url(s3_server, s3_bucket, store,
                                                             credentials_only, capsys):
    """Only publish took --endpoint-url; the others needed AWS_ENDPOINT_URL."""
    import argparse

    from zrecord.cli import _parser

    url = _upload(s3_bucket, "cli", store[0])
    ep = ["--endpoint-url", s3_server.endpoint_url]
    assert main(["info", url, "--json", *ep]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 200
    assert main(["verify", url, "-q", *ep]) == 0
    assert main(["head", url, "-n", "1", *ep]) == 0
    assert main(["stats", url, *ep]) == 0
    capsys.readouterr()
    # One definition for all: every subcommand with a PATH has it.
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        flags = {f for a in parser._actions for f in a.option_strings}
        assert "--endpoint-url" in flags, name
    # A local path has no endpoint: a usage error, not ignored.
    assert main(["info", str(store[0]), *ep]) == 2
    assert "--endpoint-url is for a store in S3" in capsys.readouterr().err


def test_every_storage_option_is_documented():
    """Dense.open's docstring did not mention cache_bytes (nor skip_signature)."""
    from pathlib import Path

    from zrecord._objects import _S3_KEYS, DEFAULTS
    from zrecord._types import StorageOptions

    accepted = set(DEFAULTS) | set(_S3_KEYS)
    assert set(StorageOptions.__annotations__) == accepted
    guide = (Path(__file__).parents[3] / "docs" / "guides" / "object-storage.md").read_text()
    for key in sorted(accepted):
        assert f"``{key}``" in (Dense.open.__doc__ or ""), key
        assert f"`{key}`" in guide, key
