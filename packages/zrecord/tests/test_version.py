"""The version plumbing: one version per distribution, and the zstd that this build runs."""

from __future__ import annotations

import ctypes
import importlib.metadata
import re

import zrecord
from zrecord._build_info import build_info


def test_version_is_the_distributions():
    assert zrecord.__version__ == importlib.metadata.version("zrecord")


def test_zstd_version_names_the_library_the_codecs_run():
    version = zrecord.__zstd_version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    info = build_info()
    native = ctypes.CDLL(zrecord._native.__file__)
    if info["zstd_linkage"] == "static":
        assert version == info["zstd_version"]
        # Built in and hidden: the extension exports its module init function, no zstd symbol
        # that could clash with another zstd in the process.
        assert not hasattr(native, "ZSTD_versionNumber")
    else:
        # The platform's libzstd.so.1, loaded with the extension.
        number = ctypes.CDLL("libzstd.so.1").ZSTD_versionNumber()
        assert version == f"{number // 10000}.{number // 100 % 100}.{number % 100}"


def test_unknown_attribute_is_an_attribute_error():
    assert not hasattr(zrecord, "__no_such_thing__")
