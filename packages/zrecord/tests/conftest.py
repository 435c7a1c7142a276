"""Shared fixtures of the zrecord tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from zrecord import _dtypes


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    """A path inside a fresh temporary directory where no store exists yet."""
    return os.fspath(tmp_path / "store")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# Every dtype the format has, from the package's table (which the native core provides).
ALL_DTYPES = [dt.name for dt in _dtypes._DTYPES.values()]


def random_array(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values that exercise every bit pattern class of `dtype` (sign, NaN, inf, extremes)."""
    dt = np.dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape, dtype=np.int64)) * dt.itemsize,
                       dtype=np.uint8)
    if dt.kind == "b":
        return (raw % 2).astype(bool).reshape(shape)
    return raw.view(dt).reshape(shape)


def pytest_configure(config: pytest.Config) -> None:
    """Readers write compact indexes to an index cache folder (``ZRECORD_INDEX_CACHE``); a test
    run uses its own, not the user's ``~/.cache``, unless the environment names one, and
    removes it at its end."""
    if "ZRECORD_INDEX_CACHE" not in os.environ:
        import atexit
        import shutil
        import tempfile

        os.environ["ZRECORD_INDEX_CACHE"] = tempfile.mkdtemp(prefix="zrecord-test-index-")
        atexit.register(shutil.rmtree, os.environ["ZRECORD_INDEX_CACHE"], True)


# --- Servers on loopback for the `remote` tests (remote_servers.py) ---------------------------
# One moto_server and one RangeHTTPServer per test session, started on first use and shared by
# every remote test; each test gets its own bucket or folder, so tests stay independent.
# remote_servers is imported inside the fixtures (it sits beside this file, on sys.path while
# the tests run), so sessions that run no remote test never touch it.

from collections.abc import Iterator  # noqa: E402 (imports of the appended section)
from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    from remote_servers import HTTPFolder, RangeHTTPServer, S3Bucket, S3Server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto_server on 127.0.0.1 (a free port) for the whole session; see S3Server: its
    `endpoint_url`, `credentials`, `env()` (AWS_* variables for a client), `client()` (a
    stdlib SigV4 client), `boto3_client()`, `new_bucket()`. Raises, never skips, when
    moto_server is not installed (pip install 'moto[server]')."""
    _tests_dir_on_path()
    from remote_servers import S3Server

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
    _tests_dir_on_path()
    from remote_servers import RangeHTTPServer

    with RangeHTTPServer(tmp_path_factory.mktemp("http-root")) as server:
        yield server


@pytest.fixture
def http_folder(http_server: RangeHTTPServer) -> Iterator[HTTPFolder]:
    """This test's own folder under the session's RangeHTTPServer root (HTTPFolder: `path`,
    `url`, `url_for(name)`, `write(name, data)`, `requests()`); removed afterwards."""
    import shutil
    import uuid

    from remote_servers import HTTPFolder

    folder = http_server.root / f"t-{uuid.uuid4().hex[:16]}"
    folder.mkdir()
    yield HTTPFolder(http_server, folder)
    shutil.rmtree(folder, ignore_errors=True)


def _tests_dir_on_path() -> None:
    """remote_servers.py is importable under any --import-mode (as netlink.py is)."""
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
