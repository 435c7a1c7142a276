"""The seed's import paths keep working on top of the separate distributions."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

import zrecord


def test_loaderx_zrecord_reexports_zrecord():
    import loaderx.zrecord as lz

    assert lz.Dense is zrecord.Dense
    assert lz.Ragged is zrecord.Ragged
    assert set(lz.__all__) <= set(dir(zrecord))


def test_loaderx_utils(tmp_path):
    from loaderx.utils import open_store

    with zrecord.Dense.create(tmp_path / "s", np.int8, (), codec="raw") as w:
        w.append(np.arange(3, dtype=np.int8))
    with open_store(tmp_path / "s") as s:
        assert s[:].tolist() == [0, 1, 2]


def test_converter_import_without_the_distribution_names_the_install_command():
    # A blocker on sys.meta_path hides loaderx_converter, as if it were not installed.
    code = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'loaderx_converter':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "try:\n"
        "    import loaderx.converter\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'loaderx[converter]'" in out.stdout


def test_converter_import_with_the_distribution():
    import loaderx.converter
    import loaderx_converter

    assert loaderx.converter.__version__ == loaderx_converter.__version__


def test_top_level_names_are_the_module_classes():
    """[U1] 3: `from loaderx import DataLoader, Sampler`, beside the seed's module paths."""
    import loaderx
    import loaderx.dataloader
    import loaderx.sampler
    from loaderx import DataLoader, LoaderClosedError, Mix, Mode, Sampler

    assert DataLoader is loaderx.dataloader.DataLoader
    assert LoaderClosedError is loaderx.dataloader.LoaderClosedError
    assert Sampler is loaderx.sampler.Sampler and Mix is loaderx.sampler.Mix
    assert Mode is Sampler.Mode
    assert set(loaderx.__all__) == {"BatchContext", "DataLoader", "LoaderClosedError", "Mix",
                                    "Mode", "Sampler"}


def test_torch_import_without_torch_names_the_install_command():
    """[U1] 3: like loaderx.converter and loaderx.ray, loaderx.torch says how to install
    what it needs instead of a bare ModuleNotFoundError."""
    code = (
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "import loaderx\n"
        "try:\n"
        "    import loaderx.torch\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "loaderx.torch needs PyTorch" in out.stdout and "pip install torch" in out.stdout
