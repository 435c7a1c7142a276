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
    assert "pip install ./packages/zrecord ./packages/loaderx-converter" in out.stdout


def test_converter_import_with_the_distribution():
    import loaderx.converter
    import loaderx_converter

    assert loaderx.converter.__version__ == loaderx_converter.__version__
    # The converter's whole public API, each the same object (a star import, which type
    # checkers follow: the typing snippets of tests/typing check that side).
    assert sorted(loaderx.converter.__all__) == sorted(loaderx_converter.__all__)
    for name in loaderx_converter.__all__:
        assert getattr(loaderx.converter, name) is getattr(loaderx_converter, name)


def test_loaderx_zrecord_round_trips_the_dtypes_of_format_1_1(tmp_path):
    """The user's contract through the seed's import path: datetime64, timedelta64, S<n>, U<n>
    and V<n> records, raw and zstd, Dense and Ragged, byte for byte; and a DataLoader batch."""
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Dense, Ragged

    streams = {}
    for k, dtype in enumerate(["M8[ns]", "m8[s]", "S3", "U2", "V4"]):
        dt = np.dtype(dtype)
        data = np.arange(8 * 2 * dt.itemsize, dtype=np.uint64).astype(np.uint8).view(dt).reshape(8, 2)
        if dt.kind == "M":
            data[0, 0] = np.datetime64("NaT")
        for codec in ("raw", "zstd"):
            dense, ragged = tmp_path / f"d{k}{codec}", tmp_path / f"r{k}{codec}"
            with Dense.create(dense, dt, (2,), codec=codec) as w:
                w.append(data)
            with Ragged.create(ragged, dt, 1, codec=codec) as w:
                w.append([data[i, : i % 3] for i in range(8)])
            with Dense.open(dense) as s:
                assert s.dtype == dt and s[:].tobytes() == data.tobytes()
            with Ragged.open(ragged) as s:
                assert [r.tobytes() for r in s[:]] == [data[i, : i % 3].tobytes() for i in range(8)]
        streams[dtype] = Dense.open(tmp_path / f"d{k}raw")
    sampler = Sampler(8, 4, Sampler.Mode.SEQUENTIAL, seed=0)
    loader = DataLoader(streams, sampler)
    batch = next(loader)
    loader.close()
    for dtype, store in streams.items():
        assert batch[dtype].dtype == np.dtype(dtype) and batch[dtype].shape == (4, 2)
        assert batch[dtype].tobytes() == store[:4].tobytes()
        store.close()


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
