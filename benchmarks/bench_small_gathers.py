"""Warm random gathers of small raw records: two or more builds of the core, interleaved.

Compares builds of zrecord's native extension (folders holding a `zrecord` package with its
compiled `_native.abi3.so`, e.g. copies of packages/zrecord/src taken before and after a
change) in one process: each build's extension is loaded under its own module name, opens the
same stores, and the builds take turns batch by batch (in rotating order, each with batches of
its own), so that whatever else runs on a shared machine slows all of them alike. Each round
opens every build's reader afresh, in rotated order. Only the native gather call is timed,
into an output reused across calls: the Python layer around it is the same for every build.

Workloads (synthetic, shaped like the token data of benchmarks/README.md):

  dense-2k     Dense int32 (512,) records (2 KiB token blocks), raw, 65,536 records
  ragged-230   Ragged int32 records of 16..100 tokens (~230 B on average), raw, 127,633 records

"Warm": every record is verified and the stores are in the page cache before timing, as in a
training run after its first epoch. Each round times --batches fresh uniform random batches
per build; a round reports each build's median batch as records per second and, for each
build, the ratio of its median to the first build's. The table gives the median over rounds.

With --data DIR (the prepared real data of benchmarks/README.md), three more workloads are
built from it, so that the compressed and large-record paths are compared too:

  vision-raw   Dense uint8 (3, 224, 224) photographs, raw (the pread path)
  vision-zstd  the same, zstd
  tokens-zstd  Ragged int32 token records, zstd

Usage: python benchmarks/bench_small_gathers.py --builds old=DIR,new=DIR [--rounds 15]
       [--batches 2000] [--batch 256] [--tmp /dev/shm] [--data DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np

WORKLOADS = ("dense-2k", "ragged-230")
REAL_WORKLOADS = ("vision-raw", "vision-zstd", "tokens-zstd")


def make_stores(folder: str) -> dict[str, str]:
    from zrecord import Dense, Ragged

    rng = np.random.default_rng(0)
    paths = {"dense-2k": os.path.join(folder, "dense-2k"),
             "ragged-230": os.path.join(folder, "ragged-230")}
    with Dense.create(paths["dense-2k"], np.int32, (512,), codec="raw", data_shards=4) as w:
        for _ in range(16):
            w.append(rng.integers(0, 50_000, size=(4096, 512), dtype=np.int32))
    lengths = rng.integers(16, 101, size=127_633)
    tokens = rng.integers(0, 50_000, size=int(lengths.sum()), dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    with Ragged.create(paths["ragged-230"], np.int32, 1, codec="raw", data_shards=4) as w:
        w.append(tokens[starts[i]:starts[i + 1]] for i in range(len(lengths)))
    return paths


def make_real_stores(folder: str, data: str) -> dict[str, str]:
    from zrecord import Dense, Ragged

    paths = {name: os.path.join(folder, name) for name in REAL_WORKLOADS}
    images = np.load(os.path.join(data, "vision_dense.npy"), mmap_mode="r")
    for codec in ("raw", "zstd"):
        with Dense.create(paths[f"vision-{codec}"], np.uint8, images.shape[1:], codec=codec) as w:
            w.append(images)
    tokens = np.load(os.path.join(data, "tokens.npy"), mmap_mode="r")
    offsets = np.load(os.path.join(data, "offsets.npy"))
    with Ragged.create(paths["tokens-zstd"], np.int32, 1, codec="zstd") as w:
        w.append(tokens[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1))
    return paths


def load_native(name: str, folder: str) -> Any:
    """The `_native` extension of the build in `folder`, as its own module."""
    path = os.path.join(folder, "zrecord", "_native.abi3.so")
    spec = importlib.util.spec_from_file_location(f"zr_build_{name}._native", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Handle:
    """One build's reader, through the binding API that build has: `_native.Reader` objects
    (since [H1] step 3) or the module functions on integer handles of earlier builds."""

    def __init__(self, native: Any, path: str) -> None:
        self.native = native
        if hasattr(native, "Reader"):
            self.reader = native.Reader(os.fsencode(path))
        else:
            self.handle = native.reader_open(os.fsencode(path))

    def call(self, name: str, *args: Any) -> Any:
        if hasattr(self, "reader"):
            return getattr(self.reader, name)(*args)
        return getattr(self.native, f"reader_{name}")(self.handle, *args)

    def free(self) -> None:
        if hasattr(self, "reader"):
            self.reader.close()
            del self.reader
        else:
            self.native.reader_free(self.handle)


def prepare(native: Any, path: str, batches: list[np.ndarray]) -> tuple[Handle, Any]:
    """Open `path` with `native`, verify every record, and return the handle and a function
    that gathers batch k."""
    handle = Handle(native, path)
    info = handle.call("info")
    handle.call("verify", 0, info["record_count"])
    batch = len(batches[0])
    if info["kind"] == 1:
        out = np.empty(batch * info["record_size"], np.uint8)

        def gather(k: int) -> None:
            handle.call("gather_dense", batches[k], batch, out)
    else:
        offsets = []
        for idx in batches:
            shapes = np.empty((batch, info["ndim"]), np.uint64)
            sizes = np.empty(batch, np.uint64)
            handle.call("shapes", idx, batch, info["ndim"], shapes, sizes)
            offsets.append(np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.uint64))
        out = np.empty(max(int(o[-1]) for o in offsets) + (1 << 20), np.uint8)

        def gather(k: int) -> None:
            handle.call("gather_ragged", batches[k], batch, out, offsets[k])
    for k in range(min(64, len(batches))):
        gather(k)
    return handle, gather


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--builds", required=True, help="NAME=DIR,NAME=DIR,... (the first is the base)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--batches", type=int, default=2000, help="batches per build per round")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--data", default=None, help="prepared real data: adds " + ", ".join(REAL_WORKLOADS))
    args = ap.parse_args()
    builds = dict(item.split("=", 1) for item in args.builds.split(","))
    names = list(builds)
    import zrecord  # noqa: F401 - the package first: a build's module imports zrecord.errors
    natives = {name: load_native(name, folder) for name, folder in builds.items()}
    folder = tempfile.mkdtemp(prefix="zr-bench-small-", dir=args.tmp)
    try:
        paths = make_stores(folder)
        workloads = list(WORKLOADS)
        if args.data:
            paths.update(make_real_stores(folder, args.data))
            workloads += REAL_WORKLOADS
        print(f"records/s of the median batch (batch {args.batch}, {args.batches} batches per "
              f"build per round, {args.rounds} rounds): median over rounds (min..max); ratio to "
              f"{names[0]}: median of the rounds' ratios (min..max)")
        for workload in workloads:
            with open(os.path.join(paths[workload], "header.zrh"), "rb") as f:
                count = int.from_bytes(f.read()[24:32], "little")
            rates: dict[str, list[float]] = {name: [] for name in names}
            ratios: dict[str, list[float]] = {name: [] for name in names}
            for r in range(args.rounds):
                # Every round opens the builds' readers afresh, in rotated order, and gives each
                # its own batches (with shared ones, whichever build ran a batch second would
                # find its records in the CPU caches). Identical builds differ by up to ~10%
                # within one round, by where their index copies and mappings happen to lie;
                # rotating and re-drawing spreads that over all builds.
                order = names[r % len(names):] + names[:r % len(names)]
                gathers = {}
                handles = {}
                for b, name in enumerate(order):
                    rng = np.random.default_rng(1000 * r + b)
                    batches = [rng.integers(0, count, size=args.batch, dtype=np.uint64)
                               for _ in range(args.batches)]
                    handles[name], gathers[name] = prepare(natives[name], paths[workload], batches)
                times: dict[str, list[int]] = {name: [] for name in names}
                for k in range(args.batches):
                    shift = k % len(names)
                    for name in order[shift:] + order[:shift]:
                        t0 = time.perf_counter_ns()
                        gathers[name](k)
                        times[name].append(time.perf_counter_ns() - t0)
                medians = {name: statistics.median(t) for name, t in times.items()}
                for name in names:
                    rates[name].append(args.batch / (medians[name] * 1e-9))
                    ratios[name].append(medians[names[0]] / medians[name])
                for name in names:
                    handles[name].free()
            for name in names:
                v, q = rates[name], ratios[name]
                print(f"  {workload:11s} {name:8s} {statistics.median(v):>12,.0f} "
                      f"({min(v):,.0f}..{max(v):,.0f})  {statistics.median(q):.3f}x "
                      f"({min(q):.3f}..{max(q):.3f})")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
