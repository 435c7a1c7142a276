"""Warm random gathers of a raw Dense store against NumPy fancy indexing on a memory map of
the same records, batch by batch in one process.

bench_dense.py times each backend for seconds in turn, each in its own process, and on a
shared machine its rounds differ by 2x; this script alternates the two on the same fresh
random batch, so whatever else runs slows both alike. Both outputs are compared after every
round. The ratio is NumPy's time over ours (above 1: ours is faster).

Usage: python benchmarks/stores/bench_vs_numpy.py [--data DIR] [--workload token_blocks]
       [--rounds 9] [--batches 2000] [--batch 256] [--tmp /dev/shm]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import zrecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import default_data
from common.device import work_folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=default_data())
    ap.add_argument("--workload", default="token_blocks", help="a Dense .npy of --data")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tmp", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    type=work_folder,
                    help="folder for the stores, made if missing")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        source = np.load(Path(args.data) / f"{args.workload}.npy", mmap_mode="r")
        np.save(Path(tmp) / "copy.npy", source)  # both sides read from the same folder
        src = np.load(Path(tmp) / "copy.npy", mmap_mode="r")
        with zrecord.Dense.create(Path(tmp) / "store", src.dtype, src.shape[1:],
                                  codec="raw") as w:
            w.append(src)
        store = zrecord.Dense.open(Path(tmp) / "store")
        store.verify()  # warm: every checksum checked, every page cached
        rng = np.random.default_rng(0)
        ratios = []
        print(f"{args.workload}: {len(src):,} records of {src.shape[1:]} {src.dtype}, "
              f"batch {args.batch}, zrecord {zrecord.__version__}, numpy {np.__version__}")
        for r in range(args.rounds):
            ours = theirs = 0.0
            for _ in range(args.batches):
                idx = rng.integers(0, len(src), args.batch)
                t0 = time.perf_counter()
                a = store[idx]
                t1 = time.perf_counter()
                b = src[idx]
                ours, theirs = ours + t1 - t0, theirs + time.perf_counter() - t1
            if not np.array_equal(a, b):
                raise SystemExit("the store and the memory map disagree")
            ratios.append(theirs / ours)
            print(f"round {r}: zrecord {ours / args.batches * 1e6:.1f} us/batch, NumPy "
                  f"{theirs / args.batches * 1e6:.1f} us/batch, NumPy/zrecord {ratios[-1]:.3f}")
        store.close()
    print(f"median NumPy/zrecord time ratio {statistics.median(ratios):.2f}x "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}) over {args.rounds} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
