"""Open time of a 10-million-record store: two or more builds of zrecord, alternating.

Writes (once, with the zrecord on the default path) a Ragged int8 raw store of 10,000,000
records of 1..4 bytes in 4 shards (a 320 MB index and 25 MB of shards), then opens it with
each build (folders holding a `zrecord` package with its compiled `_native.abi3.so`) in a
fresh process per open, builds in rotating order, for --rounds rounds. Each open reports its
time, the time of the first `verify` of an empty range less that of a second one (the layout
check of decision record 0001 section 15, for builds that run it in verify), and the process's
peak RSS. The table gives medians with min..max.

Usage: python benchmarks/index/bench_open.py --builds old=DIR,new=DIR [--rounds 15]
       [--store /dev/shm/zr-10m] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

CHILD = r"""
import os, sys, time
from zrecord import _native
assert sys.argv[2] in _native.__file__, _native.__file__
# Builds since [H1] step 3 own their handle in a _native.Reader; earlier ones used integers.
if hasattr(_native, "Reader"):
    t0 = time.perf_counter()
    r = _native.Reader(os.fsencode(sys.argv[1]))
    t1 = time.perf_counter()
    r.verify(0, 0)
    t2 = time.perf_counter()
    r.verify(0, 0)
    t3 = time.perf_counter()
    r.close()
else:
    t0 = time.perf_counter()
    h = _native.reader_open(os.fsencode(sys.argv[1]))
    t1 = time.perf_counter()
    _native.reader_verify(h, 0, 0)
    t2 = time.perf_counter()
    _native.reader_verify(h, 0, 0)
    t3 = time.perf_counter()
    _native.reader_free(h)
with open("/proc/self/status") as f:
    hwm = [line.split()[1] for line in f if line.startswith("VmHWM")][0]
print(t1 - t0, (t2 - t1) - (t3 - t2), hwm)
"""


def build_store(path: str) -> None:
    from zrecord import Ragged

    if os.path.exists(os.path.join(path, "header.zrh")):
        return
    n = 10_000_000
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 5, size=n)
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    flat = rng.integers(-128, 128, size=int(starts[-1]), dtype=np.int8)
    t = time.perf_counter()
    with Ragged.create(path, np.int8, 1, codec="raw", data_shards=4) as w:
        w.append(flat[starts[i]:starts[i + 1]] for i in range(n))
    print(f"wrote {n:,} records in {time.perf_counter() - t:.1f} s", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--builds", required=True, help="NAME=DIR,NAME=DIR,...")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--store", default="/dev/shm/zr-10m")
    ap.add_argument("--keep", action="store_true", help="keep the store for another run")
    args = ap.parse_args()
    builds = dict(item.split("=", 1) for item in args.builds.split(","))
    build_store(args.store)
    try:
        results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in builds}
        names = list(builds)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                out = subprocess.run([sys.executable, "-c", CHILD, args.store, builds[name]],
                                     env=dict(os.environ, PYTHONPATH=builds[name]),
                                     capture_output=True, text=True, check=True)
                opened, layout, hwm = out.stdout.split()
                results[name].append((float(opened), float(layout), int(hwm)))
        for name, rows in results.items():
            opened = [row[0] for row in rows]
            layout = [row[1] for row in rows]
            hwm = [row[2] for row in rows]
            print(f"{name:10s} open {statistics.median(opened):.3f} s ({min(opened):.3f}.."
                  f"{max(opened):.3f})  first verify less second {statistics.median(layout):.3f} s"
                  f"  peak RSS {statistics.median(hwm) / 1024:.0f} MiB")
    finally:
        if not args.keep:
            shutil.rmtree(args.store, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
