"""Shared fixtures of the zrecord tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    """A path inside a fresh temporary directory where no store exists yet."""
    return os.fspath(tmp_path / "store")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


ALL_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"]


def random_array(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values that exercise every bit pattern class of `dtype` (sign, NaN, inf, extremes)."""
    dt = np.dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape, dtype=np.int64)) * dt.itemsize,
                       dtype=np.uint8)
    if dt.kind == "b":
        return (raw % 2).astype(bool).reshape(shape)
    return raw.view(dt).reshape(shape)
