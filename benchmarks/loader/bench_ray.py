"""Scaling of loaderx.ray.read_zrecord with the number of Ray workers on this machine.

Two workloads from the prepared real data (benchmarks/README.md), each written once to
zrecord stores and read as a Ray Dataset by a local Ray instance with 1, then 2, ... CPUs:

  tokens  Ragged int32 GPT-2 token records (tokens.npy + offsets.npy), zstd, plus an aligned
          Dense int64 column (each record's length)
  vision  Dense uint8 (3, 224, 224) photographs (vision_dense.npy), raw

Consumers per setting, each after one untimed warm-up pass (page cache, worker start-up),
beside the baseline of the same stores read without Ray, in this process, on one thread
(measured again right before every timed pass of a consumer, so that "vs no Ray" compares
passes run under the same load):

  in workers        read_zrecord(...).map_batches(count) fused into the read tasks; only the
                    per-block counts reach the driver: the read path, plus Ray's conversion
                    of each block to NumPy batches (per record for Ragged columns)
  in workers/arrow  the same with batch_format="pyarrow": the read path without that
                    conversion
  driver            ds.iter_batches() in this process: every block travels through Ray's
                    object store to the driver and is converted to NumPy there
  driver/torch      ds.iter_torch_batches(collate_fn=TorchCollate()): the training path,
                    tensors in the driver without per-record work

--scale K writes every workload K times over (the records repeated), so that the fixed cost
of a Ray Data execution (planning, starting operators, scheduling the read tasks), measured
on its own as "fixed cost" (the same pipeline over one record per task), weighs less.

Prints a Markdown table of records/s and logical MiB/s (decoded payload bytes per second).

Usage: python benchmarks/loader/bench_ray.py [--data DIR] [--workers 1,2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray

from loaderx.ray import BLOCK_BYTES_TARGET, ZrecordDatasource, read_zrecord
from zrecord import Dense, Ragged, open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, which holds `common`
from common.data import default_data


def write_stores(data: Path, root: Path, scale: int = 1
                 ) -> dict[str, tuple[dict[str, Path], int, int]]:
    """{workload: (streams, records, logical bytes)}, every record written `scale` times."""
    tokens = np.load(data / "tokens.npy", mmap_mode="r")
    offsets = np.load(data / "offsets.npy")
    lengths = np.diff(offsets).astype(np.int64)
    pairs = list(zip(offsets[:-1].tolist(), offsets[1:].tolist()))
    with Ragged.create(root / "tokens", np.int32, 1, codec="zstd", sync=False) as w:
        w.append(tokens[a:b] for _ in range(scale) for a, b in pairs)
    with Dense.create(root / "length", np.int64, (), codec="raw", sync=False) as w:
        w.append(np.tile(lengths, scale))
    vision = np.load(data / "vision_dense.npy", mmap_mode="r")
    with Dense.create(root / "image", vision.dtype, vision.shape[1:], codec="raw",
                      sync=False) as w:
        for _ in range(scale):
            w.append(vision)
    return {
        "tokens": ({"tokens": root / "tokens", "length": root / "length"},
                   scale * len(lengths), scale * int(tokens.nbytes + lengths.nbytes)),
        "vision": ({"image": root / "image"}, scale * len(vision), scale * int(vision.nbytes)),
    }


def _count(batch: dict[str, Any]) -> dict[str, Any]:
    return {"rows": np.array([len(next(iter(batch.values())))], dtype=np.int64)}


def in_workers(streams: dict[str, Path], parallelism: int) -> int:
    ds = read_zrecord(streams, parallelism=parallelism).map_batches(_count, batch_size=None)
    # take_all() of the per-block counts: Dataset.sum() would add an aggregation stage
    # costing seconds, more than the read itself.
    return sum(int(r["rows"]) for r in ds.take_all())


def _count_arrow(batch: Any) -> dict[str, Any]:
    return {"rows": np.array([batch.num_rows], dtype=np.int64)}


def in_workers_arrow(streams: dict[str, Path], parallelism: int) -> int:
    ds = read_zrecord(streams, parallelism=parallelism).map_batches(
        _count_arrow, batch_size=None, batch_format="pyarrow")
    return sum(int(r["rows"]) for r in ds.take_all())


def in_driver(streams: dict[str, Path], parallelism: int) -> int:
    ds = read_zrecord(streams, parallelism=parallelism)
    return sum(len(next(iter(b.values()))) for b in ds.iter_batches(batch_size=None))


def in_driver_torch(streams: dict[str, Path], parallelism: int) -> int:
    from loaderx.ray import TorchCollate

    ds = read_zrecord(streams, parallelism=parallelism)
    first = next(iter(streams))
    return sum(len(b[first + "_shapes"] if first + "_shapes" in b else b[first])
               for b in ds.iter_torch_batches(batch_size=4096, collate_fn=TorchCollate()))


def fixed_cost(streams: dict[str, Path], parallelism: int, repeats: int) -> float:
    """Seconds of one execution of the in-workers pipeline over one record per read task."""
    ds = read_zrecord(streams, parallelism=parallelism).limit(parallelism)
    best = float("inf")
    for _ in range(repeats + 1):
        t = time.perf_counter()
        ds.map_batches(_count, batch_size=None).take_all()
        best = min(best, time.perf_counter() - t)
    return best


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
            repeats: int) -> tuple[float, float]:
    """(best seconds of `fn`, median of no_ray's time / fn's time over pairs of passes run
    back to back), after one warm-up pass. Pairing keeps the ratio fair when other jobs
    load the machine unevenly over the run."""
    assert fn(streams, parallelism) == records
    best = float("inf")
    ratios = []
    for _ in range(repeats):
        t = time.perf_counter()
        assert no_ray(streams, parallelism) == records
        direct = time.perf_counter() - t
        t = time.perf_counter()
        got = fn(streams, parallelism)
        elapsed = time.perf_counter() - t
        assert got == records, (got, records)
        best = min(best, elapsed)
        ratios.append(direct / elapsed)
    return best, float(np.median(ratios))


def profile(streams: dict[str, Path], records: int) -> dict[str, float]:
    """Seconds per pass of each stage of a read task and of its consumers, in this process,
    without Ray's scheduling: the gather, building the Arrow block, Ray's conversion of the
    block to NumPy (what iter_batches and map_batches do), and TorchCollate."""
    from ray.data.block import BlockAccessor

    from loaderx.ray import TorchCollate

    source = ZrecordDatasource(streams)
    columns = source._columns
    rows = max(1, int(BLOCK_BYTES_TARGET // max(1.0, source._row_bytes)))
    stores = {c.name: open_store(c.path) for c in columns}
    collate = TorchCollate()
    try:
        best: dict[str, float] = {}
        for _ in range(3):
            spent = dict.fromkeys(("gather", "arrow", "to_numpy", "torch_collate"), 0.0)
            for lo in range(0, records, rows):
                ids = np.arange(lo, min(lo + rows, records), dtype=np.uint64)
                t0 = time.perf_counter()
                values = {c.name: stores[c.name][ids] for c in columns}
                shapes = {c.name: stores[c.name].shapes(ids) for c in columns
                          if c.kind == "Ragged"}
                t1 = time.perf_counter()
                block = pa.Table.from_arrays([c.arrow(values[c.name], shapes.get(c.name))
                                              for c in columns], names=[c.name for c in columns])
                t2 = time.perf_counter()
                BlockAccessor.for_block(block).to_batch_format("numpy")
                t3 = time.perf_counter()
                collate(block)
                t4 = time.perf_counter()
                for key, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                    spent[key] += dt
            best = {k: min(v, best.get(k, v)) for k, v in spent.items()}
        return best
    finally:
        for store in stores.values():
            store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path(default_data()))
    ap.add_argument("--workers", default="1,2", help="Ray CPU counts to measure")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks-per-worker", type=int, default=4,
                    help="read tasks = this * the largest worker count (the same split for all)")
    ap.add_argument("--scale", type=int, default=1, help="write every workload this many times")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    parallelism = args.tasks_per_worker * max(workers)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workloads = write_stores(args.data, Path(tmp), args.scale)
        fixed = {}
        stages = {name: profile(streams, records)
                  for name, (streams, records, _) in workloads.items()}
        for name, (streams, records, nbytes) in workloads.items():
            s, _ = measure(no_ray, streams, records, parallelism, args.repeats)
            rows.append((name, "no Ray, 1 thread", 1, records / s, nbytes / s / 2**20, 1.0))
        for w in workers:
            ray.init(num_cpus=w, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            ctx.print_on_execution_start = False
            try:
                for name, (streams, records, nbytes) in workloads.items():
                    fixed[(name, w)] = fixed_cost(streams, parallelism, args.repeats)
                    for consumer, fn in (("in workers", in_workers),
                                         ("in workers/arrow", in_workers_arrow),
                                         ("driver", in_driver),
                                         ("driver/torch", in_driver_torch)):
                        s, ratio = measure(fn, streams, records, parallelism, args.repeats)
                        rows.append((name, consumer, w, records / s, nbytes / s / 2**20,
                                     ratio))
            finally:
                ray.shutdown()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs visible; {parallelism} read tasks; best of {args.repeats}; "
          f"scale {args.scale}; load average at the end {load} (other jobs share the CPUs)\n")
    print("| workload | consumer | Ray workers | records/s | logical MiB/s | vs 1 worker | "
          "vs no Ray (paired) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    base = {(r[0], r[1]): r[3] for r in rows if r[2] == workers[0]}
    rows.sort(key=lambda r: (r[0], r[1] != "no Ray, 1 thread", r[1], r[2]))
    for name, consumer, w, rps, mibs, ratio in rows:
        if consumer.startswith("no Ray"):
            print(f"| {name} | {consumer} | – | {rps:,.0f} | {mibs:,.0f} | – | 1.00x |")
        else:
            print(f"| {name} | {consumer} | {w} | {rps:,.0f} | {mibs:,.0f} | "
                  f"{rps / base[(name, consumer)]:.2f}x | {ratio:.2f}x |")
    print("\nWhere one pass's time goes, in this process without Ray's scheduling (best of 3):\n")
    print("| workload | gather | build Arrow block | Ray's block -> NumPy | TorchCollate |")
    print("|---|---:|---:|---:|---:|")
    for name, spent in stages.items():
        print(f"| {name} | " + " | ".join(f"{1e3 * spent[k]:,.0f} ms" for k in
                                          ("gather", "arrow", "to_numpy", "torch_collate")) + " |")
    print("\nFixed cost of one execution (one record per read task, in workers): " +
          ", ".join(f"{name} with {w} worker{'s' if w > 1 else ''} {1e3 * s:.0f} ms"
                    for (name, w), s in sorted(fixed.items())))


if __name__ == "__main__":
    main()
