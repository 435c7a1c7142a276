"""Scaling of loaderx.ray.read_zrecord with the number of Ray workers on this machine.

Two workloads from the prepared real data (benchmarks/README.md), each written once to
zrecord stores and read as a Ray Dataset by a local Ray instance with 1, then 2, ... CPUs:

  tokens  Ragged int32 GPT-2 token records (tokens.npy + offsets.npy), zstd, plus an aligned
          Dense int64 column (each record's length)
  vision  Dense uint8 (3, 224, 224) photographs (vision_dense.npy), raw

Two consumers per setting, each after one untimed warm-up pass (page cache, worker start-up),
beside the baseline of the same stores read without Ray, in this process, on one thread:

  in workers  read_zrecord(...).map_batches(count) fused into the read tasks; only the
              per-block counts reach the driver: the read path itself
  driver      ds.iter_batches() in this process: every block travels through Ray's object
              store to the driver

Prints a Markdown table of records/s and logical MiB/s (decoded payload bytes per second).

Usage: python benchmarks/bench_ray.py [--data DIR] [--workers 1,2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray

from loaderx.ray import read_zrecord
from zrecord import Dense, Ragged, open_store

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "data"


def write_stores(data: Path, root: Path) -> dict[str, tuple[dict[str, Path], int, int]]:
    """{workload: (streams, records, logical bytes)}."""
    tokens = np.load(data / "tokens.npy", mmap_mode="r")
    offsets = np.load(data / "offsets.npy")
    lengths = np.diff(offsets).astype(np.int64)
    with Ragged.create(root / "tokens", np.int32, 1, codec="zstd", sync=False) as w:
        w.append(tokens[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()))
    with Dense.create(root / "length", np.int64, (), codec="raw", sync=False) as w:
        w.append(lengths)
    vision = np.load(data / "vision_dense.npy", mmap_mode="r")
    with Dense.create(root / "image", vision.dtype, vision.shape[1:], codec="raw",
                      sync=False) as w:
        w.append(vision)
    return {
        "tokens": ({"tokens": root / "tokens", "length": root / "length"}, len(lengths),
                   int(tokens.nbytes + lengths.nbytes)),
        "vision": ({"image": root / "image"}, len(vision), int(vision.nbytes)),
    }


def _count(batch: dict[str, Any]) -> dict[str, Any]:
    return {"rows": np.array([len(next(iter(batch.values())))], dtype=np.int64)}


def in_workers(streams: dict[str, Path], parallelism: int) -> int:
    ds = read_zrecord(streams, parallelism=parallelism).map_batches(_count, batch_size=None)
    # take_all() of the per-block counts: Dataset.sum() would add an aggregation stage
    # costing seconds, more than the read itself.
    return sum(int(r["rows"]) for r in ds.take_all())


def in_driver(streams: dict[str, Path], parallelism: int) -> int:
    ds = read_zrecord(streams, parallelism=parallelism)
    return sum(len(next(iter(b.values()))) for b in ds.iter_batches(batch_size=None))


def no_ray(streams: dict[str, Path], parallelism: int) -> int:
    """The baseline: the same stores read in this process, one thread, in 64 MiB ranges."""
    stores = {name: open_store(p) for name, p in streams.items()}
    try:
        n = len(next(iter(stores.values())))
        row = sum(s.nbytes for s in stores.values()) / n
        step = max(1, int((64 << 20) // row))
        count = 0
        for lo in range(0, n, step):
            batch = {name: s[lo:min(lo + step, n)] for name, s in stores.items()}
            count += len(next(iter(batch.values())))
        return count
    finally:
        for s in stores.values():
            s.close()


def measure(fn: Any, streams: dict[str, Path], records: int, parallelism: int,
            repeats: int) -> float:
    """Best of `repeats` timed passes, in seconds, after one warm-up pass."""
    assert fn(streams, parallelism) == records
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        got = fn(streams, parallelism)
        best = min(best, time.perf_counter() - t)
        assert got == records, (got, records)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path,
                    default=Path(os.environ.get("LOADERX_BENCH_DATA", DEFAULT_DATA)))
    ap.add_argument("--workers", default="1,2", help="Ray CPU counts to measure")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks-per-worker", type=int, default=4,
                    help="read tasks = this * the largest worker count (the same split for all)")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    parallelism = args.tasks_per_worker * max(workers)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workloads = write_stores(args.data, Path(tmp))
        for name, (streams, records, nbytes) in workloads.items():
            s = measure(no_ray, streams, records, parallelism, args.repeats)
            rows.append((name, "no Ray, 1 thread", 1, records / s, nbytes / s / 2**20))
        for w in workers:
            ray.init(num_cpus=w, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            ctx.print_on_execution_start = False
            try:
                for name, (streams, records, nbytes) in workloads.items():
                    for consumer, fn in (("in workers", in_workers), ("driver", in_driver)):
                        s = measure(fn, streams, records, parallelism, args.repeats)
                        rows.append((name, consumer, w, records / s, nbytes / s / 2**20))
            finally:
                ray.shutdown()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs visible; {parallelism} read tasks; best of {args.repeats}; "
          f"load average at the end {load} (other jobs share the CPUs)\n")
    print("| workload | consumer | Ray workers | records/s | logical MiB/s | vs 1 worker |")
    print("|---|---|---:|---:|---:|---:|")
    base = {(r[0], r[1]): r[3] for r in rows if r[2] == workers[0]}
    rows.sort(key=lambda r: (r[0], r[1] != "no Ray, 1 thread", r[1], r[2]))
    for name, consumer, w, rps, mibs in rows:
        if consumer.startswith("no Ray"):
            print(f"| {name} | {consumer} | – | {rps:,.0f} | {mibs:,.0f} | – |")
        else:
            print(f"| {name} | {consumer} | {w} | {rps:,.0f} | {mibs:,.0f} | "
                  f"{rps / base[(name, consumer)]:.2f}x |")


if __name__ == "__main__":
    main()
