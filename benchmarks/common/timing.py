"""Timing: fresh random batches timed until enough seconds accumulate, writes timed on a clean
page cache, the row a timed backend makes, and each figure's median over rounds.

The methodology (benchmarks/README.md; the seed's "Benchmarks" section): gathers use fresh
uniform IID batches until at least `seconds` of timed calls accumulate; throughput is logical
(decoded payload) bytes per second; disk is allocated blocks. Before each timed write the page
cache's dirty pages are flushed, so that no write pays for another's; a durable write of another
library ends with `sync_tree`, as a careful user's would. Every backend is measured once per
round, `--rounds` times in turn, and the tables show per-backend medians (`median_rows`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def sync_tree(path: str) -> None:
    """Make what another library wrote at `path` durable, as a careful user would: fsync every
    file below it (on up to 16 threads, as our close() flushes its files), then every folder
    bottom-up, then the folder holding it. A single file is flushed with its folder."""
    from concurrent.futures import ThreadPoolExecutor

    def fsync(p: str) -> None:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if os.path.isdir(path):
        walk = list(os.walk(path))
        files = [os.path.join(d, f) for d, _, fs in walk for f in fs]
        folders = [d for d, _, _ in reversed(walk)]
    else:
        files, folders = [path], []
    with ThreadPoolExecutor(max(1, min(16, len(files)))) as pool:
        list(pool.map(fsync, files))
    for folder in [*folders, os.path.dirname(os.path.abspath(path))]:
        fsync(folder)


def timed_write(path: str, write: Callable[[str], None], nbytes: int,
                flush: Callable[[str], None] | None = None) -> float:
    """MiB/s of `write(path)` (then `flush(path)`, when given) on a clean page cache.

    Whatever is at `path` is removed and every dirty page of the machine is flushed first, so
    that the figure pays neither for earlier writes' writeback nor for the removal."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    if os.path.isfile(path):
        os.unlink(path)
    os.sync()
    t = time.perf_counter()
    write(path)
    if flush is not None:
        flush(path)
    return nbytes / (time.perf_counter() - t) / 2**20


def timed_batches(fn: Callable[[np.ndarray], object], n: int, batch: int, seconds: float,
                  seed: int) -> list[float]:
    """Per-call seconds of fn(fresh IID batch) until `seconds` accumulate (at least 20 calls)."""
    rng = np.random.default_rng(seed)
    times: list[float] = []
    total = 0.0
    while total < seconds or len(times) < 20:
        idx = rng.integers(0, n, batch)
        t = time.perf_counter()
        fn(idx)
        dt = time.perf_counter() - t
        times.append(dt)
        total += dt
    return times


def timed(loader_iter: Any, warmup: int, batches: int) -> float:
    """Batches/s of `batches` timed next() calls of a loader, after `warmup` untimed ones."""
    for _ in range(warmup):
        next(loader_iter)
    t = time.perf_counter()
    for _ in range(batches):
        next(loader_iter)
    return batches / (time.perf_counter() - t)


def summarize(name: str, times: list[float], batch: int, mean_record_bytes: float) -> dict[str, Any]:
    total = sum(times)
    records = batch * len(times)
    return {
        "backend": name,
        "batches": len(times),
        "mib_s": records * mean_record_bytes / total / 2**20,
        "krecords_s": records / total / 1e3,
        "p95_ms": float(np.percentile(times, 95)) * 1e3,
    }


METRICS = ("mib_s", "krecords_s", "p95_ms", "write_mib_s", "durable_mib_s", "disk_mib",
           # the device's sequential write ceiling of the row's round; bench_ragged.py's
           # append from a list of in-memory arrays
           "device_write_mib_s", "list_write_mib_s", "list_durable_mib_s",
           # bench_cold.py: cold-read and cold-loader figures
           "open_ms", "read_mib_batch", "resident_pct", "batches_per_s", "peak_pss_mib")


def median_rows(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per backend (in the first round's order): each metric's median over the rounds.

    This VM's speed drifts by 1.5-2x within minutes, so one pass of ours-then-peer can land on
    either side of a target; each round measures every backend once, in the same order, and
    every round's figures are kept under "rounds" so that paired per-round ratios can be shown.
    """
    by_round = [{r["backend"]: r for r in rows} for rows in rounds]
    out = []
    for first in rounds[0]:
        name = first["backend"]
        seen = [rows[name] for rows in by_round if name in rows]
        row = dict(first)
        row["rounds"] = {k: [r[k] for r in seen] for k in METRICS if k in first}
        for k, values in row["rounds"].items():
            row[k] = float(np.median(values))
        out.append(row)
    return out


def disk_bytes(path: str) -> int:
    """Allocated blocks of a file or of every file below a folder."""
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
    return total
