"""The converter distribution installs and imports on its own, beside zrecord."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys


def test_version_matches_metadata():
    import loaderx_converter

    assert loaderx_converter.__version__ == importlib.metadata.version("loaderx-converter")


def test_importing_it_does_not_import_loaderx():
    code = "import sys, loaderx_converter; print('loaderx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
