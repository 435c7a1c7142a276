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


# The servers of the `remote` tests (s3_server, s3_bucket, http_server, http_folder) are the
# fixtures of the development test kit (packages/zrecord-testkit), which pytest loads through
# its entry point wherever the kit is installed.
