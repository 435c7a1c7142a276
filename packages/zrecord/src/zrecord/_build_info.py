"""Which zstd this build of zrecord runs: ``zrecord.__zstd_version__``.

The build writes ``_build.json`` beside this module (packages/build_support.py). A wheel that
carries its own zstd (``"zstd_linkage": "static"``: the release wheels) records the version it
was compiled from. A build that links the platform's ``libzstd.so.1`` (the default when
building from source) runs whatever version the system has at run time, so that one is asked
for, from the library the extension loaded.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path


def build_info() -> dict[str, str]:
    """The build's record: zstd_linkage, zstd_version (static builds), zstd_source, target.

    A tree built before the build wrote the record linked the platform's libzstd."""
    path = Path(__file__).parent / "_build.json"
    if not path.is_file():
        return {"zstd_linkage": "system"}
    info: dict[str, str] = json.loads(path.read_text())
    return info


def zstd_version() -> str:
    """The version of the zstd library that zrecord's codecs run, e.g. ``"1.5.7"``."""
    info = build_info()
    if info["zstd_linkage"] == "static":
        return info["zstd_version"]
    import zrecord._native  # noqa: F401  (loads libzstd.so.1, so the next line finds it)

    lib = ctypes.CDLL("libzstd.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
    number = int(lib.ZSTD_versionNumber())
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"
