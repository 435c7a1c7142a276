"""pytest fixtures of the loopback servers, for every suite of an environment with the kit.

The package's ``pytest11`` entry point loads this module into any pytest run, so a test asks
for a server by naming its fixture, with no conftest import (``-p no:zrecord_testkit`` turns
the plugin off). One moto_server and one RangeHTTPServer per test session, started on first
use and shared by every test that asks; each test gets its own bucket or folder, so tests stay
independent. :mod:`zrecord_testkit.servers` is imported inside the fixtures, so sessions that
run no remote test never load it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from zrecord_testkit.servers import HTTPFolder, RangeHTTPServer, S3Bucket, S3Server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto_server on 127.0.0.1 (a free port) for the whole session; see S3Server: its
    `endpoint_url`, `credentials`, `env()` (AWS_* variables for a client), `client()` (a
    stdlib SigV4 client), `boto3_client()`, `new_bucket()`. Raises, never skips, when
    moto_server is not installed (pip install 'moto[server]', or the kit's s3 extra)."""
    from zrecord_testkit.servers import S3Server

    with S3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[S3Bucket]:
    """A new, empty bucket of the session's moto_server for this test alone (S3Bucket: `name`,
    `put`, `get(byte_range=)`, `head`, `delete`, `keys`, `url(key)`); deleted afterwards."""
    bucket = s3_server.new_bucket()
    yield bucket
    bucket.destroy()


@pytest.fixture(scope="session")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RangeHTTPServer]:
    """A RangeHTTPServer on 127.0.0.1 for the whole session, serving a session temporary
    folder read-only (`url`, `root`, `url_for(path)`, `requests()`)."""
    from zrecord_testkit.servers import RangeHTTPServer

    with RangeHTTPServer(tmp_path_factory.mktemp("http-root")) as server:
        yield server


@pytest.fixture
def http_folder(http_server: RangeHTTPServer) -> Iterator[HTTPFolder]:
    """This test's own folder under the session's RangeHTTPServer root (HTTPFolder: `path`,
    `url`, `url_for(name)`, `write(name, data)`, `requests()`); removed afterwards."""
    import shutil
    import uuid

    from zrecord_testkit.servers import HTTPFolder

    folder = http_server.root / f"t-{uuid.uuid4().hex[:16]}"
    folder.mkdir()
    yield HTTPFolder(http_server, folder)
    shutil.rmtree(folder, ignore_errors=True)
