"""Smoke test of an install from the wheelhouse, run by the `wheelhouse` nox session.

Run with the python of a fresh virtual environment into which only wheels were installed,
and with no compiler on PATH: write, read, load and convert, the way a new user would, and
check that the wheels need nothing the machine must provide besides glibc. Exits non-zero
(an AssertionError) on the first thing that is wrong; prints one line per step.

Usage: python smoke_install.py EXPECTED_ZSTD_VERSION
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile

import numpy as np


def no_toolchain() -> None:
    found = {tool: shutil.which(tool) for tool in ("cc", "gcc", "clang", "zig", "ld")}
    assert not any(found.values()), f"a compiler is on PATH: {found}"
    for module in ("ziglang", "Cython", "hatchling"):
        assert importlib.util.find_spec(module) is None, f"build-time {module} is installed"
    print("no compiler on PATH, no build tool installed")


def write_and_read(root: str, expected_zstd: str) -> str:
    import zrecord

    images = np.random.default_rng(0).integers(0, 255, (64, 3, 8, 8), dtype=np.uint8)
    path = os.path.join(root, "images")
    with zrecord.Dense.create(path, np.uint8, (3, 8, 8), codec="zstd") as w:
        w.append(images)
    tokens = [np.arange(n, dtype=np.int32) for n in range(1, 40)]
    with zrecord.Ragged.create(os.path.join(root, "tokens"), np.int32, 1, codec="zstd_dict",
                               dict_bytes=zrecord.train_dict(tokens * 20)) as w:
        w.append(tokens)
    with zrecord.Dense.open(path) as store:
        assert np.array_equal(store[[5, 1, 63]], images[[5, 1, 63]])
        store.verify()
    with zrecord.Ragged.open(os.path.join(root, "tokens")) as store:
        assert all(np.array_equal(store[i], tokens[i]) for i in range(len(tokens)))
    assert zrecord.__zstd_version__ == expected_zstd, zrecord.__zstd_version__
    # The wheel carries its own zstd: nothing loaded the machine's libzstd.so.1.
    with open("/proc/self/maps") as maps:
        mapped = {line.split()[-1] for line in maps if "libzstd" in line}
    assert not mapped, f"the platform's zstd was loaded: {mapped}"
    print(f"zrecord {zrecord.__version__} wrote and read Dense zstd and Ragged zstd_dict stores "
          f"with its own zstd {zrecord.__zstd_version__}")
    return path


def load(path: str) -> None:
    import loaderx
    from loaderx.dataloader import DataLoader
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Dense

    streams = {"image": Dense.open(path)}
    sampler = Sampler(len(streams["image"]), 16, Sampler.Mode.CYCLIC, seed=7)
    seen = []
    with DataLoader(streams, sampler, workers=2, prefetch=2) as loader:
        for _ in range(4):
            batch = next(loader)
            assert batch["image"].shape == (16, 3, 8, 8)
            seen.append(batch["image"])
    assert sum(len(b) for b in seen) == 64
    streams["image"].close()
    print(f"loaderx {loaderx.__version__} loaded one epoch in 4 batches")


def convert(root: str) -> None:
    import datasets

    import loaderx_converter
    from loaderx.converter import convert, from_local
    from loaderx.zrecord import open_store

    source = os.path.join(root, "saved")
    datasets.Dataset.from_dict({"x": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "y": [0, 1, 2]}
                               ).save_to_disk(source)
    out = os.path.join(root, "converted")
    convert(from_local(source), out, progress=False)
    with open_store(os.path.join(out, "train", "x")) as x, open_store(os.path.join(out, "train", "y")) as y:
        assert x[2].tolist() == [5.0, 6.0] and [int(y[i]) for i in range(3)] == [0, 1, 2]
    print(f"loaderx-converter {loaderx_converter.__version__} converted a saved dataset")


def main() -> int:
    expected_zstd = sys.argv[1]
    no_toolchain()
    with tempfile.TemporaryDirectory() as root:
        path = write_and_read(root, expected_zstd)
        load(path)
        convert(root)
    print("install from the wheelhouse: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
