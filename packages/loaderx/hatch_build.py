"""Hatchling build hook: builds the native extension (see build_support.py) into the wheel."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_support import EXTENSION, build_extension  # noqa: E402


class CustomBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        out = build_extension(root, verbose=True)
        build_data["pure_python"] = False
        plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
        build_data["tag"] = f"cp310-abi3-{plat}"
        if version != "editable":
            # The extension is git-ignored, so it must be named explicitly for the wheel.
            build_data["force_include"][str(out)] = f"loaderx/{EXTENSION}"
