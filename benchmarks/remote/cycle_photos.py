"""A data folder for the network benchmarks with more photographs than the real ones: its
`vision_dense.npy` holds the real photographs of DATA (benchmarks/prepare_data.py) repeated in
order up to `--records` records; every other file of DATA is linked, not copied.

A uniform random read of the 4,000 records the benchmarks' tables used at first lasts under a
second at the fast server's rate, so filling and draining its prefetch weighed in its figure;
20,000 records (2.9 GB) keep the same run in its steady state for four seconds.

Usage: python benchmarks/remote/cycle_photos.py DATA OUT --records 20000
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", type=Path, help="a folder made by benchmarks/prepare_data.py")
    ap.add_argument("out", type=Path, help="a new folder")
    ap.add_argument("--records", type=int, default=20000, help="photographs in the new folder")
    args = ap.parse_args()
    source = args.data / "vision_dense.npy"
    if not source.is_file():
        raise SystemExit(f"{source} is missing: run benchmarks/prepare_data.py {args.data} first")
    if args.records < 1:
        raise SystemExit(f"--records {args.records}: at least 1 is required")
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: a new folder is required")
    args.out.mkdir(parents=True)
    for entry in sorted(args.data.iterdir()):
        if entry.name != "vision_dense.npy":
            os.symlink(entry.resolve(), args.out / entry.name)
    photos = np.load(source, mmap_mode="r")
    out = np.lib.format.open_memmap(args.out / "vision_dense.npy.part", mode="w+", dtype=photos.dtype,
                                    shape=(args.records, *photos.shape[1:]))
    for start in range(0, args.records, photos.shape[0]):  # 3 GB in about 2 s: no progress bar
        n = min(photos.shape[0], args.records - start)
        out[start:start + n] = photos[:n]
    out.flush()
    del out
    os.replace(args.out / "vision_dense.npy.part", args.out / "vision_dense.npy")
    print(f"{args.out}: {args.records:,} photographs ({photos.shape[0]:,} real ones repeated)")


if __name__ == "__main__":
    main()
